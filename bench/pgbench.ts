/**
 * The database ceiling: a ping's database work in its cheapest forms on
 * this database, replayed by pgbench with as many connections as the
 * functions' pool can use (bench/main.ts: min(c, DB_POOL_MAX)), users
 * rotating (`\set n random(1, N)`):
 *
 * - `functionCall`: the handler's own call of `presence.record_ping`, as the
 *   counting proxy caught it (its values are written into the text; the
 *   user's id and session become expressions of `:n`), sent as the handler
 *   sends it (`-M extended`: unnamed, one flight);
 * - `inline`: the statement the handler sent before the function existed
 *   (the session proof, the matching and the update as one CTE), with named
 *   prepared statements (`-M prepared`, planned once per connection; the
 *   transaction pooler does not allow them).
 *
 * The ceiling is the faster of the two, so a faster handler cannot raise
 * its own ceiling.
 *
 * @module
 */
import { LOCAL_USERNAME_MATCH_DOMAINS } from "../local/fixture.ts";
import {
  assertLoopback,
  childSignal,
  type LoadResult,
  percentiles,
} from "./load.ts";
import { withCpu } from "./measure.ts";
import type { BenchContext } from "./stack.ts";
import { USER_NAMING } from "./users.ts";

/** The two forms' pgbench scripts. */
export interface CeilingScripts {
  functionCall: string;
  inline: string;
}

const _ID = USER_NAMING.sql.id(":n");
const _SESSION = USER_NAMING.sql.sessionId(":n");
const _EMAIL = "(select email from guard)";
const _UNLINKED = `(u.auth_user_id is null or u.auth_user_id = ${_ID}::uuid)`;

/**
 * The inline statement of the fast path before `presence.record_ping`, as
 * it was built for the bench's settings (the project's `usuarios` with
 * `auth_user_id`, `USERNAME_MATCH_DOMAINS` as pinned, state `online`, no
 * skip-write interval). Frozen here: the product no longer sends it.
 */
const _INLINE = `with guard as (
  select lower(au.email) as email
  from auth.sessions s join auth.users au on au.id = s.user_id
  where s.id = ${_SESSION}::uuid and s.user_id = ${_ID}::uuid
    and au.deleted_at is null
    and (au.banned_until is null or au.banned_until <= now())
    and (s.not_after is null or s.not_after > now())
), c as (
  select c.id, c.level from (
    select u.id, 1 as level from public.usuarios u where u.auth_user_id = ${_ID}::uuid
    union all
    select u.id, 2 as level from public.usuarios u
      where lower(u.correo) = ${_EMAIL} and ${_UNLINKED}
    union all
    select u.id, 3 as level from public.usuarios u
      where lower(u.nombre_usuario) = ${_EMAIL} and ${_UNLINKED}
    union all
    select u.id, 4 as level from public.usuarios u
      where lower(u.nombre_usuario) = substring(${_EMAIL} from '^(.+)@[^@]*$')
        and ${_UNLINKED}
        and substring(${_EMAIL} from '@([^@]*)$') = any('{"${LOCAL_USERNAME_MATCH_DOMAINS}"}'::text[])
  ) c order by c.level, c.id limit 1
), upd as (
  update public.usuarios u
  set ultimo_acceso = date_trunc('milliseconds', now()),
    presence_state = ('online')::text
  from c
  where u.id = c.id and ${_UNLINKED} and exists (select 1 from guard)
  returning u.id, u.ultimo_acceso as ultimo_acceso, u.presence_state
), res as (
  select id, ultimo_acceso, presence_state from upd
)
select exists (select 1 from guard) as session_ok, res.id, res.ultimo_acceso,
  res.presence_state
from (values (1)) one left join res on true`;

/**
 * Both scripts, from the statement the ES256 fast path sent on every ping
 * (`captured`, with some bench user's id and session written in).
 */
export function ceilingScripts(
  captured: string,
  users: number,
): CeilingScripts {
  if (/\$\d/.test(captured)) {
    throw new Error(`The per-ping statement has parameters: ${captured}`);
  }
  const rebuilt = captured
    .replace(/'b0000000-0000-4000-8000-\d{12}'/g, _ID)
    .replace(/'b1000000-0000-4000-8000-\d{12}'/g, _SESSION);
  if (rebuilt === captured) {
    throw new Error(`No bench user in the per-ping statement: ${captured}`);
  }
  const script = (sql: string) => `\\set n random(1, ${users})\n${sql};\n`;
  return { functionCall: script(rebuilt), inline: script(_INLINE) };
}

