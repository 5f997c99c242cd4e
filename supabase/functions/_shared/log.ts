/**
 * Log lines and error details that may leave the process, with secrets
 * removed: no token, key, password or database URL is ever written.
 *
 * @module
 */
import { AsyncLocalStorage } from "node:async_hooks";

// The request a line is written for: set by the shared pipeline
// (`http.ts`) around each request's work, read by every logEvent under it,
// however deep, so that each line of a request carries its id without
// every module being handed it, and the fields its work adds to the
// request's own line (`noteOnRequest`). Edge Runtime ships node:async_hooks.
const _request = new AsyncLocalStorage<
  { readonly id: string; readonly notes: Record<string, unknown> }
>();

/**
 * Runs `fn` so that every line it logs, directly or in anything it awaits,
 * carries `request_id`; `notes` collects what it adds with
 * {@linkcode noteOnRequest}, for the request's own line.
 *
 * @example
 * ```ts
 * const notes = {};
 * await forRequest(crypto.randomUUID(), () => work(req), notes);
 * logEvent("info", "Request handled", notes);
 * ```
 */
export function forRequest<T>(
  requestId: string,
  fn: () => T,
  notes: Record<string, unknown> = {},
): T {
  return _request.run({ id: requestId, notes }, fn);
}

/**
 * Adds `fields` to the line the shared pipeline writes for the current
 * request (`http.ts`), instead of a line of their own: one line per
 * request. Outside a request, nothing.
 *
 * @example
 * ```ts
 * noteOnRequest({ actor_auth_user_id: identity.id });
 * ```
 */
export function noteOnRequest(fields: Record<string, unknown>): void {
  const request = _request.getStore();
  if (request) Object.assign(request.notes, fields);
}

// JWTs (access tokens, anon and service keys), Supabase's opaque API keys and
// credentials inside connection strings.
const _SECRET_PATTERNS: [RegExp, string][] = [
  [/eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.?[A-Za-z0-9_-]*/g, "[redacted]"],
  [/sb_(secret|publishable)_[A-Za-z0-9_-]+/g, "[redacted]"],
  [/([a-z][a-z0-9+.-]*:\/\/)[^\s/@]+@/gi, "$1[redacted]@"],
  // A password value follows a key and `=` or `:` (`password=…`,
  // `"password":"…"`); prose such as Auth's "Password should be at least
  // 6 characters." has neither and stays as it is.
  [/(password["']?\s*[=:]\s*["']?)[^\s,"'}&]+/gi, "$1[redacted]"],
];

/**
 * Removes anything that looks like a secret from a text.
 *
 * @example
 * ```ts
 * redact("connect to postgresql://postgres:pw@db:5432/postgres failed");
 * // "connect to postgresql://[redacted]@db:5432/postgres failed"
 * ```
 */
export function redact(text: string): string {
  let out = text;
  for (const [pattern, replacement] of _SECRET_PATTERNS) {
    out = out.replace(pattern, replacement);
  }
  return out;
}

/** The message of an unknown thrown value, redacted. */
export function errorText(error: unknown): string {
  if (error instanceof Error) return redact(error.message);
  return redact(String(error));
}

/**
 * Writes one structured log line, with the `request_id` of the request it
 * is written for ({@linkcode forRequest}). Every string field is redacted.
 *
 * @example
 * ```ts
 * logEvent("info", "Presence updated", { fn: "presence-ping", status: 200 });
 * ```
 */
export function logEvent(
  level: "info" | "warn" | "error",
  message: string,
  fields: Record<string, unknown> = {},
): void {
  const line: Record<string, unknown> = { level, msg: redact(message) };
  const requestId = _request.getStore()?.id;
  if (requestId !== undefined) line.request_id = requestId;
  for (const [key, value] of Object.entries(fields)) {
    line[key] = typeof value === "string" ? redact(value) : value;
  }
  const text = JSON.stringify(line);
  if (level === "error") console.error(text);
  else if (level === "warn") console.warn(text);
  else console.log(text);
}
