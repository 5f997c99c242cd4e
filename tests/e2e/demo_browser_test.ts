/**
 * The demo page (`/demo/`, client/demo.html) in headless Chromium, driven
 * by playwright-core against the local stack: two users in two browser
 * contexts see each other online, a hidden tab pauses its pings, a user who
 * signs out goes offline for the other, the page says when the API is
 * down, and a device back on the network pings and reads again at once.
 *
 * Needs Debian's chromium (`apt-get install chromium`; `.ci/run` installs
 * it). The README's screenshot comes from scripts/demo_screenshot.ts.
 */
import assert from "node:assert/strict";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { launchChromium } from "../support/browser.ts";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { startTestStack, type TestStack } from "../support/stack.ts";

// Short waits so that the test runs in seconds; the page reads them.
const DEMO_PATH = "/demo/?interval=1000&watch=250&backoff=200";
const WAIT = { timeout: 20_000 };

const stack: TestStack = await startTestStack();
const browser: Browser = await launchChromium();

async function member(name: string) {
  return await stack.createUser({
    email: `${name}-${crypto.randomUUID().slice(0, 8)}@test.local`,
    row: {
      nombre_usuario: `${name}-${crypto.randomUUID().slice(0, 4)}`,
      auth_user_id: true,
    },
  });
}

/**
 * The demo page signed in as `user`, in a fresh browser context or as
 * another tab of `context`.
 */
async function signedIn(
  user: { email: string; password: string },
  context?: BrowserContext,
  path = DEMO_PATH,
): Promise<Page> {
  context ??= await browser.newContext({
    viewport: { width: 720, height: 560 },
  });
  const page = await context.newPage();
  await page.goto(`${stack.apiUrl}${path}`);
  await page.fill('input[name="email"]', user.email);
  await page.fill('input[name="password"]', user.password);
  await page.click('button[type="submit"]');
  await page.waitForSelector("#me-state:text('online')", WAIT);
  return page;
}

function userItem(id: number, status: string): string {
  return `#users li[data-id="${id}"][data-status="${status}"]`;
}

function pings(page: Page): Promise<number> {
  return page.evaluate(() =>
    (globalThis as unknown as { presenceDemo: { pings: number } })
      .presenceDemo.pings
  );
}

// What a browser does when a tab goes to the background or comes back.
async function setHidden(page: Page, hidden: boolean): Promise<void> {
  await page.evaluate((hidden) => {
    const doc = (globalThis as unknown as {
      document: EventTarget & { visibilityState: string };
    }).document;
    Object.defineProperty(doc, "visibilityState", {
      configurable: true,
      get: () => hidden ? "hidden" : "visible",
    });
    doc.dispatchEvent(new Event("visibilitychange"));
  }, hidden);
}

async function lastAccess(id: number): Promise<string> {
  const [r] = await stack.sql`
    select ultimo_acceso::text as t from public.usuarios where id = ${id}`;
  return r.t;
}

