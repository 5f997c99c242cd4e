/**
 * What is read around a pass: PostgreSQL's own counters (transactions,
 * tuples, HOT updates, buffers, WAL, time executing), the CPU of the bench
 * process and of the cluster from /proc, and the machine's state; and the
 * one function every ping pass goes through, {@linkcode pingPass}.
 *
 * @module
 */
import { parseProcStat } from "../local/proc_stat.ts";
import postgres from "postgres";
import { redactUrl } from "../local/start_error.ts";
import type { BenchContext, Variant } from "./stack.ts";
import { type CpuUse, type LoadResult, runDenoClient, runWrk } from "./load.ts";
import type { BenchTokens } from "./users.ts";

// Cumulative counters of the bench database and of `usuarios`: the names
// the results use, and the columns they are read from.
const _COUNTERS = {
  xactCommit: "d.xact_commit",
  xactRollback: "d.xact_rollback",
  tupUpdated: "d.tup_updated",
  blksHit: "d.blks_hit",
  blksRead: "d.blks_read",
  activeTimeMs: "d.active_time",
  nTupUpd: "t.n_tup_upd",
  nTupHotUpd: "t.n_tup_hot_upd",
  walRecords: "w.wal_records",
  walBytes: "w.wal_bytes",
};

/** The counters at one moment, or their change over a pass. */
export type PgCounters = Record<keyof typeof _COUNTERS, number>;

/** Per-ping figures from the counters over a pass. */
export interface PerPing {
  /** Successful pings the gateway served during the pass. */
  pings: number;
  transactions: number;
  tuplesUpdated: number;
  /** Share of `usuarios` updates that were HOT, in percent (null: none). */
  hotPercent: number | null;
  /** Shared buffers touched (hit + read). */
  buffers: number;
  dbActiveMs: number;
  walBytes: number;
}

/** A presence-ping pass: the load result and what the server saw. */
export interface PingPass {
  kind: keyof BenchTokens;
  variant: string;
  load: LoadResult;
  perPing: PerPing;
  cpu: CpuUse;
  counters: PgCounters;
}

/**
 * Reads the counters. Backends report theirs when they go idle (at most
 * once a second) and when they exit, so read after `ctx.quiesce()`.
 */
async function _readCounters(sql: postgres.Sql): Promise<PgCounters> {
  const [row] = await sql.unsafe(
    `select ${
      Object.entries(_COUNTERS).map(([k, c]) => `${c} as "${k}"`).join(", ")
    }
     from pg_stat_database d, pg_stat_user_tables t, pg_stat_wal w
     where d.datname = current_database()
       and t.relid = 'public.usuarios'::regclass`,
  );
  return _map((k) => Number(row[k]));
}

/** `after - before`, counter by counter. */
function _delta(before: PgCounters, after: PgCounters): PgCounters {
  return _map((k) => after[k] - before[k]);
}

const _map = (f: (k: keyof PgCounters) => number) =>
  Object.fromEntries(
    Object.keys(_COUNTERS).map((k) => [k, f(k as keyof PgCounters)]),
  ) as PgCounters;

/** Counter deltas per successful ping. */
function _perPing(c: PgCounters, pings: number): PerPing {
  const per = (v: number) => pings ? v / pings : 0;
  return {
    pings,
    transactions: per(c.xactCommit + c.xactRollback),
    tuplesUpdated: per(c.tupUpdated),
    hotPercent: c.nTupUpd > 0 ? 100 * c.nTupHotUpd / c.nTupUpd : null,
    buffers: per(c.blksHit + c.blksRead),
    dbActiveMs: per(c.activeTimeMs),
    walBytes: per(c.walBytes),
  };
}

/**
 * A closed-loop load of `url` with wrk at concurrency `c` for `d` seconds,
 * rotating through the tokens of `kind`.
 */
export function load(
  ctx: BenchContext,
  url: string,
  kind: keyof BenchTokens,
  c: number,
  d: number,
): Promise<LoadResult> {
  return runWrk({
    url,
    tokensFile: ctx.tokenFiles[kind],
    concurrency: c,
    durationS: d,
  });
}

