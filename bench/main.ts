/**
 * `npm run bench`: the performance benchmark, one runner for every pass.
 *
 * The passes are the table {@linkcode PASSES}: each names what it runs,
 * the figures it adds to the results and the ceilings or targets it is
 * compared with; `--only=NAME,...` runs some of them (with the passes they
 * need), `--list` prints the table. Passes with the stack run on a fresh
 * database of the machine's PostgreSQL (bench/setup.ts: the local stack's
 * pieces, 1,000 users with tokens); all traffic is loopback and every pass is
 * bounded in time or count.
 *
 * It prints a summary, writes bench/results/<date>.json and, when every
 * ping pass ran, draws bench/results/chart.png (copied to bench/chart.png
 * on full runs).
 *
 * Flags: `--only=NAMES`, `--list`, `--quick` (short passes),
 * `--duration=S`, `--users=N`, `--pings=N` (pings per work count),
 * `--rounds=N` (write-cost rounds), `--database-url=URL` (an admin URL on
 * which fresh databases are made; default: TEST_DATABASE_URL or the
 * machine's cluster).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { FUNCTION_SETTINGS } from "../supabase/functions/_shared/env.ts";
import { PROJECT_DIR } from "../local/migrate.ts";
import { ensurePostgres } from "../tests/support/postgres.ts";
import {
  type CeilingStatements,
  ceilingStatements,
  inlineExtended,
  pgbenchScript,
} from "./ceilings.ts";
import { pingPass } from "./context.ts";
import { measureFixedRate } from "./latency_pass.ts";
import { formatReadCost, measureReadCost } from "./read_cost.ts";
import { formatReport } from "./report.ts";
import { resultsChart } from "./results_chart.ts";
import { measureScale } from "./scale_pass.ts";
import { type SetUp, setUp } from "./setup.ts";
import { environment, waitForIdle } from "./stats.ts";
import {
  BEFORE_C16_RPS,
  DENO_CPU_TARGET_MS,
  HOT_ENOUGH,
  targets,
} from "./targets.ts";
import { measureThroughput } from "./throughput_pass.ts";
import { measureTokenCache } from "./token_cache_pass.ts";
import type { BenchResults } from "./types.ts";
import { measureWork, type WorkFindings } from "./work_pass.ts";
import { formatWriteCost, measureWriteCost } from "./write_cost.ts";

const _CONCURRENCIES = [1, 16, 64];
const _SCALE_ROWS = [1_000, 10_000, 100_000];
const _SKIP_INTERVAL_S = 60;
const _FILLFACTOR = 80;

/** What a pass gets: the set-up stack (when it needs one) and the run so far. */
interface RunState {
  bench: SetUp | null;
  results: Partial<BenchResults>;
  work?: WorkFindings;
  forms?: CeilingStatements;
  quick: boolean;
  durationS: number;
  warmupS: number;
  pingsPerCount: number;
  rounds: number;
  log: (line: string) => void;
}

/** One pass of the benchmark, as data. */
interface Pass {
  name: string;
  /** What it runs. */
  runs: string;
  /** Passes whose results it reads. */
  needs: string[];
  /** Whether it drives the stack (otherwise it only needs the cluster). */
  stack: boolean;
  /** The figures it adds to the results (keys of the JSON). */
  figures: string[];
  /** The ceilings or targets its figures are compared with. */
  comparedWith: string;
  run(s: RunState): Promise<void>;
}

const _stack = (s: RunState) => s.bench!.ctx;

/**
 * Every pass, in the order a full run runs them. Skip-write runs before
 * token-cache, after ping passes as it did when a pool pass stood between:
 * in two quick runs right after the first-seen tokens its Deno CPU per ping
 * was higher (0.15-0.18 ms against 0.10-0.12); not confirmed as the cause.
 */