e2eTest(
  "demo page: two users see each other online; a hidden tab pauses its pings; sign-out shows offline",
  async () => {
    const ana = await member("ana");
    const bruno = await member("bruno");
    const pageA = await signedIn(ana);
    const pageB = await signedIn(bruno);
    try {
      await pageA.waitForSelector(userItem(bruno.rowId!, "online"), WAIT);
      await pageB.waitForSelector(userItem(ana.rowId!, "online"), WAIT);
      await pageA.waitForSelector(userItem(ana.rowId!, "online"), WAIT);
      assert.equal(await pageA.textContent("#me-id"), String(ana.rowId));

      // The page pings on its interval while shown...
      await pageB.waitForFunction(
        () =>
          (globalThis as unknown as { presenceDemo: { pings: number } })
            .presenceDemo.pings >= 3,
        undefined,
        WAIT,
      );
      // ...and not while hidden: neither the page's count nor the row moves
      // over many intervals.
      await setHidden(pageB, true);
      await pageB.waitForSelector("#me-state:text('paused')", WAIT);
      const hiddenPings = await pings(pageB);
      const hiddenAccess = await lastAccess(bruno.rowId!);
      const anaPings = await pings(pageA);
      await pageA.waitForFunction(
        (n) =>
          (globalThis as unknown as { presenceDemo: { pings: number } })
            .presenceDemo.pings >= n + 4,
        anaPings,
        WAIT,
      );
      assert.equal(await pings(pageB), hiddenPings);
      assert.equal(await lastAccess(bruno.rowId!), hiddenAccess);
      // Shown again: a ping at once.
      await setHidden(pageB, false);
      await pageB.waitForFunction(
        (n) =>
          (globalThis as unknown as { presenceDemo: { pings: number } })
            .presenceDemo.pings > n,
        hiddenPings,
        WAIT,
      );
      assert.notEqual(await lastAccess(bruno.rowId!), hiddenAccess);

      await pageA.click("#sign-out");
      await pageA.waitForSelector("#sign-in", { state: "visible", ...WAIT });
      await pageB.waitForSelector(userItem(ana.rowId!, "offline"), WAIT);
      const [row] = await stack.sql`
        select presence_state from public.usuarios where id = ${ana.rowId!}`;
      assert.equal(row.presence_state, "offline");
    } finally {
      await pageA.context().close();
      await pageB.context().close();
    }
  },
);

e2eTest(
  "demo page: a sign-in submitted twice (a double click) makes one kit",
  async () => {
    const erin = await member("erin");
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      await page.goto(`${stack.apiUrl}${DEMO_PATH}`);
      await page.fill('input[name="email"]', erin.email);
      await page.fill('input[name="password"]', erin.password);
      await page.evaluate(() => {
        const form = (globalThis as unknown as {
          document: { getElementById(id: string): { requestSubmit(): void } };
        }).document.getElementById("sign-in");
        form.requestSubmit();
        form.requestSubmit();
      });
      await page.waitForFunction(
        () =>
          (globalThis as unknown as {
            presenceDemo: { signInsHandled: number };
          })
            .presenceDemo.signInsHandled === 2,
        undefined,
        WAIT,
      );
      await page.waitForSelector("#me-state:text('online')", WAIT);
      const kits = await page.evaluate(() =>
        (globalThis as unknown as { presenceDemo: { kitsMade: number } })
          .presenceDemo.kitsMade
      );
      assert.equal(kits, 1);
    } finally {
      await context.close();
    }
  },
);