/**
 * A presence-ping pass on `variant`: `run` (or, for a concurrency, a
 * warm-up then wrk at that concurrency), with PostgreSQL's counters and
 * the CPU of Deno and Postgres read around it, per ping the gateway
 * answered 200.
 */
export async function pingPass(
  ctx: BenchContext,
  variant: Variant,
  kind: keyof BenchTokens,
  run: number | (() => Promise<LoadResult>),
): Promise<PingPass> {
  if (typeof run === "number") {
    const c = run;
    await load(ctx, variant.pingUrl, kind, c, ctx.warmupS);
    run = () => load(ctx, variant.pingUrl, kind, c, ctx.durationS);
  }
  await ctx.quiesce();
  variant.reset();
  const before = await _readCounters(ctx.sql);
  const cpuBefore = await readCpu(ctx);
  const result = await run();
  const cpuAfter = await readCpu(ctx);
  await ctx.quiesce();
  const counters = _delta(before, await _readCounters(ctx.sql));
  const served = variant.counts().pings[200] ?? 0;
  const cpu = cpuUse(cpuBefore, cpuAfter, served);
  return {
    kind,
    variant: variant.name,
    load: { ...result, cpu },
    perPing: _perPing(counters, served),
    cpu,
    counters,
  };
}

/** `run`'s result with the CPU used while it ran, per request. */
export async function withCpu(
  ctx: BenchContext,
  run: () => Promise<LoadResult>,
): Promise<LoadResult> {
  const before = await readCpu(ctx);
  const result = await run();
  const after = await readCpu(ctx);
  return { ...result, cpu: cpuUse(before, after, result.requests) };
}

/** The Deno client in "count" mode: `count` requests, `c` at a time. */
export function countLoad(
  url: string,
  tokens: readonly string[],
  count: number,
  c: number,
  bodies?: string[],
): Promise<LoadResult> {
  return runDenoClient({
    url,
    tokens,
    bodies,
    mode: "count",
    count,
    concurrency: c,
  });
}

/** CPU clock ticks (1/100 s) read at one moment. */
interface _Ticks {
  /** This process: the stack's servers (and the idle orchestrator). */
  self: number;
  /** The postmaster and its children but other databases' backends, by pid. */
  postgres: Map<string, number>;
  /** Every other process (not this one or its children), by pid. */
  others: Map<string, number>;
  busy: number;
  total: number;
}

/**
 * Reads the CPU of this process, of the bench's PostgreSQL and of the
 * machine. The bench's PostgreSQL is `db`'s postmaster and its children
 * (another cluster's processes are not); a backend of another database
 * (another session's, on a cluster the bench did not make) counts with
 * the other processes.
 */
export async function readCpu(
  db?: Pick<BenchContext, "dbUrl" | "postmaster">,
): Promise<_Ticks> {
  const database = db &&
    decodeURIComponent(new URL(db.dbUrl).pathname.slice(1));
  const ticks = (stat: string) => parseProcStat(stat).ticks;
  const me = String(Deno.pid);
  const out: _Ticks = {
    self: ticks(await Deno.readTextFile("/proc/self/stat")),
    postgres: new Map(),
    others: new Map(),
    busy: 0,
    total: 0,
  };
  for await (const entry of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(entry.name) || entry.name === me) continue;
    try {
      const stat = await Deno.readTextFile(`/proc/${entry.name}/stat`);
      const { ppid } = parseProcStat(stat);
      if (db && [entry.name, ppid].includes(db.postmaster)) {
        // A backend's title: "postgres: [15/main: ]user database host(port) state".
        const title = (await Deno.readTextFile(`/proc/${entry.name}/cmdline`))
          .replaceAll("\0", " ");
        const served =
          /^postgres: (?:[^:]+: )?\S+ (\S+) (?:\S+\(\d+\)|\[local\]) /
            .exec(title)?.[1];
        const ours = !served || served === database;
        (ours ? out.postgres : out.others).set(entry.name, ticks(stat));
      } else if (ppid !== me) out.others.set(entry.name, ticks(stat));
    } catch {
      // the process ended while we looked
    }
  }
  const cpu = (await Deno.readTextFile("/proc/stat")).split("\n")[0]
    .split(/\s+/).slice(1, 9).map(Number);
  out.total = cpu.reduce((a, b) => a + b, 0);
  out.busy = out.total - cpu[3] - cpu[4];
  return out;
}

