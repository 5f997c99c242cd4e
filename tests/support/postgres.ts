/**
 * A real PostgreSQL for the test suite: `TEST_DATABASE_URL` when set,
 * otherwise the machine's Debian cluster (`pg_lsclusters`), started and given
 * the password `postgres` when this runs as root.
 *
 * @module
 */
import postgres from "postgres";

/** Connection string of a reachable PostgreSQL, or `null` with the reason. */
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
