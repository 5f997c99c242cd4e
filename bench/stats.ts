/**
 * PostgreSQL's own counters around a pass (transactions, tuples, HOT
 * updates, buffers, WAL, time spent executing), and the facts about the
 * machine that every result carries.
 *
 * @module
 */
import postgres from "postgres";

/** Cumulative counters read at one moment. */
export interface PgCounters {
  xactCommit: number;
  xactRollback: number;
  tupUpdated: number;
  blksHit: number;
  blksRead: number;
  /** ms spent executing statements in this database. */
  activeTimeMs: number;
  /** `usuarios`: rows updated. */
  nTupUpd: number;
  /** `usuarios`: of which HOT (no index touched, same page). */
  nTupHotUpd: number;
  walRecords: number;
  walBytes: number;
}

/**
 * Reads the counters. Backends report theirs when they go idle (at most
 * once a second, the rest 10 s later) and when they exit, so read only
 * once the connections have closed (bench/stack.ts `quiesce`).
 */
export async function readCounters(sql: postgres.Sql): Promise<PgCounters> {
  const [r] = await sql<Record<string, string>[]>`
    select d.xact_commit, d.xact_rollback, d.tup_updated, d.blks_hit,
      d.blks_read, d.active_time, t.n_tup_upd, t.n_tup_hot_upd,
      w.wal_records, w.wal_bytes
    from pg_stat_database d, pg_stat_user_tables t, pg_stat_wal w
    where d.datname = current_database()
      and t.relid = 'public.usuarios'::regclass`;
  return {
    xactCommit: Number(r.xact_commit),
    xactRollback: Number(r.xact_rollback),
    tupUpdated: Number(r.tup_updated),
    blksHit: Number(r.blks_hit),
    blksRead: Number(r.blks_read),
    activeTimeMs: Number(r.active_time),
    nTupUpd: Number(r.n_tup_upd),
    nTupHotUpd: Number(r.n_tup_hot_upd),
    walRecords: Number(r.wal_records),
    walBytes: Number(r.wal_bytes),
  };
}

/** `after - before`, member by member. */
export function delta(before: PgCounters, after: PgCounters): PgCounters {
  const out = {} as PgCounters;
  for (const key of Object.keys(before) as (keyof PgCounters)[]) {
    out[key] = after[key] - before[key];
  }
  return out;
}

/** Machine, versions and server settings recorded with each run. */
export interface Environment {
  date: string;
  machine: { nproc: number; cpuModel: string; memoryGiB: number };
  versions: {
    deno: string;
    v8: string;
    postgres: string;
    pgbench: string | null;
    wrk: string | null;
  };
  postgresSettings: Record<string, string>;
  command: string;
}

/** Gathers the {@linkcode Environment}. */
export async function environment(
  databaseUrl: string,
  tools: { pgbench: string | null; wrk: string | null },
): Promise<Environment> {
  const cpuinfo = await Deno.readTextFile("/proc/cpuinfo").catch(() => "");
  const meminfo = await Deno.readTextFile("/proc/meminfo").catch(() => "");
  const memKb = Number(/MemTotal:\s+(\d+)/.exec(meminfo)?.[1] ?? 0);
  const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
  const [{ version }] = await sql<{ version: string }[]>`
    select version() as version`;
  const settings = await sql<{ name: string; setting: string }[]>`
    select name, setting || coalesce(unit, '') as setting from pg_settings
    where name in ('shared_buffers', 'synchronous_commit', 'fsync',
      'max_connections', 'wal_level', 'autovacuum')`;
  await sql.end();
  const args = Deno.args.join(" ");
  const viaNpm = Deno.env.get("npm_lifecycle_event") === "bench";
  return {
    date: new Date().toISOString(),
    machine: {
      nproc: navigator.hardwareConcurrency,
      cpuModel: /model name\s*:\s*(.+)/.exec(cpuinfo)?.[1]?.trim() ??
        "unknown",
      memoryGiB: Math.round(memKb / 1024 / 1024 * 10) / 10,
    },
    versions: {
      deno: Deno.version.deno,
      v8: Deno.version.v8,
      postgres: version,
      pgbench: tools.pgbench,
      wrk: tools.wrk,
    },
    postgresSettings: Object.fromEntries(
      settings.map((s) => [s.name, s.setting]),
    ),
    command: (viaNpm ? "npm run bench" : "deno task bench") +
      (args ? ` -- ${args}` : "") +
      ` (deno run --allow-all bench/main.ts${args ? ` ${args}` : ""})`,
  };
}

/** CPU time in clock ticks (1/100 s on Linux), read from /proc. */
export interface CpuTicks {
  /** This process: the stack's servers (and the idle orchestrator). */
  self: number;
  /**
   * The cluster's processes, by pid: this benchmark's backends and the
   * shared ones (WAL writer, checkpointer, autovacuum); backends of other
   * databases (other sessions on a shared machine) count as `others`.
   */
  postgres: Map<string, number>;
  /** The machine: busy and total ticks over all cores. */
  busy: number;
  total: number;
  /** Every other process (not this one, its children or PostgreSQL), by pid. */
  others: Map<string, number>;
}

