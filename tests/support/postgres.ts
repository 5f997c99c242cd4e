/**
 * A real PostgreSQL for the test suite and the benchmark.
 *
 * The suite ({@linkcode testPostgres}) uses `TEST_DATABASE_URL` when set,
 * otherwise a throw-away cluster of its own; it never starts, stops or
 * alters a cluster it did not create. The benchmark
 * ({@linkcode ensurePostgres}) measures the machine's own Debian cluster.
 *
 * @module
 */
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
 * For the benchmark, which measures the machine's PostgreSQL:
 * `TEST_DATABASE_URL` when set, otherwise the machine's Debian cluster
 * (`pg_lsclusters`), started and given the password `postgres` when this
 * runs as root. Never used by the test suite.
 */
export async function ensurePostgres(): Promise<
  { url: string } | { url: null; reason: string }
> {
  const configured = Deno.env.get("TEST_DATABASE_URL");
  if (configured) return { url: configured };
  const clusters = await _run("pg_lsclusters", ["--no-header"]);
  if (clusters === null) {
    return { url: null, reason: "no TEST_DATABASE_URL and no pg_lsclusters" };
  }
  const [version, name, port] = clusters.trim().split(/\s+/);
  if (!version) return { url: null, reason: "pg_lsclusters lists no cluster" };
  // Starting an already running cluster fails harmlessly.
  await _run("pg_ctlcluster", [
    "--skip-systemctl-redirect",
    version,
    name,
    "start",
  ]);
  await _run("su", [
    "postgres",
    "-c",
    `psql -p ${port} -qc "alter role postgres password 'postgres'"`,
  ]);
  const url = `postgresql://postgres:postgres@127.0.0.1:${port}/postgres`;
  const sql = postgres(url, { max: 1, connect_timeout: 5, onnotice: () => {} });
  try {
    for (let attempt = 0;; attempt++) {
      try {
        await sql`select 1`;
        return { url };
      } catch (error) {
        if (attempt >= 20) {
          return {
            url: null,
            reason: `cannot connect: ${(error as Error).message}`,
          };
        }
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  } finally {
    await sql.end();
  }
}

async function _run(cmd: string, args: string[]): Promise<string | null> {
  try {
    const out = await new Deno.Command(cmd, {
      args,
      stdout: "piped",
      stderr: "null",
      stdin: "null",
    }).output();
    return new TextDecoder().decode(out.stdout);
  } catch {
    return null;
  }
}
