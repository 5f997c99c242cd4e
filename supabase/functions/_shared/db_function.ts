/**
 * Calls of the project's database functions (`presence.record_ping`,
 * `presence.match_usuario`, `presence.reader`,
 * `presence.rights_writable_by`) and statements on its tables: where a
 * function, a table or a column the migrations make is missing, the
 * migrations were not applied, and the answer says up to which one to
 * apply them instead of running a second implementation of its rules.
 *
 * @module
 */
import postgres from "postgres";
import { HttpError } from "./errors.ts";

/**
 * The newest migration of this repository: the functions are built and
 * tested against all of them (the database functions as the code calls
 * them, the columns it writes, such as the audit's `actor_key`), so a
 * database the migrations were applied to up to it has everything they
 * use. Its test keeps it the newest.
 */
export const LATEST_MIGRATION = "20261125070000_add_auth_sync_actor_key.sql";

// Raised by the call itself (not inside the function: those carry a
// PL/pgSQL context): undefined function, unknown schema, no privilege.
const _MISSING = new Set(["42883", "3F000", "42501"]);

// One of the project's functions named as undefined, wherever it was
// called from: one function of ours calling another the database lacks.
const _OURS_UNDEFINED = /\bfunction (presence\.\w+)\(/;

/**
 * Whether an error says a database function of the project is missing or
 * not executable (the one called, or one it calls), rather than that
 * something inside it failed.
 */
export function isMissingFunction(error: unknown): boolean {
  if (!(error instanceof postgres.PostgresError)) return false;
  if (!_MISSING.has(error.code)) return false;
  return !(error.where ?? "").includes("PL/pgSQL") || _oursUndefined(error);
}

function _oursUndefined(error: postgres.PostgresError): boolean {
  return error.code === "42883" && _OURS_UNDEFINED.test(error.message);
}

/**
 * Runs `call`; a missing or non-executable `name` becomes a 500
 * `migration_missing` naming {@linkcode LATEST_MIGRATION}. Any other
 * error is thrown as it is.
 *
 * @example
 * ```ts
 * const rows = await callingDbFunction("presence.match_usuario", () => sql`select …`);
 * ```
 */
export async function callingDbFunction<T>(
  name: string,
  call: () => Promise<T>,
): Promise<T> {
  try {
    return await call();
  } catch (error) {
    if (!isMissingFunction(error)) throw error;
    const missing = _OURS_UNDEFINED.exec((error as Error).message)?.[1] ?? name;
    throw _migrationMissing(`${missing} is not callable`, error);
  }
}

// Raised by a statement itself (no function's context): an undefined
// schema, table, column or function, by SQLSTATE.
const _UNDEFINED: Readonly<Record<string, string>> = {
  "3F000": "undefined schema",
  "42P01": "undefined table",
  "42703": "undefined column",
  "42883": "undefined function",
};

// Objects the migrations make: the schema presence and what is in it, the
// auth_sync_* tables.
const _OURS_NAMED = /\bpresence\b|\bauth_sync_\w+/;

// A statement's text, which postgres.js keeps on its errors: a column
// missing from a select names neither its table nor its schema.
function _statementOf(error: postgres.PostgresError): string {
  const query = (error as { query?: unknown }).query;
  return typeof query === "string" ? query : "";
}

/**
 * `error` as the 500 `migration_missing` when a statement (not a function
 * it called) on the project's objects (its message or text names the
 * schema `presence` or an `auth_sync_*` table) finds a schema, table,
 * column or function undefined: the migrations were not applied up to
 * {@linkcode LATEST_MIGRATION} (a column an older database lacks, such as
 * the audit's `actor_key`). `null` for anything else. The answer names the
 * condition and SQLSTATE, never the server's message.
 *
 * @example
 * ```ts
 * throw asMigrationMissing(error) ?? error;
 * ```
 */
export function asMigrationMissing(error: unknown): HttpError | null {
  if (
    !(error instanceof postgres.PostgresError) ||
    !Object.hasOwn(_UNDEFINED, error.code) || error.where ||
    !_OURS_NAMED.test(`${error.message}\n${_statementOf(error)}`)
  ) return null;
  return _migrationMissing(
    `${_UNDEFINED[error.code]} (SQLSTATE ${error.code})`,
    error,
  );
}

function _migrationMissing(what: string, cause: unknown): HttpError {
  return new HttpError("migration_missing", {
    extra: {
      error: `${what}: apply the migrations up to ${LATEST_MIGRATION}`,
    },
    cause,
  });
}

// Raised when a statement reads auth.sessions and auth.users: the auth
// schema is not as expected or not readable by this role (a changed Auth
// schema, revoked grants, a function it needs missing), rather than that
// the database is down.
const _AUTH_SCHEMA = new Set(["42501", "42P01", "42703", "42883", "3F000"]);

// Where the auth schema is read: presence.live_session, or a statement
// naming an auth relation.
const _AUTH_READ =
  /\blive_session\b|\bauth\.|schema auth\b|table (sessions|users)\b/;

/**
 * Whether an error of a fast path's statement (one that reads the auth
 * schema) says the schema cannot be read as expected: the fast path then
 * steps aside and Auth decides. Only an error raised where the auth schema
 * is read counts (its message or context names it): the same SQLSTATEs
 * from the `usuarios` side (a column type the functions cannot compare)
 * are that table's, and Auth would not fix them.
 */
export function isAuthSchemaError(
  error: unknown,
): error is postgres.PostgresError {
  return error instanceof postgres.PostgresError &&
    _AUTH_SCHEMA.has(error.code) &&
    _AUTH_READ.test(`${error.message} ${error.where ?? ""}`) &&
    !_oursUndefined(error);
}

// What may be written into a call's text (see {@linkcode uuidLiteral} and
// {@linkcode domainsLiteral}): nothing that can end a SQL string literal.
const _UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
// The shape env.ts accepts for USERNAME_MATCH_DOMAINS: letters, digits,
// hyphens and dots, or `*`.
const _DOMAIN =
  /^(\*|[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*)$/;

/**
 * `simple: false`: the extended protocol, which runs one statement only (a
 * second one in the text would be an error, not a statement), in one
 * flight when the text has no parameters: postgres.js with `prepare: false`
 * otherwise waits for the parameter types before binding. postgres.js
 * honours the option, its types do not list it.
 */
export const ONE_FLIGHT = { simple: false } as postgres.UnsafeQueryOptions;

/**
 * A UUID as a SQL literal, for a call sent as text ({@linkcode ONE_FLIGHT});
 * anything else throws, and nothing is sent.
 *
 * @example
 * ```ts
 * uuidLiteral("1b4e28ba-2fa1-11d2-883f-0016d3cca427"); // "'1b4e…a427'::uuid"
 * ```
 */
export function uuidLiteral(value: string): string {
  if (!_UUID.test(value)) throw new TypeError("not a UUID");
  return `'${value}'::uuid`;
}

/**
 * Domain names (or `*`) as a SQL `text[]` literal, for a call sent as text;
 * anything but letters, digits, `-` and `.` throws, and nothing is sent.
 *
 * @example
 * ```ts
 * domainsLiteral(new Set(["example.com"])); // "array['example.com']::text[]"
 * ```
 */
export function domainsLiteral(domains: Iterable<string>): string {
  const list = [...domains];
  if (!list.every((d) => _DOMAIN.test(d))) {
    throw new TypeError("not a domain name");
  }
  return list.length
    ? `array[${list.map((d) => `'${d}'`).join(",")}]::text[]`
    : "'{}'::text[]";
}
