/**
 * Which `redirect_to` (or Referer) a mailed link may send the browser back
 * to: Supabase Auth's `IsRedirectURLValid` (`internal/utilities/request.go`),
 * so that a redirect refused on a hosted project is refused locally too.
 *
 * @module
 */

import { isLoopbackHost } from "../../supabase/functions/_shared/db.ts";

/**
 * Whether `target` is an allowed redirect:
 * - back to `siteUrl`: same scheme, host and port (any port on a loopback
 *   host, RFC 8252 section 7.3);
 * - any loopback IP address; never another IP address;
 * - an http(s) URL whose host name has unusual characters never;
 * - otherwise one of `allowList` (config.toml `additional_redirect_urls`),
 *   matched without the fragment as Supabase Auth's globs match: `*` any
 *   run of characters but `.` and `/`, `**` any run, `?` one character but
 *   `.` and `/`, `{a,b}` either.
 *
 * @example
 * ```ts
 * isRedirectAllowed("http://127.0.0.1:3000", ["https://*.app.dev/**"], "https://pr-1.app.dev/x"); // true
 * ```
 */
export function isRedirectAllowed(
  siteUrl: string,
  allowList: readonly string[],
  target: string,
): boolean {
  if (target === "") return false;
  const site = URL.parse(siteUrl);
  const asked = URL.parse(target);
  if (!site || !asked) return false;
  const host = asked.hostname.replace(/^\[(.*)\]$/, "$1");
  if (
    asked.hostname === site.hostname && asked.protocol === site.protocol &&
    (asked.port === site.port || _isLocalhost(host))
  ) return true;
  if (/^[0-9]+$/.test(host)) return false;
  if (_isIp(host)) return isLoopbackHost(host);
  const http = asked.protocol === "http:" || asked.protocol === "https:";
  if (http && !/^[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?$/.test(host)) {
    return false;
  }
  const withoutFragment = target.split("#")[0];
  return allowList.some((pattern) => _glob(pattern).test(withoutFragment));
}

// `isLocalhost` of Supabase Auth's url_validator.go: these names, and any
// subdomain of localhost (`app.localhost`).
const _LOCALHOST = new Set(["localhost", "127.0.0.1", "::1", "0.0.0.0", "::"]);

function _isLocalhost(host: string): boolean {
  const name = host.toLowerCase();
  return _LOCALHOST.has(name) || name.endsWith(".localhost");
}

function _isIp(host: string): boolean {
  return /^\d{1,3}(\.\d{1,3}){3}$/.test(host) || host.includes(":");
}

// gobwas/glob compiled with '.' and '/' as separators, as Supabase Auth
// compiles each allowed URL.
function _glob(pattern: string): RegExp {
  let source = "";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === "*" && pattern[i + 1] === "*") {
      source += ".*";
      i++;
    } else if (c === "*") source += "[^./]*";
    else if (c === "?") source += "[^./]";
    else if (c === "{") source += "(?:";
    else if (c === "}") source += ")";
    else if (c === "," && _insideBraces(pattern, i)) source += "|";
    else if (c === "\\" && i + 1 < pattern.length) {
      source += _escape(pattern[++i]);
    } else source += _escape(c);
  }
  return new RegExp(`^${source}$`);
}

function _insideBraces(pattern: string, at: number): boolean {
  const before = pattern.slice(0, at);
  return before.lastIndexOf("{") > before.lastIndexOf("}");
}

function _escape(c: string): string {
  return c.replace(/[.+^${}()|[\]\\*?]/g, "\\$&");
}
