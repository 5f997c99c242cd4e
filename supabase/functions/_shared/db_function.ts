/**
 * Calls of the project's database functions (`presence.record_ping`,
 * `presence.match_usuario`): where one is missing or not executable, the
 * migrations were not applied, and the answer says which one to apply
 * instead of running a second implementation of its rules.
 *
 * @module
 */
import postgres from "postgres";
import { HttpError } from "./errors.ts";

/**
 * The last migration that makes the database functions as the code calls
 * them (`presence.match_usuario`, `presence.reader`, `presence.record_ping`
 * and the `presence.live_session` they call, `presence.rights_writable_by`):
 * applied up to it, they are all there.
 */
export const FUNCTIONS_MIGRATION =
  "20261125060000_rights_writable_by_follows_views_rules_and_inheritance.sql";

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
 * `migration_missing` naming {@linkcode FUNCTIONS_MIGRATION}. Any other
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
    throw new HttpError("migration_missing", {
      extra: {
        error:
          `${missing} is not callable: apply the migrations up to ${FUNCTIONS_MIGRATION}`,
      },
      cause: error,
    });
  }
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
