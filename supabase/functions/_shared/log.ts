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

// The names under which a secret value is written: a password, Auth's
// tokens (a refresh token, an email link's `token`, a PKCE verifier) and
// keys. A password or secret under any prefix (`new_password`,
// `client_secret`); the token names whole (`invalid_token` is a code).
const _SECRET_KEYS =
  "(?:password|secret|\\b(?:refresh_token|access_token|token|token_hash|code_verifier|apikey|api_key))";

// JWTs (access tokens, anon and service keys), Supabase's opaque API keys and
// credentials inside connection strings.
const _SECRET_PATTERNS: [RegExp, string][] = [
  [/eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.?[A-Za-z0-9_-]*/g, "[redacted]"],
  [/sb_(secret|publishable)_[^\s"',&]+/g, "[redacted]"],
  // Everything up to a URL's last `@` before a space: a password may hold
  // `@` or `/` (typed without percent-encoding). More is removed than the
  // credentials where a URL's path holds an `@`: no loss for a log.
  [/([a-z][a-z0-9+.-]*:\/\/)[^\s]*@/gi, "$1[redacted]@"],
  // A secret value follows its key and `=` or `:` (`password=…`,
  // `"refresh_token":"…"`); prose such as Auth's "Password should be at
  // least 6 characters." has neither and stays as it is. A JSON string is
  // removed to its closing quote, escaped quotes included; a `key=value`
  // to the next space or `&`.
  [
    new RegExp(`("\\w*${_SECRET_KEYS}"\\s*:\\s*")(?:[^"\\\\]|\\\\.)*`, "gi"),
    "$1[redacted]",
  ],
  [new RegExp(`(${_SECRET_KEYS}\\s*=\\s*)[^\\s&]+`, "gi"), "$1[redacted]"],
  [
    new RegExp(`(${_SECRET_KEYS}["']?\\s*:\\s*["']?)[^\\s,"'}&]+`, "gi"),
    "$1[redacted]",
  ],
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

// `value` with every string in it redacted, however deep (arrays, plain
// objects); anything else as it is.
function _redacted(value: unknown): unknown {
  if (typeof value === "string") return redact(value);
  if (Array.isArray(value)) return value.map(_redacted);
  if (
    value !== null && typeof value === "object" &&
    Object.getPrototypeOf(value) === Object.prototype
  ) {
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [k, _redacted(v)]),
    );
  }
  return value;
}

/** The message of an unknown thrown value, redacted. */
export function errorText(error: unknown): string {
  if (error instanceof Error) return redact(error.message);
  return redact(String(error));
}

/**
 * Writes one structured log line, with the `request_id` of the request it
 * is written for ({@linkcode forRequest}). Every string in its fields is
 * redacted, however deep.
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
    line[key] = _redacted(value);
  }
  const text = JSON.stringify(line);
  if (level === "error") console.error(text);
  else if (level === "warn") console.warn(text);
  else console.log(text);
}
