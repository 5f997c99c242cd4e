/**
 * Headless Chromium for the demo page's browser test and screenshot:
 * Debian's `chromium` (`npx playwright install` cannot download here),
 * driven by `playwright-core`, with the flags a closed network needs.
 *
 * @module
 */
import { type Browser, chromium } from "playwright-core";

/** Starts Chromium (`CHROMIUM_PATH`, default `/usr/bin/chromium`). */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: Deno.env.get("CHROMIUM_PATH") ?? "/usr/bin/chromium",
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      // Without these, Chromium's own background connections are refused
      // by the closed network, many at a time.
      "--disable-background-networking",
      "--disable-component-update",
    ],
  });
}
