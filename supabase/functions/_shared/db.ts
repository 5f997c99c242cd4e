/**
 * Direct Postgres access through `SUPABASE_DB_URL`: one small pool per
 * isolate, with settings that also work through Supabase's transaction
 * pooler.
 *
 * @module
 */
import postgres from "postgres";
import type { FunctionEnv } from "./env.ts";

/** The postgres.js client type used across the functions. */
export type Sql = postgres.Sql;

const _pools = new Map<string, Sql>();

/**
 * The isolate's pool for the environment's database, created on first use.
 *
 * `prepare: false` because Supabase's transaction pooler (port 6543) cannot
 * keep named prepared statements across transactions. Reconnection waits
 * at most about half a second between attempts (postgres.js's default grows
 * to 20 s), so pings answer again within 2 s of the database's return.
 *
 * @example
 * ```ts
 * const sql = database(readEnv(denoEnv));
 * const [row] = await sql`select 1 as one`;
 * ```
 */
export function database(env: Pick<FunctionEnv, "dbUrl" | "dbPoolMax">): Sql {
  let sql = _pools.get(env.dbUrl);
  if (!sql) {
    sql = postgres(env.dbUrl, {
      max: env.dbPoolMax,
      prepare: false,
      idle_timeout: 20,
      connect_timeout: 5,
      backoff: _reconnectDelay,
      max_lifetime: 60 * 30,
      onnotice: () => {},
      connection: { application_name: "presence-auth-functions" },
    });
    _pools.set(env.dbUrl, sql);
  }
  return sql;
}

/**
 * Closes this isolate's pools: the one for `url`, or all. For tests and the
 * local stack's shutdown; deployed isolates simply end.
 */
export async function closeDatabases(url?: string): Promise<void> {
  const urls = url === undefined ? [..._pools.keys()] : [url];
  await Promise.all(urls.map((u) => {
    const sql = _pools.get(u);
    _pools.delete(u);
    return sql?.end({ timeout: 5 });
  }));
}

// Seconds before reconnect attempt `retries`: 50 ms doubling to 500 ms, with
// jitter so that isolates do not reconnect in step.
function _reconnectDelay(retries: number): number {
  return (0.5 + Math.random() / 2) * Math.min(0.05 * 2 ** retries, 0.5);
}

/** Whether a Postgres error is `undefined_column` (SQLSTATE 42703). */
export function isUndefinedColumn(error: unknown): boolean {
  return error instanceof postgres.PostgresError && error.code === "42703";
}

// Conditions a client may be told about by name; anything else is named by
// its SQLSTATE class only.
const _PUBLIC_CONDITIONS: Record<string, string> = {
  "57014": "statement timeout",
  "55P03": "lock not available",
  "40001": "serialization failure",
  "40P01": "deadlock detected",
  "42703": "undefined column",
  "42P01": "undefined table",
  "42501": "insufficient privilege",
  "53300": "too many connections",
  "57P01": "database shutting down",
  "57P03": "database starting up",
};

// postgres.js's own codes, and the socket errors it passes on, for a
// database that could not be reached or dropped the connection.
const _CONNECTION_CODES = new Set([
  "CONNECT_TIMEOUT",
  "CONNECTION_CLOSED",
  "CONNECTION_ENDED",
  "CONNECTION_DESTROYED",
  "ECONNREFUSED",
  "ECONNRESET",
  "ENOTFOUND",
  "ETIMEDOUT",
  "EPIPE",
]);

/**
 * A description of a database failure that may be sent to any client: the
 * condition and its SQLSTATE, never the server's own message, which can
 * name a host, port, user, database or value. The full message goes to the
 * log line (redacted) instead.
 *
 * @example
 * ```ts
 * publicDbError(error); // "database unreachable (ECONNREFUSED)" or "statement timeout (SQLSTATE 57014)"
 * ```
 */
export function publicDbError(error: unknown): string {
  if (error instanceof postgres.PostgresError) {
    const name = _PUBLIC_CONDITIONS[error.code] ??
      `database error class ${error.code.slice(0, 2)}`;
    return `${name} (SQLSTATE ${error.code})`;
  }
  const code = (error as { code?: unknown })?.code;
  if (typeof code === "string" && _CONNECTION_CODES.has(code)) {
    return `database unreachable (${code})`;
  }
  return "database error";
}