/** CPU use over a pass. */
export interface CpuUse {
  /** Deno (stack process) CPU ms per served request. */
  denoMsPerRequest: number;
  /** PostgreSQL CPU ms per served request. */
  postgresMsPerRequest: number;
  /** Share of all cores busy, in percent (load generator included). */
  machineBusyPercent: number;
  /**
   * Share of all cores used by processes that are not the benchmark's
   * (other sessions on a shared machine), in percent: noise, not cost.
   */
  otherBusyPercent: number;
}

const _TICK_MS = 10;

/**
 * Reads the CPU counters of this process, PostgreSQL and the machine.
 * `database`: the benchmark's database; a backend connected to another one
 * counts with the other processes.
 */
export async function readCpu(database?: string): Promise<CpuTicks> {
  const ticks = (stat: string) => {
    // Fields after the parenthesized command name; utime and stime are
    // the 14th and 15th fields of the whole line.
    const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return Number(rest[11]) + Number(rest[12]);
  };
  const self = ticks(await Deno.readTextFile("/proc/self/stat"));
  const me = String(Deno.pid);
  const postgres = new Map<string, number>();
  const others = new Map<string, number>();
  for await (const entry of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(entry.name) || entry.name === me) continue;
    try {
      const stat = await Deno.readTextFile(`/proc/${entry.name}/stat`);
      const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      const ppid = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1];
      if (comm === "postgres") {
        const served = database === undefined ? null : _backendDatabase(
          await Deno.readTextFile(`/proc/${entry.name}/cmdline`),
        );
        // The cluster's own processes and this database's backends are
        // the benchmark's; other databases' backends are other work.
        (served === null || served === database ? postgres : others).set(
          entry.name,
          ticks(stat),
        );
      } else if (ppid !== me) others.set(entry.name, ticks(stat));
    } catch {
      // the process ended while we looked
    }
  }
  const cpu = (await Deno.readTextFile("/proc/stat")).split("\n")[0]
    .split(/\s+/).slice(1, 9).map(Number);
  const total = cpu.reduce((a, b) => a + b, 0);
  const idle = cpu[3] + cpu[4];
  return { self, postgres, busy: total - idle, total, others };
}

// The database a backend serves, from its title ("postgres: 15/main: user
// database host(port) state"); null for the cluster's own processes.
function _backendDatabase(cmdline: string): string | null {
  const title = cmdline.replaceAll("\0", " ").trim();
  const m = /^postgres: (?:[^:]+: )?(\S+) (\S+) (?:\S+\(\d+\)|\[local\]) /.exec(
    title,
  );
  return m ? m[2] : null;
}

/** CPU use between two readings, per served request. */
export function cpuUse(
  before: CpuTicks,
  after: CpuTicks,
  requests: number,
): CpuUse {
  const per = (ticks: number) => requests ? ticks * _TICK_MS / requests : 0;
  const total = after.total - before.total;
  // A process that started during the pass counts whole; one that ended
  // during it is lost (its ticks leave /proc with it), rather than counted
  // negative.
  const grown = (a: Map<string, number>, b: Map<string, number>) => {
    let sum = 0;
    for (const [pid, t] of b) sum += t - (a.get(pid) ?? 0);
    return sum;
  };
  return {
    otherBusyPercent: total
      ? 100 * grown(before.others, after.others) / total
      : 0,
    denoMsPerRequest: per(after.self - before.self),
    postgresMsPerRequest: per(grown(before.postgres, after.postgres)),
    machineBusyPercent: total ? 100 * (after.busy - before.busy) / total : 0,
  };
}

/** How busy the machine was before the run, and with what. */
export interface Background {
  /** Share of all cores busy over the last sample, in percent. */
  busyPercent: number;
  /** Seconds spent waiting for the machine to calm down. */
  waitedS: number;
  /** The busiest other processes at the last sample. */
  busiest: string[];
}

/**
 * Waits (up to `maxWaitS`) until the machine is mostly idle, since other
 * work on a 2-core machine shows up as noise in every figure; reports what
 * it saw either way.
 */
export async function waitForIdle(
  maxWaitS: number,
  log: (line: string) => void,
): Promise<Background> {
  const started = performance.now();
  let busyPercent = 100;
  while (true) {
    const before = await readCpu();
    await new Promise((r) => setTimeout(r, 2_000));
    const after = await readCpu();
    busyPercent = 100 * (after.busy - before.busy) /
      Math.max(1, after.total - before.total);
    const waitedS = (performance.now() - started) / 1000;
    if (busyPercent < 15 || waitedS >= maxWaitS) break;
    log(
      `The machine is ${busyPercent.toFixed(0)}% busy with other work; waiting`,
    );
  }
  const ps = await new Deno.Command("ps", {
    args: ["-eo", "pcpu,comm", "--sort=-pcpu", "--no-headers"],
    stdout: "piped",
    stderr: "null",
  }).output().catch(() => null);
  const busiest = ps
    ? new TextDecoder().decode(ps.stdout).split("\n").map((l) => l.trim())
      .filter((l) => l && !l.endsWith(" ps")).slice(0, 3)
    : [];
  return {
    busyPercent,
    waitedS: (performance.now() - started) / 1000,
    busiest,
  };
}
