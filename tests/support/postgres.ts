/**
 * A real PostgreSQL for the test suite and the benchmark
 * ({@linkcode testPostgres}): `TEST_DATABASE_URL` when set, otherwise a
 * throw-away cluster of its own. Neither ever starts, stops or alters a
 * cluster it did not create.
 *
 * @module
 */
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