e2eTest(
  "demo page: two tabs of one user are one presence: closing one leaves the user online, closing both sets offline",
  async () => {
    const dana = await member("dana");
    const context = await browser.newContext();
    try {
      const tab1 = await signedIn(dana, context);
      const tab2 = await signedIn(dana, context);
      const row = async () => {
        const [r] = await stack.sql`
          select presence_state, last_manual_logout_at
          from public.usuarios where id = ${dana.rowId!}`;
        return r;
      };
      await tab1.close({ runBeforeUnload: true });
      // Long enough for the closing tab's keepalive offline to land, had
      // it sent one; the user never went offline (last_manual_logout_at is
      // what an offline ping sets).
      await new Promise((r) => setTimeout(r, 1500));
      assert.deepEqual(await row(), {
        presence_state: "online",
        last_manual_logout_at: null,
      });
      await tab2.close({ runBeforeUnload: true });
      const deadline = Date.now() + WAIT.timeout;
      while ((await row()).presence_state !== "offline") {
        assert.ok(Date.now() < deadline, "offline after the last tab closed");
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      await context.close();
    }
  },
);

e2eTest(
  "demo page: says the API is down while the functions cannot be reached",
  async () => {
    const carla = await member("carla");
    const page = await signedIn(carla);
    try {
      assert.equal(await page.isVisible("#api-down"), false);
      await page.route("**/functions/v1/**", (route) => route.abort());
      await page.waitForSelector("#api-down", { state: "visible", ...WAIT });
      assert.match(
        (await page.textContent("#api-down")) ?? "",
        /presence API is not reachable/,
      );
      await page.unroute("**/functions/v1/**");
      await page.waitForSelector("#api-down", { state: "hidden", ...WAIT });
    } finally {
      await page.context().close();
    }
  },
);

e2eTest(
  "demo page: a device back on the network pings and refreshes the list at once, not after the backoff",
  async () => {
    const emma = await member("emma");
    const felix = await member("felix");
    // A first wait of at least 60 s after a failure: only the browser's
    // `online` event can bring the kit back within WAIT.
    const page = await signedIn(
      emma,
      undefined,
      "/demo/?interval=1000&watch=250&backoff=60000",
    );
    try {
      await page.waitForSelector(userItem(felix.rowId!, "offline"), WAIT);
      await page.context().setOffline(true);
      await page.waitForSelector("#me-state:text('retrying')", WAIT);
      await page.waitForSelector("#api-down", { state: "visible", ...WAIT });
      // Felix comes online while Emma's device has no network.
      const felt = await felix.client.functions.invoke("presence-ping", {
        body: { state: "online" },
      });
      assert.equal(felt.error, null);
      const before = await pings(page);
      await page.context().setOffline(false);
      await page.waitForSelector("#me-state:text('online')", WAIT);
      assert.ok(await pings(page) > before);
      await page.waitForSelector(userItem(felix.rowId!, "online"), WAIT);
      await page.waitForSelector("#api-down", { state: "hidden", ...WAIT });
    } finally {
      await page.context().close();
    }
  },
);

e2eTest(
  "demo page: a failed sign-in because the API is down says so",
  async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    try {
      await page.goto(`${stack.apiUrl}${DEMO_PATH}`);
      await page.route("**/auth/v1/**", (route) => route.abort());
      await page.fill('input[name="email"]', "ana@example.com");
      await page.fill('input[name="password"]', "ana-password");
      await page.click('button[type="submit"]');
      await page.waitForSelector("#api-down", { state: "visible", ...WAIT });
    } finally {
      await context.close();
    }
  },
);

e2eTest(
  "demo page: an account without a usuarios row is told so",
  async () => {
    const nobody = await stack.createUser();
    const context = await browser.newContext();
    const page = await context.newPage();
    try {
      await page.goto(`${stack.apiUrl}${DEMO_PATH}`);
      await page.fill('input[name="email"]', nobody.email);
      await page.fill('input[name="password"]', nobody.password);
      await page.click('button[type="submit"]');
      await page.waitForSelector("#me-state:text('not_found')", WAIT);
      assert.match(
        (await page.textContent("#notice")) ?? "",
        /no row in usuarios/,
      );
      assert.equal(await page.isVisible("#api-down"), false);
    } finally {
      await context.close();
    }
  },
);

e2eTest(
  "functions from another origin (an app's page calling its project): supabase-js's functions.invoke reads a 503's Retry-After, which the kit waits",
  async () => {
    const user = await member("cors");
    // The functions with Auth down, on another port: another origin than
    // the page's, as an app's page and its project's API are.
    const served = await stack.withFunctionEnv({
      SUPABASE_URL: "http://127.0.0.1:1",
    });
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      await page.goto(`${stack.apiUrl}${DEMO_PATH}`);
      const seen = await page.evaluate(
        async ({ url, key, token }) => {
          // deno-lint-ignore no-explicit-any
          const sb = (globalThis as any).supabase.createClient(url, key, {
            auth: { persistSession: false },
          });
          const { error } = await sb.functions.invoke("presence-ping", {
            body: { state: "online" },
            headers: { authorization: `Bearer ${token}` },
          });
          return {
            status: error.context.status,
            retryAfter: error.context.headers.get("retry-after"),
          };
        },
        { url: served.apiUrl, key: stack.publishableKey, token: user.token },
      );
      assert.deepEqual(seen, { status: 503, retryAfter: "5" });
    } finally {
      await context.close();
      await served.close();
    }
  },
);

/** Waits until `done()` holds (`WAIT.timeout` at most), failing with `what`. */
async function until(done: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + WAIT.timeout;
  while (!done()) {
    assert.ok(Date.now() < deadline, what);
    await new Promise((r) => setTimeout(r, 50));
  }
}