export const PASSES: readonly Pass[] = [{
  name: "work",
  runs:
    "ES256, HS256 and PRESENCE_VERIFY=auth pings through counting proxies (bench/work_pass.ts)",
  needs: [],
  stack: true,
  figures: ["tokenChecks", "workPerPing"],
  comparedWith: "1 statement and 1 round trip per ES256 ping, no Auth call",
  async run(s) {
    s.work = await measureWork(_stack(s), s.bench!.defaults, s.pingsPerCount);
    s.results.tokenChecks = s.work.tokenChecks;
    s.results.workPerPing = s.work.workPerPing;
    s.forms = await ceilingStatements(
      _stack(s),
      s.work.perPingStatements,
      s.work.sampleUser,
    );
    const users = s.bench!.ctx.users;
    s.results.pgbenchScripts = {
      functionCall: pgbenchScript(s.forms.functionCall, users),
      inline: pgbenchScript(s.forms.inline, users),
    };
  },
}, {
  name: "throughput",
  runs:
    "presence-ping with wrk at c=1, 16, 64, beside the DB ceiling (pgbench) and the HTTP ceiling (bare Deno handler) (bench/throughput_pass.ts, bench/ceilings.ts)",
  needs: ["work"],
  stack: true,
  figures: ["throughput", "dbInlineExtended"],
  comparedWith:
    `combined ceiling (c=16 target ≥ 60%), 2.5× the ${BEFORE_C16_RPS} req/s before`,
  async run(s) {
    s.results.throughput = await measureThroughput(
      _stack(s),
      s.bench!.bareUrl,
      s.forms!,
      _CONCURRENCIES,
    );
    s.results.dbInlineExtended = await inlineExtended(_stack(s), s.forms!, 16);
  },
}, {
  name: "latency",
  runs: "an open-loop pass at half the peak rate (bench/latency_pass.ts)",
  needs: ["throughput"],
  stack: true,
  figures: ["fixedRate"],
  comparedWith: "p99 < 20 ms",
  async run(s) {
    s.results.fixedRate = await measureFixedRate(
      _stack(s),
      s.results.throughput!,
    );
  },
}, {
  name: "skip-write",
  runs:
    "ES256 at c=16 with PRESENCE_MIN_WRITE_INTERVAL_S=60, against the same pass without",
  needs: ["throughput"],
  stack: true,
  figures: ["skipWrite"],
  comparedWith: "the c=16 ES256 pass (the setting off)",
  async run(s) {
    s.log(`Skip-write on (${_SKIP_INTERVAL_S} s), concurrency 16`);
    s.results.skipWrite = {
      intervalS: _SKIP_INTERVAL_S,
      off: s.results.throughput!.find((t) => t.concurrency === 16)!.ping.es256,
      on: await pingPass(_stack(s), _stack(s).stack.variants.skip, "es256", 16),
    };
  },
}, {
  name: "token-cache",
  runs:
    "tokens seen for the first time against the same tokens again (bench/token_cache_pass.ts)",
  needs: [],
  stack: true,
  figures: ["tokenCache"],
  comparedWith: `Deno CPU per ping < ${DENO_CPU_TARGET_MS} ms`,
  async run(s) {
    s.results.tokenCache = await measureTokenCache(
      _stack(s),
      16,
      s.quick ? 3_000 : 15_000,
    );
  },
}, {
  name: "scale",
  runs:
    "c=16 at 1,000, 10,000 and 100,000 rows, HOT updates, the largest without the ultimo_acceso index, EXPLAIN, a fillfactor trial (bench/scale_pass.ts)",
  needs: ["work"],
  stack: true,
  figures: ["scale", "withoutIndex", "explain", "fillfactor"],
  comparedWith: "flat cost 1,000 → 100,000 rows, HOT updates kept",
  async run(s) {
    Object.assign(
      s.results,
      await measureScale(
        _stack(s),
        _SCALE_ROWS,
        [...s.forms!.functionCall, ...s.forms!.inline],
        _FILLFACTOR,
        HOT_ENOUGH,
      ),
    );
  },
}, {
  name: "read-cost",
  runs:
    "a ping, an empty changes-since call and 1,000 watchers at c=16, also beside an idle open transaction (bench/read_cost.ts)",
  needs: [],
  stack: true,
  figures: ["readCost"],
  comparedWith: "empty changes-since ≥ 70% of the ping's rate",
  async run(s) {
    s.results.readCost = await measureReadCost(_stack(s));
  },
}, {
  name: "write-cost",
  runs:
    "pgbench of the ping's update without and with the ultimo_acceso index and the change-log trigger (bench/write_cost.ts)",
  needs: [],
  stack: false,
  figures: ["writeCost"],
  comparedWith: "the same update without the part",
  async run(s) {
    s.results.writeCost = [];
    for (const part of ["index", "trigger"] as const) {
      s.log(`Write cost: ${part}, ${s.rounds} round(s)`);
      s.results.writeCost.push(...await measureWriteCost(part, s.rounds));
    }
  },
}];