/** CPU use between two readings, per served request. */
export function cpuUse(
  before: _Ticks,
  after: _Ticks,
  requests: number,
): CpuUse {
  const per = (ticks: number) => requests ? ticks * 10 / requests : 0;
  const total = after.total - before.total;
  // A process that started during the pass counts whole; one that ended
  // is lost (its ticks leave /proc with it) rather than counted negative.
  const grown = (a: Map<string, number>, b: Map<string, number>) => {
    let sum = 0;
    for (const [pid, t] of b) sum += t - (a.get(pid) ?? 0);
    return sum;
  };
  return {
    denoMsPerRequest: per(after.self - before.self),
    postgresMsPerRequest: per(grown(before.postgres, after.postgres)),
    machineBusyPercent: total ? 100 * (after.busy - before.busy) / total : 0,
    otherBusyPercent: total
      ? 100 * grown(before.others, after.others) / total
      : 0,
  };
}

/** How busy the machine was before the run, and with what. */
export interface Background {
  busyPercent: number;
  waitedS: number;
  /** The busiest processes at the last sample (`ps`). */
  busiest: string[];
}

/**
 * Waits (up to `maxWaitS`) until the machine is mostly idle: other work on
 * a 2-core machine shows in every figure. Reports what it saw either way.
 */
export async function waitForIdle(
  maxWaitS: number,
  log: (line: string) => void,
): Promise<Background> {
  const started = performance.now();
  const waited = () => (performance.now() - started) / 1000;
  let busyPercent = 100;
  while (busyPercent >= 15 && waited() < maxWaitS) {
    const before = await readCpu();
    await new Promise((r) => setTimeout(r, 2_000));
    const after = await readCpu();
    busyPercent = 100 * (after.busy - before.busy) /
      Math.max(1, after.total - before.total);
    if (busyPercent >= 15) {
      log(`The machine is ${busyPercent.toFixed(0)}% busy; waiting`);
    }
  }
  const ps = await new Deno.Command("ps", {
    args: ["-eo", "pcpu,comm", "--sort=-pcpu", "--no-headers"],
    stdout: "piped",
  }).output();
  const busiest = new TextDecoder().decode(ps.stdout).split("\n")
    .map((l) => l.trim()).filter((l) => l && !l.endsWith(" ps")).slice(0, 3);
  return { busyPercent, waitedS: waited(), busiest };
}

/** Machine, versions and server settings, recorded with each run. */
export async function environment(
  sql: postgres.Sql,
  tools: Record<string, string>,
) {
  const cpuinfo = await Deno.readTextFile("/proc/cpuinfo");
  const memKb = Number(
    /MemTotal:\s+(\d+)/.exec(await Deno.readTextFile("/proc/meminfo"))?.[1],
  );
  const [{ version }] = await sql`select version()`;
  const settings = await sql<{ name: string; setting: string }[]>`
    select name, setting || coalesce(unit, '') as setting from pg_settings
    where name in ('shared_buffers', 'synchronous_commit', 'fsync',
      'max_connections', 'wal_level', 'autovacuum')`;
  return {
    date: new Date().toISOString(),
    machine: {
      nproc: navigator.hardwareConcurrency,
      cpuModel: /model name\s*:\s*(.+)/.exec(cpuinfo)?.[1]?.trim() ?? "?",
      memoryGiB: Math.round(memKb / 1024 / 1024 * 10) / 10,
    },
    versions: {
      deno: Deno.version.deno,
      v8: Deno.version.v8,
      postgres: version as string,
      ...tools,
    },
    postgresSettings: Object.fromEntries(
      settings.map((s) => [s.name, s.setting]),
    ),
    command: benchCommand(Deno.args),
  };
}

/**
 * The command line a run records and prints, with the password of any
 * connection string in it removed (`--database-url=postgresql://u:p@h/db`).
 */
export function benchCommand(args: readonly string[]): string {
  const shown = args.map((a) =>
    a.replace(/\b[a-z][a-z0-9+.-]*:\/\/\S+/gi, (url) => redactUrl(url))
  ).join(" ");
  return `npm run bench${shown ? ` -- ${shown}` : ""}`;
}
