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
 * The migration that creates the database functions as the code calls
 * them (`presence.match_usuario`, `presence.reader`, `presence.record_ping`).
 */
export const FUNCTIONS_MIGRATION =
  "20261124020100_order_presence_record_ping.sql";

// Raised by the call itself (not inside the function: those carry a
// PL/pgSQL context): undefined function, unknown schema, no privilege.
const _MISSING = new Set(["42883", "3F000", "42501"]);

/**
 * Whether an error says the database function called is missing or not
 * executable, rather than that something inside it failed.
 */
export function isMissingFunction(error: unknown): boolean {
  return error instanceof postgres.PostgresError &&
    _MISSING.has(error.code) &&
    !(error.where ?? "").includes("PL/pgSQL");
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
    throw new HttpError("migration_missing", {
      extra: {
        error:
          `${name} is not callable: apply the migrations up to ${FUNCTIONS_MIGRATION}`,
      },
      cause: error,
    });
  }
}