// The passes formatReport, targets and the chart read.
const _PING_PASSES = [
  "work",
  "throughput",
  "latency",
  "skip-write",
  "token-cache",
  "scale",
];

/** The passes to run for `--only` (with the passes they need), in table order. */
export function selectPasses(only: string | undefined): Pass[] {
  if (!only) return [...PASSES];
  const wanted = new Set<string>();
  const add = (name: string) => {
    const pass = PASSES.find((p) => p.name === name);
    if (!pass) {
      throw new Error(
        `Unknown pass "${name}"; passes: ${
          PASSES.map((p) => p.name).join(", ")
        }`,
      );
    }
    wanted.add(name);
    pass.needs.forEach(add);
  };
  only.split(",").map((n) => n.trim()).filter(Boolean).forEach(add);
  return PASSES.filter((p) => wanted.has(p.name));
}

async function main(): Promise<void> {
  const { values: flags } = parseArgs({
    args: Deno.args,
    options: {
      only: { type: "string" },
      list: { type: "boolean", default: false },
      quick: { type: "boolean", default: false },
      duration: { type: "string" },
      users: { type: "string" },
      pings: { type: "string" },
      rounds: { type: "string" },
      "database-url": { type: "string" },
    },
  });
  const print = console.log.bind(console);
  if (flags.list) {
    for (const p of PASSES) {
      print(
        `${p.name}: ${p.runs}\n  figures: ${p.figures.join(", ")}; ` +
          `compared with: ${p.comparedWith}`,
      );
    }
    return;
  }
  const passes = selectPasses(flags.only);
  const quick = flags.quick ?? false;
  const durationS = Number(flags.duration ?? (quick ? 3 : 10));
  const warmupS = quick ? 1 : 2;
  const users = Number(flags.users ?? 1000);
  const log = (line: string) =>
    console.error(`[${new Date().toISOString().slice(11, 19)}] ${line}`);
  const started = performance.now();

  const background = await waitForIdle(quick ? 10 : 60, log);
  if (background.busyPercent >= 15) {
    log(
      `Going on although the machine is ${
        background.busyPercent.toFixed(0)
      }% busy (${background.busiest.join("; ")}): figures will be low`,
    );
  }
  if (flags["database-url"]) {
    Deno.env.set("TEST_DATABASE_URL", flags["database-url"]);
  }
  const pg = await ensurePostgres();
  if (pg.url === null) throw new Error(`No PostgreSQL: ${pg.reason}`);
  Deno.env.set("TEST_DATABASE_URL", pg.url);
  const bench = passes.some((p) => p.stack)
    ? await setUp({
      quick,
      durationS,
      warmupS,
      users,
      skipIntervalS: _SKIP_INTERVAL_S,
      log,
    })
    : null;
  const state: RunState = {
    bench,
    results: {},
    quick,
    durationS,
    warmupS,
    pingsPerCount: Number(flags.pings ?? (quick ? 300 : 2000)),
    rounds: Number(flags.rounds ?? (quick ? 1 : 2)),
    log,
  };
  try {
    for (const pass of passes) await pass.run(state);
    const r = state.results;
    r.environment = await environment(pg.url, {
      pgbench: bench?.pgbench ?? null,
      wrk: bench?.ctx.wrk ?? null,
    });
    r.background = background;
    r.config = {
      quick,
      durationS,
      warmupS,
      users,
      concurrencies: _CONCURRENCIES,
      pingsPerCount: state.pingsPerCount,
      dbPoolMax: Deno.env.get("DB_POOL_MAX") ?? "2 (default)",
      loadTool: bench?.ctx.wrk ? "wrk" : "deno-client",
      functionLogLines: bench?.functionLogLines() ?? 0,
      handlerSettings: FUNCTION_SETTINGS.filter((s) => s !== "ADMIN_EMAILS"),
      passes: passes.map((p) => p.name),
    };
    r.definitions = _DEFINITIONS;
    const pingsRan = _PING_PASSES.every((n) =>
      passes.some((p) => p.name === n)
    );
    if (pingsRan) {
      const full = r as BenchResults;
      full.targets = targets(full);
      print(formatReport(full));
      print(
        `\nSQL per ping (captured from the ES256 count):\n${
          state.forms!.raw.functionCall
        }\n`,
      );
    }
    if (r.readCost) print(`\n${formatReadCost(r.readCost)}`);
    if (r.writeCost) print(`\n${formatWriteCost(r.writeCost)}`);
    await _write(r, quick, pingsRan, print);
    print(
      `Finished in ${((performance.now() - started) / 1000).toFixed(0)} s`,
    );
  } finally {
    await bench?.close();
  }
}

