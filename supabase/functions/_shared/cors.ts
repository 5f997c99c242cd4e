/**
 * CORS headers for browser callers (`supabase.functions.invoke` from a web
 * app). Tokens travel in the `Authorization` header, never in cookies, so any
 * origin may call and credentials are never allowed.
 *
 * @module
 */

/**
 * Request headers a browser may send: every header supabase-js's own
 * `corsHeaders` (`@supabase/supabase-js/cors`) lists (its keys, retries
 * and W3C trace context), plus `x-region`, which `functions.invoke(name,
 * { region })` sends, and `x-supabase-api-version`. A header missing here
 * fails the preflight, and the browser never sends the request.
 */
export const ALLOWED_HEADERS: readonly string[] = Object.freeze([
  "authorization",
  "x-client-info",
  "apikey",
  "content-type",
  "x-retry-count",
  "traceparent",
  "tracestate",
  "baggage",
  "x-region",
  "x-supabase-api-version",
]);

/**
 * Headers added to every response, errors included. `Retry-After` is
 * exposed: a browser hides every response header but a few from a page on
 * another origin (an app's page and its project's API always are), and the
 * client kit waits what a 503 or 409 asks for.
 */
export const corsHeaders: Readonly<Record<string, string>> = Object.freeze({
  "Access-Control-Allow-Origin": "*",
  "Access-Control-Allow-Headers": ALLOWED_HEADERS.join(", "),
  "Access-Control-Allow-Methods": "POST, OPTIONS",
  "Access-Control-Expose-Headers": "Retry-After",
  "Access-Control-Max-Age": "86400",
});
