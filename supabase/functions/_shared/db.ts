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
