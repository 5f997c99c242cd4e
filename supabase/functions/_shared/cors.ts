/**
 * CORS headers for browser callers (`supabase.functions.invoke` from a web
 * app). Tokens travel in the `Authorization` header, never in cookies, so any
 * origin may call and credentials are never allowed.
 *
 * @module
 */

/** Headers added to every response, errors included. */
export const corsHeaders: Readonly<Record<string, string>> = Object.freeze({
  "Access-Control-Allow-Origin": "*",
  "Access-Control-Allow-Headers":
    "authorization, x-client-info, apikey, content-type, x-supabase-api-version",
  "Access-Control-Allow-Methods": "POST, OPTIONS",
  "Access-Control-Max-Age": "86400",
});
