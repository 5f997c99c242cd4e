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

/** Headers added to every response, errors included. */
export const corsHeaders: Readonly<Record<string, string>> = Object.freeze({
  "Access-Control-Allow-Origin": "*",
  "Access-Control-Allow-Headers": ALLOWED_HEADERS.join(", "),
  "Access-Control-Allow-Methods": "POST, OPTIONS",
  "Access-Control-Max-Age": "86400",
});
