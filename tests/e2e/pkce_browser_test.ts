/**
 * The PKCE flow in headless Chromium against the local stack, as an app on
 * `@supabase/ssr` or `createClient({ auth: { flowType: "pkce" } })` runs
 * it: a page signs up, the person opens the mailed link in the same
 * browser, Auth redirects to the app with `?code=`, and supabase-js on
 * that page exchanges the code with the verifier it kept in localStorage. The app's pages are served by
 * playwright on the stack's own origin; supabase-js is the stack's copy of
 * its browser build.
 */
import assert from "node:assert/strict";
import type { Browser, Page } from "playwright-core";
import { launchChromium } from "../support/browser.ts";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { mails } from "../support/inbox.ts";
import { startTestStack, type TestStack } from "../support/stack.ts";

const stack: TestStack = await startTestStack({ emailConfirmations: true });
const browser: Browser = await launchChromium();
const WAIT = { timeout: 20_000 };

// The app, on its own origin as in the field: a page with supabase-js in
// the PKCE flow, its session in localStorage, and a code in the URL
// exchanged on load (detectSessionInUrl).
const APP = `<!doctype html>
<meta charset="utf-8">
<script src="${stack.apiUrl}/demo/vendor/supabase.js"></script>
<script>
  globalThis.sb = supabase.createClient(${JSON.stringify(stack.apiUrl)}, ${
  JSON.stringify(stack.publishableKey)
}, { auth: { flowType: "pkce" } });
  globalThis.ready = sb.auth.getSession();
</script>`;
const app = Deno.serve(
  { hostname: "127.0.0.1", port: 0, onListen() {} },
  () => new Response(APP, { headers: { "content-type": "text/html" } }),
);
const appUrl = `http://127.0.0.1:${app.addr.port}`;

async function appPage(): Promise<Page> {
  const context = await browser.newContext();
  return await context.newPage();
}

e2eTest(
  "pkce in a browser: sign-up, the mailed link opened in the same browser, and the page is signed in",
  async () => {
    const email = `pkce-${crypto.randomUUID().slice(0, 8)}@test.local`;
    const page = await appPage();
    try {
      await page.goto(`${appUrl}/app/`);
      const signUp = await page.evaluate(
        async ({ email, back }) => {
          // deno-lint-ignore no-explicit-any
          const sb = (globalThis as any).sb;
          const { data, error } = await sb.auth.signUp({
            email,
            password: "pkce-secret",
            options: { emailRedirectTo: back },
          });
          return { session: data.session, error: error?.message ?? null };
        },
        { email, back: `${appUrl}/app/callback` },
      );
      assert.deepEqual(signUp, { session: null, error: null });

      const [mail] = await mails(stack.apiUrl, email);
      assert.match(new URL(mail.link).searchParams.get("token")!, /^pkce_/);
      await page.goto(mail.link);
      const landed = new URL(page.url());
      assert.equal(landed.pathname, "/app/callback");
      assert.ok(landed.searchParams.get("code"), landed.href);

      const session = await page.evaluate(async () => {
        // deno-lint-ignore no-explicit-any
        const g = globalThis as any;
        const { data, error } = await g.ready;
        return {
          email: data.session?.user.email ?? null,
          error: error?.message ?? null,
        };
      });
      assert.deepEqual(session, { email, error: null });
      const [row] = await stack.sql`
      select email_confirmed_at is not null as confirmed from auth.users
      where email = ${email}`;
      assert.equal(row.confirmed, true);
      // The page's code was spent: opening the link again is refused.
      await page.goto(mail.link);
      await page.waitForURL(/error_code=otp_expired/, WAIT);
    } finally {
      await page.context().close();
    }
  },
);

e2eTest("pkce in a browser: the browser and the app close", async () => {
  await browser.close();
  assert.equal(browser.isConnected(), false);
  await app.shutdown();
});

closeStackAfterAll("pkce in a browser", stack);
