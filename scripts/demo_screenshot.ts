/**
 * Refreshes `docs/demo.png`, the README's picture of the demo page: a
 * throwaway local stack with the fixture (in-memory PGlite), bruno signed
 * in in one browser context, and ana's page captured from another once it
 * shows both online. Needs Debian's chromium, like the browser test.
 *
 *   deno run -A scripts/demo_screenshot.ts [out.png]
 *
 * @module
 */
import type { Page } from "playwright-core";
import { launchChromium } from "../tests/support/browser.ts";
import { startStack } from "../local/stack.ts";

const out = Deno.args[0] ?? "docs/demo.png";
const stack = await startStack({
  apiPort: 0,
  dbPort: 0,
  dataDir: null,
  log: () => {},
});
const browser = await launchChromium();
try {
  const signIn = async (email: string, password: string): Promise<Page> => {
    const context = await browser.newContext({
      viewport: { width: 720, height: 600 },
    });
    const page = await context.newPage();
    await page.goto(`${stack.apiUrl}/demo/?watch=300`);
    await page.fill('input[name="email"]', email);
    await page.fill('input[name="password"]', password);
    await page.click('button[type="submit"]');
    await page.waitForSelector("#me-state:text('online')");
    return page;
  };
  await signIn("bruno@example.com", "bruno-password");
  const ana = await signIn("ana@example.com", "ana-password");
  await ana.waitForFunction(() =>
    (globalThis as unknown as {
      document: { querySelectorAll(selector: string): { length: number } };
    }).document.querySelectorAll('#users li[data-status="online"]').length >= 2
  );
  await ana.screenshot({ path: out, fullPage: true });
  console.log(`Wrote ${out}`);
} finally {
  await browser.close();
  await stack.close();
}
