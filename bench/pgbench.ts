/**
 * The database ceiling: the statements presence-ping sends per ping, as
 * the counting proxy captured them, replayed by `pgbench` at the same
 * concurrency with users rotating (`\set n random(1, N)`).
 *
 * A captured parameter that is one of the sample user's names (id, session,
 * email, username), or such a name written into the text as a quoted
 * literal, becomes the same name rebuilt in SQL from `:n`; any other value
 * (the state, an interval) stays the literal the handler sent.
 *
 * @module
 */
import type postgres from "postgres";
import { type LoadResult, percentiles } from "./load.ts";
import type { SeenStatement } from "./pgproxy.ts";
import { USER_NAMING } from "./users.ts";

/** A statement ready for pgbench and for EXPLAIN. */
export interface ReplayStatement {
  /** For pgbench: parameters replaced by expressions of `:n`. */
  readonly pgbench: string;
  /** For one user: parameters replaced by literals. */
  literalFor(n: number): string;
}

/**
 * Turns captured statements (with sample parameters of user `sampleUser`)
 * into replayable SQL. `typeNames` maps parameter type OIDs to names;
 * pass the types the server infers (`sql.unsafe(text).describe()`), since
 * drivers often declare none.
 */
export function replayStatements(
  seen: readonly SeenStatement[],
  sampleUser: number,
  typeNames: ReadonlyMap<number, string>,
): ReplayStatement[] {
  return seen.map((s) => {
    const params = s.sampleParams ?? [];
    // Where the SQL casts a parameter itself, it needs no cast of ours.
    const castInText = new Set(
      [...s.text.matchAll(/\$(\d+)::/g)].map((m) => Number(m[1]) - 1),
    );
    const forms = params.map((value, i) => {
      const type = castInText.has(i) ? undefined : typeNames.get(
        s.paramTypes[i] ?? 0,
      );
      const cast = (expr: string) => type ? `(${expr})::${type}` : expr;
      const named = _nameOf(value, sampleUser);
      return {
        pgbench: named ? cast(USER_NAMING.sql[named](":n")) : cast(
          _literal(value),
        ),
        literal: (n: number) =>
          cast(named ? _literal(USER_NAMING[named](n)) : _literal(value)),
      };
    });
    // The sample user's names written into the text (a statement sent
    // without parameters) are rebuilt from :n too.
    const written = _NAMES.map((name) => ({
      name,
      quoted: _literal(USER_NAMING[name](sampleUser)),
    })).filter((w) => s.text.includes(w.quoted));
    const rewrite = (text: string, as: (name: _Named) => string) =>
      written.reduce((t, w) => t.replaceAll(w.quoted, as(w.name)), text);
    const substitute = (pick: (i: number) => string, n: number | null) =>
      rewrite(
        s.text,
        (name) =>
          n === null
            ? USER_NAMING.sql[name](":n")
            : _literal(USER_NAMING[name](n)),
      ).replace(/\$(\d+)/g, (_, d) => pick(Number(d) - 1));
    return {
      pgbench: substitute((i) => forms[i]?.pgbench ?? "null", null),
      literalFor: (n: number) =>
        substitute((i) => forms[i]?.literal(n) ?? "null", n),
    };
  });
}

/** Names of the type OIDs `oids`, from `pg_type`. */
export async function typeNames(
  sql: postgres.Sql,
  oids: readonly number[],
): Promise<Map<number, string>> {
  const wanted = [...new Set(oids.filter((o) => o > 0))];
  if (!wanted.length) return new Map();
  const rows = await sql<{ oid: number; name: string }[]>`
    select oid::int as oid, format_type(oid, null) as name
    from pg_type where oid = any(${wanted}::int[]::oid[])`;
  return new Map(rows.map((r) => [r.oid, r.name]));
}

/** Options of {@linkcode runPgbench}. */
export interface PgbenchOptions {
  databaseUrl: string;
  statements: readonly ReplayStatement[];
  users: number;
  concurrency: number;
  durationS: number;
  /**
   * `"extended"` (default): an unnamed statement parsed and planned each
   * time, as the handler's driver does; `"prepared"`: parsed once per
   * connection, to show what planning costs.
   */
  protocol?: "extended" | "prepared";
}