/** A script's statement for user `n` (for EXPLAIN). */
export function statementFor(script: string, n: number): string {
  return script.replace(/^\\set .*\n/, "").replace(/(?<!:):n\b/g, String(n))
    .replace(/;\s*$/, "");
}

/**
 * The database ceiling with `connections` clients: both forms, each after
 * a warm-up, with the CPU they used; the faster one is `chosen`.
 */
export async function dbCeiling(
  ctx: BenchContext,
  scripts: CeilingScripts,
  connections: number,
) {
  const run = async (script: string, protocol: "extended" | "prepared") => {
    const pass = (durationS: number) =>
      runPgbench(ctx.dbUrl, script, { c: connections, durationS, protocol });
    await pass(ctx.warmupS);
    await ctx.quiesce();
    return await withCpu(ctx, () => pass(ctx.durationS));
  };
  ctx.log(`${connections} connections: pgbench, function call`);
  const functionCall = await run(scripts.functionCall, "extended");
  ctx.log(`${connections} connections: pgbench, inline statement prepared`);
  const inlinePrepared = await run(scripts.inline, "prepared");
  const chosen = functionCall.rps >= inlinePrepared.rps
    ? "functionCall" as const
    : "inlinePrepared" as const;
  return { connections, functionCall, inlinePrepared, chosen };
}

/**
 * Runs pgbench with `script` (loopback only), reading its per-transaction
 * log for latency percentiles. `-T` for `durationS` seconds, or `-t` for
 * `transactions` per client. On a shared machine the cluster may refuse
 * connections for a moment (max_connections): one more try, then fail.
 */
export async function runPgbench(
  databaseUrl: string,
  script: string,
  o: {
    c: number;
    protocol: "extended" | "prepared";
    durationS?: number;
    transactions?: number;
  },
): Promise<LoadResult> {
  assertLoopback(databaseUrl);
  const url = new URL(databaseUrl);
  const dir = await Deno.makeTempDir({ prefix: "pgbench-" });
  try {
    await Deno.writeTextFile(`${dir}/script.sql`, script);
    const args = [
      ...[
        "-n",
        "-M",
        o.protocol,
        "-c",
        String(o.c),
        "-j",
        String(Math.min(2, o.c)),
      ],
      ...(o.durationS
        ? ["-T", String(o.durationS)]
        : ["-t", String(o.transactions)]),
      ...["-f", "script.sql", "-l", "--log-prefix=log"],
    ];
    const pgbench = async () => {
      const out = await new Deno.Command("pgbench", {
        args,
        cwd: dir,
        // The password goes in the environment, never on a command line.
        env: {
          PGHOST: url.hostname,
          PGPORT: url.port || "5432",
          PGUSER: decodeURIComponent(url.username),
          PGPASSWORD: decodeURIComponent(url.password),
          PGDATABASE: decodeURIComponent(url.pathname.slice(1)),
          PGSSLMODE: "disable",
        },
        stdout: "piped",
        stderr: "piped",
        signal: childSignal((o.durationS ?? 60) + 60),
      }).output();
      const [stdout, stderr] = [out.stdout, out.stderr].map((b) =>
        new TextDecoder().decode(b)
      );
      const tps = /tps = ([\d.]+) \(without initial connection time\)/
        .exec(stdout)?.[1];
      return { stdout, stderr, tps: tps ? Number(tps) : null };
    };
    let out = await pgbench();
    if (out.tps === null) out = await pgbench();
    const { stdout, stderr, tps } = out;
    if (tps === null) {
      throw new Error(`pgbench failed: ${stderr.slice(0, 800)}`);
    }
    const latencies: number[] = [];
    for await (const entry of Deno.readDir(dir)) {
      if (!entry.name.startsWith("log")) continue;
      // client_id transaction_no time_us script_no time_epoch time_us
      for (
        const line of (await Deno.readTextFile(`${dir}/${entry.name}`)).split(
          "\n",
        )
      ) {
        const f = line.split(" ");
        if (f.length >= 6) latencies.push(Number(f[2]) / 1000);
      }
    }
    const failed = Number(
      /number of failed transactions: (\d+)/.exec(stdout)?.[1] ?? 0,
    );
    const aborted = (stderr.match(/aborted in command/g) ?? []).length;
    return {
      tool: "pgbench",
      concurrency: o.c,
      durationS: latencies.length / tps,
      requests: latencies.length,
      rps: tps,
      latencyMs: percentiles(latencies),
      errors: failed + aborted,
      errorKinds: { failed, aborted_clients: aborted },
    };
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}
