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
  { readonly id: string; readonly notes: RequestNotes }
>();

/** A log line's level. */
export type LogLevel = "info" | "warn" | "error";

/** Levels in order: PRESENCE_LOG_LEVEL's, and the higher of two. */
export const LOG_LEVEL_RANK: Readonly<Record<LogLevel, number>> = {
  info: 0,
  warn: 1,
  error: 2,
};

/** What a request's own line collects while it is worked on. */
export interface RequestNotes {
  /** Fields added to the line ({@linkcode noteOnRequest}). */
  readonly fields: Record<string, unknown>;
  /**
   * The least level of the line: raised by a note that wants an operator's
   * eye on an answer that is otherwise a success.
   */
  level: LogLevel;
}

/**
 * Runs `fn` so that every line it logs, directly or in anything it awaits,
 * carries `request_id`; `notes` collects what it adds with
 * {@linkcode noteOnRequest}, for the request's own line.
 *
 * @example
 * ```ts
 * const notes: RequestNotes = { fields: {}, level: "info" };
 * await forRequest(crypto.randomUUID(), () => work(req), notes);
 * logEvent(notes.level, "Request handled", notes.fields);
 * ```
 */
export function forRequest<T>(
  requestId: string,
  fn: () => T,
  notes: RequestNotes = { fields: {}, level: "info" },
): T {
  return _request.run({ id: requestId, notes }, fn);
}

/**
 * Adds `fields` to the line the shared pipeline writes for the current
 * request (`http.ts`), instead of a line of their own: one line per
 * request; `level` raises that line's level to at least this one. Outside
 * a request, nothing.
 *
 * @example
 * ```ts
 * noteOnRequest({ actor_auth_user_id: identity.id });
 * ```
 */
export function noteOnRequest(
  fields: Record<string, unknown>,
  level: LogLevel = "info",
): void {
  const request = _request.getStore();
  if (!request) return;
  Object.assign(request.notes.fields, fields);
  if (LOG_LEVEL_RANK[level] > LOG_LEVEL_RANK[request.notes.level]) {
    request.notes.level = level;
  }
}

// The names under which a secret value is written, as the end of a key
// (`password`, `new_password`, `client_secret`, `refresh_token`,
// `confirmation_token`, an email link's `token`, `token_hash`, a PKCE
// `code_verifier`, `apikey`). Matched from the start of a word only, so
// that the scan stays linear on long text.
const _SECRET_KEY = String
  .raw`(?<!\w)\w*(?:password|secret|token|token_hash|code_verifier|apikey|api_key)`;

// A key's value quoted, escaped quotes included.
const _QUOTED = String.raw`(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')`;

// A URL's scheme, from the start of a word.
const _SCHEME = String.raw`(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*:\/\/)`;

// JWTs (access tokens, anon and service keys), Supabase's opaque API keys,
// bearer tokens, credentials inside connection strings, and the values of
// secret-named keys. Prose such as Auth's "Password should be at least 6
// characters." or "invalid token: token is malformed" has no such key and
// stays as it is.
const _SECRET_PATTERNS: [RegExp, string][] = [
  [/eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.?[A-Za-z0-9_-]*/g, "[redacted]"],
  [/sb_(secret|publishable)_[A-Za-z0-9_-]+/g, "[redacted]"],
  [/(\bBearer\s+)[^\s"',]+/gi, "$1[redacted]"],
  // A URL's `user:password@`, the password up to the last `@` of the line
  // (typed with `@`, `/` or a space, not percent-encoded); then any other
  // userinfo. Neither crosses a quote, so JSON text keeps its other fields.
  [new RegExp(`${_SCHEME}[^\\s"/@]*:[^"\\n]*@`, "gi"), "$1[redacted]@"],
  [new RegExp(`${_SCHEME}[^\\s"]*@`, "gi"), "$1[redacted]@"],
  // An authorization code in a callback URL's query (PKCE).
  [/([?&]code=)[^&\s"']+/g, "$1[redacted]"],
  // `"key": "…"` (JSON), `key='…'` or `key="…"` (libpq), `key=value`.
  [
    new RegExp(`(${_SECRET_KEY}["']\\s*:\\s*)${_QUOTED}`, "gi"),
    '$1"[redacted]"',
  ],
  [new RegExp(`(${_SECRET_KEY}\\s*=\\s*)${_QUOTED}`, "gi"), "$1[redacted]"],
  [new RegExp(`(${_SECRET_KEY}\\s*=\\s*)[^\\s&"']+`, "gi"), "$1[redacted]"],
  // `password: value` unquoted (a password or a secret only: "token:"
  // is common in prose).
  [
    /((?<!\w)\w*(?:password|secret)\s*:\s*)[^\s,"'}&]+/gi,
    "$1[redacted]",
  ],
];

// The longest text redacted and logged, per string: longer text is cut
// (a log line is no place for a body, and the patterns stay cheap).
const _MAX_CHARS = 8192;

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
  let out = text.length > _MAX_CHARS
    ? `${text.slice(0, _MAX_CHARS)}… [cut]`
    : text;
  for (const [pattern, replacement] of _SECRET_PATTERNS) {
    out = out.replace(pattern, replacement);
  }
  return out;
}

// `value` with every string in it redacted, however deep (arrays, plain
// objects), and the value of a secret-named key removed whole; a URL as
// its redacted text; anything else as it is.
function _redacted(value: unknown, key = ""): unknown {
  if (_SECRET_NAME.test(key) && typeof value === "string") return "[redacted]";
  if (typeof value === "string") return redact(value);
  if (value instanceof URL) return redact(value.href);
  if (Array.isArray(value)) return value.map((v) => _redacted(v));
  if (
    value !== null && typeof value === "object" &&
    Object.getPrototypeOf(value) === Object.prototype
  ) {
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [k, _redacted(v, k)]),
    );
  }
  return value;
}

const _SECRET_NAME = new RegExp(`^${_SECRET_KEY}$`, "i");

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
  level: LogLevel,
  message: string,
  fields: Record<string, unknown> = {},
): void {
  const line: Record<string, unknown> = { level, msg: redact(message) };
  const requestId = _request.getStore()?.id;
  if (requestId !== undefined) line.request_id = requestId;
  for (const [key, value] of Object.entries(fields)) {
    line[key] = _redacted(value, key);
  }
  const text = JSON.stringify(line);
  if (level === "error") console.error(text);
  else if (level === "warn") console.warn(text);
  else console.log(text);
}