/**
 * Runs pgbench with the extended protocol (an unnamed statement parsed
 * each time, as postgres.js with `prepare: false` does) and reads the
 * per-transaction log for latency percentiles.
 */
export async function runPgbench(options: PgbenchOptions): Promise<LoadResult> {
  try {
    return await _runPgbenchOnce(options);
  } catch (error) {
    // On a shared machine the cluster may refuse connections for a moment
    // (max_connections, other sessions' tests): one more try, then fail.
    console.error(
      `pgbench failed, retrying once: ${
        (error as Error).message.slice(0, 300)
      }`,
    );
    return await _runPgbenchOnce(options);
  }
}

async function _runPgbenchOnce(options: PgbenchOptions): Promise<LoadResult> {
  const url = new URL(options.databaseUrl);
  if (!/^127\./.test(url.hostname) && url.hostname !== "localhost") {
    throw new Error(`Refusing to load "${url.hostname}": loopback only`);
  }
  const dir = await Deno.makeTempDir({ prefix: "pgbench-" });
  try {
    const script = `${dir}/ping.sql`;
    await Deno.writeTextFile(
      script,
      `\\set n random(1, ${options.users})\n` +
        options.statements.map((s) => `${s.pgbench.trim()};\n`).join(""),
    );
    const threads = Math.min(2, options.concurrency);
    const out = await new Deno.Command("pgbench", {
      args: [
        "-n",
        "-M",
        options.protocol ?? "extended",
        "-c",
        String(options.concurrency),
        "-j",
        String(threads),
        "-T",
        String(options.durationS),
        "-f",
        script,
        "-l",
        `--log-prefix=${dir}/log`,
      ],
      cwd: dir,
      env: {
        PGHOST: url.hostname,
        PGPORT: url.port || "5432",
        PGUSER: decodeURIComponent(url.username),
        PGPASSWORD: decodeURIComponent(url.password),
        PGDATABASE: url.pathname.slice(1),
        PGSSLMODE: "disable",
      },
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout((options.durationS + 60) * 1000),
    }).output();
    const stdout = new TextDecoder().decode(out.stdout);
    const stderr = new TextDecoder().decode(out.stderr);
    const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(
      stdout,
    );
    if (!tps) {
      throw new Error(
        `pgbench failed (exit ${out.code}): ${stderr.slice(0, 800)} ${
          stdout.slice(-800)
        }`,
      );
    }
    const latencies: number[] = [];
    for await (const entry of Deno.readDir(dir)) {
      if (!entry.name.startsWith("log")) continue;
      const text = await Deno.readTextFile(`${dir}/${entry.name}`);
      for (const line of text.split("\n")) {
        // client_id transaction_no time script_no time_epoch time_us
        const f = line.split(" ");
        if (f.length < 6) continue;
        latencies.push(Number(f[2]) / 1000);
      }
    }
    const failed = Number(
      /number of failed transactions: (\d+)/.exec(stdout)?.[1] ?? 0,
    );
    const aborted = (stderr.match(/aborted in command/g) ?? []).length;
    const processed = Number(
      /number of transactions actually processed: (\d+)/.exec(stdout)?.[1] ??
        latencies.length,
    );
    return {
      tool: "pgbench",
      concurrency: options.concurrency,
      durationS: options.durationS,
      requests: processed,
      rps: Number(tps[1]),
      latencyMs: percentiles(latencies),
      errors: failed + aborted,
      errorKinds: { failed, aborted_clients: aborted },
    };
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

/** pgbench's version line, or `null` when it is not installed. */
export async function pgbenchVersion(): Promise<string | null> {
  try {
    const out = await new Deno.Command("pgbench", {
      args: ["--version"],
      stdout: "piped",
      stderr: "null",
    }).output();
    return new TextDecoder().decode(out.stdout).trim();
  } catch {
    return null;
  }
}

type _Named = "id" | "sessionId" | "email" | "username";
const _NAMES: readonly _Named[] = ["id", "sessionId", "email", "username"];

function _nameOf(value: string | null, n: number): _Named | null {
  if (value === null) return null;
  for (const name of _NAMES) {
    if (value.toLowerCase() === USER_NAMING[name](n)) return name;
  }
  return null;
}

function _literal(value: string | null): string {
  return value === null ? "null" : `'${value.replaceAll("'", "''")}'`;
}