// bench/results/<date>.json and, when every ping pass ran, chart.png; a
// full run's chart also goes to bench/chart.png, the one the docs show.
async function _write(
  results: Partial<BenchResults>,
  quick: boolean,
  chart: boolean,
  print: (line: string) => void,
): Promise<void> {
  const resultsDir = `${PROJECT_DIR}bench/results`;
  await Deno.mkdir(resultsDir, { recursive: true });
  const stamp = results.environment!.date.replace(/[:.]/g, "-").slice(0, 19);
  const jsonPath = `${resultsDir}/${stamp}${quick ? "-quick" : ""}.json`;
  await Deno.writeTextFile(jsonPath, JSON.stringify(results, null, 2) + "\n");
  print(`JSON: ${jsonPath.replace(PROJECT_DIR, "")}`);
  if (!chart) return;
  const png = resultsChart(results as BenchResults);
  await Deno.writeFile(`${resultsDir}/chart.png`, png);
  const everything = results.config!.passes.length === PASSES.length;
  if (!quick && everything) {
    await Deno.writeFile(`${PROJECT_DIR}bench/chart.png`, png);
  }
  print(
    `Chart: bench/results/chart.png${
      !quick && everything ? " and bench/chart.png" : ""
    }`,
  );
}

const _DEFINITIONS: Record<string, string> = {
  db_ceiling:
    "the faster of two pgbench replays of the same work at the same concurrency: the handler's call of presence.record_ping as it sends it (-M extended), and the inline statement the handler used before the function with named prepared statements (-M prepared)",
  combined_ceiling:
    "1 / (1/db + 1/http): the throughput if the cost of the database ceiling and of the HTTP ceiling (bare Deno handler) were simply added, at the same concurrency",
  ratio: "presence-ping req/s divided by the combined ceiling",
  round_trip:
    "a client send after the server had answered, on an established connection (counting proxy); one HTTP request to Auth counts one",
  statement: "an Execute or simple Query message (counting proxy)",
  per_ping:
    "counter delta over the pass divided by the 200 responses the gateway served",
  cpu_per_ping:
    "CPU time of the bench process (Deno: gateway, functions, Auth stand-in) and of every postgres process over the pass, divided by the 200 responses",
  hot_percent: "n_tup_hot_upd / n_tup_upd delta on usuarios",
  fixed_rate_latency:
    "open loop: latency counted from each request's scheduled start",
  token_cache:
    "first seen: every request carries a token the isolate never verified; again: the same tokens once more",
};

if (import.meta.main) await main();
