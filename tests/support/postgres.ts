/**
 * A real PostgreSQL for the test suite and the benchmark
 * ({@linkcode testPostgres}): `TEST_DATABASE_URL` when set, otherwise a
 * throw-away cluster of its own. Neither ever starts, stops or alters a
 * cluster it did not create.
 *
 * @module
 */
import { once } from "node:events";
import net from "node:net";
import postgres from "postgres";
import {
  clusterUnavailable,
  throwawayCluster,
} from "../../local/testing/cluster.ts";

/** A PostgreSQL for the suite, and how to let it go. */
export type TestPostgres =
  | { url: string; close(): Promise<void> }
  | { url: null; reason: string };

/**
 * `TEST_DATABASE_URL` when set (left as it is at the end), otherwise a
 * throw-away cluster in a temporary folder, deleted by `close()`.
 *
 * @example
 * ```ts
 * const pg = await testPostgres();
 * if (pg.url) {
 *   // run against pg.url
 *   await pg.close();
 * }
 * ```
 */
export async function testPostgres(): Promise<TestPostgres> {
  const configured = Deno.env.get("TEST_DATABASE_URL");
  if (configured) return { url: configured, close: async () => {} };
  const why = clusterUnavailable();
  if (why) return { url: null, reason: `no TEST_DATABASE_URL and ${why}` };
  try {
    const cluster = await throwawayCluster();
    return { url: cluster.url, close: () => cluster.destroy() };
  } catch (error) {
    return {
      url: null,
      reason: `no throw-away cluster: ${(error as Error).message}`,
    };
  }
}

/**
 * A postgres.js pool to `url` (one connection unless `options` says more,
 * no prepared statements) whose sockets a test can reach: `sockets` holds
 * each one it opened, the last at the end, and `onSocket` sees each first.
 * postgres.js takes a `socket` factory, though its types do not say so.
 *
 * @example
 * ```ts
 * const { sql, sockets } = poolWithSockets(url);
 * await sql`select 1`;
 * sockets.at(-1)!.destroy(); // the connection fails under it
 * ```
 */
export function poolWithSockets(
  url: string,
  options: postgres.Options<Record<string, never>> = {},
  onSocket: (socket: net.Socket) => void = () => {},
): { sql: postgres.Sql; sockets: net.Socket[] } {
  const { hostname, port } = new URL(url);
  const sockets: net.Socket[] = [];
  const sql = postgres(url, {
    max: 1,
    prepare: false,
    onnotice: () => {},
    ...options,
    socket: async () => {
      const socket = net.connect(Number(port), hostname);
      await once(socket, "connect");
      sockets.push(socket);
      onSocket(socket);
      return socket;
    },
  } as postgres.Options<Record<string, never>>);
  return { sql, sockets };
}