e2eTest(
  "demo page: the tabs of one user read the presence API as one: one tab polls, every tab shows another user's pings; when that tab is hidden, crashes or closes, another polls",
  async () => {
    const gil = await member("gil");
    const hana = await member("hana");
    const context = await browser.newContext();
    // The presence reads each tab sends (not its presence-ping pings).
    const reads = new Map<Page, number>();
    context.on("request", (request) => {
      if (!request.url().endsWith("/functions/v1/presence")) return;
      const page = request.frame().page();
      reads.set(page, (reads.get(page) ?? 0) + 1);
    });
    const readsOf = (page: Page) => reads.get(page) ?? 0;
    const total = () => [...reads.values()].reduce((a, b) => a + b, 0);
    const ping = async (state: "online" | "offline") => {
      const { error } = await hana.client.functions.invoke("presence-ping", {
        body: { state },
      });
      assert.equal(error, null);
    };
    // Reads per interval (250 ms) while the tabs watch, logged for the
    // record: never asserted, only the counts per tab are.
    const window = async (tabs: Page[], when: string) => {
      reads.clear();
      const from = Date.now();
      await until(() => total() >= 12, "reads go on");
      const intervals = (Date.now() - from) / 250;
      console.log(
        `presence reads per interval, ${tabs.length} tab(s) ${when}: ${
          (total() / intervals).toFixed(2)
        }`,
      );
      const polling = tabs.filter((tab) => readsOf(tab) > 0);
      assert.equal(polling.length, 1, "one tab sends the reads");
      return polling[0];
    };
    try {
      const tabs = [await signedIn(gil, context)];
      await window(tabs, "open");
      tabs.push(await signedIn(gil, context));
      await window(tabs, "open");
      tabs.push(await signedIn(gil, context));
      for (const tab of tabs) {
        const state = await tab.evaluate(() =>
          (globalThis as unknown as {
            document: { visibilityState: string };
          }).document.visibilityState
        );
        assert.equal(state, "visible");
      }
      await ping("online");
      for (const tab of tabs) {
        await tab.waitForSelector(userItem(hana.rowId!, "online"), WAIT);
      }
      const leader = await window(tabs, "open");
      await ping("offline");
      for (const tab of tabs) {
        await tab.waitForSelector(userItem(hana.rowId!, "offline"), WAIT);
      }
      assert.equal(total(), readsOf(leader), "still one tab");

      // The polling tab is hidden (it pauses): a visible one polls. Shown
      // again, the first one is handed the map and does not poll.
      await setHidden(leader, true);
      const second = await window(tabs, "open, the polling one hidden");
      assert.notEqual(second, leader);
      await ping("online");
      await setHidden(leader, false);
      for (const tab of tabs) {
        await tab.waitForSelector(userItem(hana.rowId!, "online"), WAIT);
      }
      assert.equal(total(), readsOf(second), "the shown tab does not poll");

      // The polling tab crashes (the browser frees its lock), then the next
      // one closes: each time one of the tabs left polls, and they all
      // still see changes.
      const cdp = await context.newCDPSession(second);
      const crashed = second.waitForEvent("crash", WAIT);
      cdp.send("Page.crash").catch(() => {});
      await crashed;
      tabs.splice(tabs.indexOf(second), 1);
      const third = await window(tabs, "left after a crash");
      await ping("offline");
      for (const tab of tabs) {
        await tab.waitForSelector(userItem(hana.rowId!, "offline"), WAIT);
      }
      await third.close({ runBeforeUnload: true });
      tabs.splice(tabs.indexOf(third), 1);
      await window(tabs, "left after a close");
      await ping("online");
      await tabs[0].waitForSelector(userItem(hana.rowId!, "online"), WAIT);
    } finally {
      await context.close();
    }
  },
);

e2eTest("demo page: the browser closes", async () => {
  await browser.close();
  assert.equal(browser.isConnected(), false);
});

closeStackAfterAll("demo page", stack);
