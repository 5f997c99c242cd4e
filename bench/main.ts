/**
 * `npm run bench`: the performance benchmark, one runner for every pass.
 *
 * The passes are the table {@linkcode PASSES}: what each runs, the figures
 * it adds to the results and what they are compared with. `--only=NAMES`
 * runs some of them (with the passes they need), `--list` prints the
 * table. The stack runs on a fresh database (bench/stack.ts) of a
 * throw-away cluster the run makes and removes, or of the loopback server
 * `--database-url` names; all traffic is loopback and every pass is
 * bounded. Ctrl-C (or SIGTERM) undoes what the run set up, as its end
 * does. A run prints a summary and writes bench/results/<date>.json.
 *
 * Flags: `--only=NAMES`, `--list`, `--quick` (short passes),
 * `--duration=S`, `--users=N`, `--pings=N` (pings per work count),
 * `--rounds=N` (write-cost rounds), `--database-url=URL` (a loopback admin
 * URL on which fresh databases are made; default: TEST_DATABASE_URL, else
 * a throw-away cluster). For a CPU profile of the stack under load:
 * `deno run -A --cpu-prof --cpu-prof-dir=DIR bench/main.ts --only=throughput`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import postgres from "postgres";
import { PROJECT_DIR } from "../local/migrate.ts";
import { FUNCTION_SETTINGS } from "../supabase/functions/_shared/env.ts";
import { DEFAULT_DB_POOL_MAX } from "../supabase/functions/_shared/env.ts";
import { TOKEN_CACHE_ENTRIES } from "../supabase/functions/_shared/jwt_local.ts";
import { throwawayCluster } from "../local/testing/cluster.ts";
import { assertLoopback, runDenoClient, stopLoads } from "./load.ts";
import {
  countLoad,
  environment,
  load,
  pingPass,
  waitForIdle,
  withCpu,
} from "./measure.ts";
import { type CeilingScripts, ceilingScripts, dbCeiling } from "./pgbench.ts";
import { measureReadCost } from "./read_cost.ts";
import {
  BEFORE_C16_RPS,
  type BenchResults,
  DENO_CPU_TARGET_MS,
  formatReport,
  targets,
} from "./report.ts";
import { measureScale } from "./scale.ts";
import { type BenchContext, setUp } from "./stack.ts";
import type { BenchTokens } from "./users.ts";
import { measureWork } from "./work.ts";
import { measureBulkCost, measureWriteCost } from "./write_cost.ts";

const _SKIP_INTERVAL_S = 60;

/** What a pass gets: the stack (null for cluster-only passes) and the run so far. */
interface RunState {
  ctx: BenchContext | null;
  /** What undoes the run (main). */
  cleanups: (() => Promise<unknown>)[];
  r: Partial<BenchResults>;
  scripts?: CeilingScripts;
  quick: boolean;
  pings: number;
  rounds: number;
  log: (line: string) => void;
}

/** One pass of the benchmark, as data. */
interface Pass {
  name: string;
  runs: string;
  /** Passes whose results it reads. */
  needs: string[];
  /** The keys it adds to the JSON. */
  figures: string[];
  comparedWith: string;
  run(s: RunState, ctx: BenchContext): Promise<void>;
}

/** Every pass, in the order a full run runs them. */
export const PASSES: readonly Pass[] = [{
  name: "work",
  runs:
    "ES256, HS256 and PRESENCE_VERIFY=auth pings, one in flight, through counting proxies (bench/work.ts)",
  needs: [],
  figures: ["tokenChecks", "workPerPing", "pgbenchScripts"],
  comparedWith: "1 statement and 1 round trip per ES256 ping, no Auth call",
  async run(s, ctx) {
    const { perPingStatement, ...work } = await measureWork(ctx, s.pings);
    Object.assign(s.r, work);
    s.scripts = s.r.pgbenchScripts = ceilingScripts(
      perPingStatement,
      ctx.users,
    );
  },
}, {
  name: "throughput",
  runs:
    "presence-ping (ES256, HS256) with wrk at c=1, 16, 64, beside the DB ceiling (pgbench with the connections the functions' pool has, bench/pgbench.ts) and the HTTP ceiling (bare Deno handler)",
  needs: ["work"],
  figures: ["throughput"],
  comparedWith:
    `combined ceiling (c=16 target ≥ 60%), 2.5× the ${BEFORE_C16_RPS} req/s before`,
  async run(s, ctx) {
    s.r.throughput = [];
    for (const c of [1, 16, 64]) {
      // As many connections as the functions' pool can use at c.
      const connections = Math.min(c, _poolMax());
      ctx.log(`Concurrency ${c}: bare HTTP handler`);
      await load(ctx, ctx.bareUrl, "es256", c, ctx.warmupS);
      const http = await withCpu(
        ctx,
        () => load(ctx, ctx.bareUrl, "es256", c, ctx.durationS),
      );
      const dbForms = await dbCeiling(ctx, s.scripts!, connections);
      const ping = {
        es256: await _ping(ctx, "es256", c),
        hs256: await _ping(ctx, "hs256", c),
      };
      const combinedRps = 1 / (1 / dbForms[dbForms.chosen].rps + 1 / http.rps);
      s.r.throughput.push({
        concurrency: c,
        ping,
        dbForms,
        http,
        combinedRps,
        ratio: {
          es256: ping.es256.load.rps / combinedRps,
          hs256: ping.hs256.load.rps / combinedRps,
        },
      });
    }
  },
}, {
  name: "latency",
  runs: "an open loop (Deno client) at half the ES256 peak rate",
  needs: ["throughput"],
  figures: ["fixedRate"],
  comparedWith: "p99 < 20 ms",
  async run(s, ctx) {
    const peakRps = Math.max(
      ...s.r.throughput!.map((t) => t.ping.es256.load.rps),
    );
    const targetRps = Math.max(1, Math.round(peakRps / 2));
    ctx.log(`Fixed rate: ${targetRps} req/s (half of the ES256 peak)`);
    await ctx.quiesce();
    const load = await withCpu(ctx, () =>
      runDenoClient({
        url: ctx.variants.main.pingUrl,
        tokens: ctx.tokens.es256,
        mode: "rate",
        rate: targetRps,
        durationS: ctx.durationS,
      }));
    s.r.fixedRate = { targetRps, peakRps, load };
  },
}, {
  name: "skip-write",
  runs: `ES256 at c=16 with PRESENCE_MIN_WRITE_INTERVAL_S=${_SKIP_INTERVAL_S}`,
  needs: ["throughput"],
  figures: ["skipWrite"],
  comparedWith: "the c=16 ES256 pass (the setting off)",
  async run(s, ctx) {
    ctx.log(`Skip-write on (${_SKIP_INTERVAL_S} s), concurrency 16`);
    s.r.skipWrite = {
      intervalS: _SKIP_INTERVAL_S,
      off: s.r.throughput!.find((t) => t.concurrency === 16)!.ping.es256,
      on: await pingPass(ctx, ctx.variants.skip, "es256", 16),
    };
  },
}, {
  name: "token-cache",
  runs:
    `${TOKEN_CACHE_ENTRIES} distinct ES256 tokens the isolate never saw (each verified), then the same tokens again (each from the cache, which holds ${TOKEN_CACHE_ENTRIES}), Deno client at c=16`,
  needs: [],
  figures: ["tokenCache"],
  comparedWith: `Deno CPU per ping < ${DENO_CPU_TARGET_MS} ms`,
  async run(s, ctx) {
    const count = s.quick ? 3_000 : TOKEN_CACHE_ENTRIES;
    ctx.log(`Minting ${count} fresh ES256 tokens`);
    const tokens = await freshTokens(ctx.mint, count);
    const main = ctx.variants.main;
    const run = () => countLoad(main.pingUrl, tokens, count, 16);
    main.forgetVerifiedTokens();
    ctx.log(`Token cache: ${count} first-seen tokens, then again`);
    const firstSeen = await pingPass(ctx, main, "es256", run);
    const seenBefore = await pingPass(ctx, main, "es256", run);
    s.r.tokenCache = { tokens: count, firstSeen, seenBefore };
  },
}, {
  name: "scale",
  runs:
    "ES256 at c=16 with 1,000, 10,000 and 100,000 rows, then without the ultimo_acceso index; EXPLAIN (bench/scale.ts)",
  needs: ["work"],
  figures: ["scale", "withoutIndex", "explain"],
  comparedWith: "flat cost 1,000 → 100,000 rows, HOT updates kept",
  async run(s, ctx) {
    Object.assign(
      s.r,
      await measureScale(ctx, [1_000, 10_000, 100_000], s.scripts!),
    );
  },
}, {
  name: "read-cost",
  runs:
    "a ping, an empty changes-since call and 1,000 watchers at c=16, also beside an idle open transaction (bench/read_cost.ts)",
  needs: [],
  figures: ["readCost"],
  comparedWith: "empty changes-since ≥ 70% of the ping's rate",
  async run(s, ctx) {
    s.r.readCost = await measureReadCost(ctx);
  },
}, {
  name: "write-cost",
  runs:
    "pgbench of the ping's update without and with the ultimo_acceso index and the change-log trigger; the app's bulk updates before and after the product, on databases of their own (bench/write_cost.ts)",
  needs: [],
  figures: ["writeCost", "bulkCost"],
  comparedWith:
    "the same update without the part; the table before the product",
  async run(s) {
    s.r.writeCost = [];
    for (const part of ["index", "trigger"] as const) {
      s.log(`Write cost: ${part}, ${s.rounds} round(s)`);
      s.r.writeCost.push(...await measureWriteCost(part, s.rounds, s.cleanups));
    }
    s.log(`Write cost: the app's bulk updates, ${s.rounds} round(s)`);
    s.r.bulkCost = await measureBulkCost(s.rounds, s.cleanups);
  },
}];

/**
 * `count` ES256 tokens the isolate never saw, distinct by construction:
 * each round of minting has its own `iat`, counted down from one fixed
 * second. No more than the verified-token cache holds, so that after the
 * first pass (all misses) the second finds every one (all hits).
 */
export async function freshTokens(
  mint: (iat: number) => Promise<BenchTokens>,
  count: number,
): Promise<string[]> {
  if (count > TOKEN_CACHE_ENTRIES) {
    throw new Error(`${count} tokens: the cache holds ${TOKEN_CACHE_ENTRIES}`);
  }
  const base = Math.floor(Date.now() / 1000);
  const tokens: string[] = [];
  for (let round = 1; tokens.length < count; round++) {
    tokens.push(...(await mint(base - round)).es256);
  }
  tokens.length = count;
  if (new Set(tokens).size !== count) throw new Error("Minted tokens repeat");
  return tokens;
}

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

/**
 * The run's PostgreSQL: the server `url` names (loopback only, refused
 * before anything is made; left running), else a throw-away cluster of
 * the run's own, removed by `close`. Never the machine's own cluster.
 */
export async function benchPostgres(url: string | undefined) {
  if (url) {
    assertLoopback(url);
    return { url, own: false, close: () => Promise.resolve() };
  }
  const cluster = await throwawayCluster();
  return { url: cluster.url, own: true, close: () => cluster.destroy() };
}

/** The functions' pool size: DB_POOL_MAX, or its default. */
const _poolMax = () =>
  Number(Deno.env.get("DB_POOL_MAX")?.trim() || DEFAULT_DB_POOL_MAX);

const _ping = (ctx: BenchContext, kind: "es256" | "hs256", c: number) => {
  ctx.log(`Concurrency ${c}: presence-ping ${kind.toUpperCase()}`);
  return pingPass(ctx, ctx.variants.main, kind, c);
};

const _FLAGS =
  "Flags: --only=NAMES, --list, --quick, --duration=S, --users=N, --pings=N, --rounds=N, --database-url=URL (docs/performance.md)";

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
      help: { type: "boolean", default: false },
    },
  });
  if (flags.help) return console.log(_FLAGS);
  if (flags.list) {
    for (const p of PASSES) {
      console.log(
        `${p.name}: ${p.runs}\n  figures: ${
          p.figures.join(", ")
        }; compared with: ${p.comparedWith}`,
      );
    }
    return;
  }
  const passes = selectPasses(flags.only);
  const quick = flags.quick;
  const durationS = Number(flags.duration ?? (quick ? 3 : 10));
  const users = Number(flags.users ?? 1000);
  const log = (line: string) =>
    console.error(`[${new Date().toISOString().slice(11, 19)}] ${line}`);
  const started = performance.now();
  // Taken before setUp sends the functions' console.log to a file.
  const print = console.log.bind(console);
  // What undoes the run, last to first: at its end, on a failure, and on
  // Ctrl-C or SIGTERM (Deno would exit without running `finally`).
  const cleanups: (() => Promise<unknown>)[] = [];
  let closing: Promise<void> | undefined;
  const close = () =>
    closing ??= (async () => {
      for (const c of cleanups.reverse()) await c().catch(() => {});
    })();
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    Deno.addSignalListener(signal, () => {
      log(`${signal}: undoing the run`);
      stopLoads();
      close().finally(() => Deno.exit(130));
    });
  }
  try {
    const pg = await benchPostgres(
      flags["database-url"] ?? Deno.env.get("TEST_DATABASE_URL"),
    );
    cleanups.push(pg.close);
    Deno.env.set("TEST_DATABASE_URL", pg.url);
    // Every temporary file of the run (the signing key, token lists,
    // scripts) goes in one folder, removed with the run.
    const tmp = await Deno.makeTempDir({ prefix: "bench-run-" });
    cleanups.push(() => Deno.remove(tmp, { recursive: true }));
    Deno.env.set("TMPDIR", tmp);
    const background = await waitForIdle(quick ? 10 : 60, log);
    const ctx = passes.some((p) => p.name !== "write-cost")
      ? await setUp({
        users,
        durationS,
        warmupS: quick ? 1 : 2,
        skipIntervalS: _SKIP_INTERVAL_S,
        log,
        cleanups,
      })
      : null;
    const s: RunState = {
      ctx,
      cleanups,
      r: {},
      quick,
      pings: Number(flags.pings ?? (quick ? 300 : 2000)),
      rounds: Number(flags.rounds ?? (quick ? 1 : 2)),
      log,
    };
    // Only write-cost runs without the stack, and it never reads it.
    for (const pass of passes) await pass.run(s, ctx!);
    const admin = postgres(pg.url, { max: 1, onnotice: () => {} });
    const r = {
      ...s.r,
      environment: await environment(admin, { ...ctx?.versions }).finally(() =>
        admin.end()
      ),
      background,
      config: {
        quick,
        durationS,
        users,
        pingsPerCount: s.pings,
        dbPoolMax: _poolMax(),
        cluster: pg.own ? "throw-away, the run's own" : "given (shared)",
        functionLogLines: ctx?.functionLogLines() ?? 0,
        handlerSettings: FUNCTION_SETTINGS.filter((n) => n !== "ADMIN_EMAILS"),
        passes: passes.map((p) => p.name),
      },
      definitions: _DEFINITIONS,
    } as BenchResults;
    r.targets = targets(r);
    print(formatReport(r));
    const dir = `${PROJECT_DIR}bench/results`;
    await Deno.mkdir(dir, { recursive: true });
    const stamp = r.environment.date.replace(/[:.]/g, "-").slice(0, 19);
    const path = `${dir}/${stamp}${quick ? "-quick" : ""}.json`;
    await Deno.writeTextFile(path, JSON.stringify(r, null, 2) + "\n");
    print(`\nJSON: ${path.replace(PROJECT_DIR, "")}`);
    print(
      `Finished in ${((performance.now() - started) / 1000).toFixed(0)} s`,
    );
  } finally {
    await close();
  }
}

const _DEFINITIONS: Record<string, string> = {
  db_ceiling:
    "the faster of two pgbench replays of the same work, each with as many connections as the functions' pool can use at the pings' concurrency c (min(c, DB_POOL_MAX): dbForms.connections; pgbench does not pipeline, the pool can): the handler's call of presence.record_ping as it sends it (-M extended), and the inline statement the handler sent before the function with named prepared statements (-M prepared)",
  combined_ceiling:
    "1 / (1/db + 1/http): the throughput if the cost of the database ceiling and of the HTTP ceiling (bare Deno handler) were simply added, at the same concurrency",
  ratio: "presence-ping req/s divided by the combined ceiling",
  round_trip:
    "a client send after the server had answered, on an established connection (counting proxy), with one ping in flight (several in flight share flights); one HTTP request to Auth counts one",
  statement: "an Execute or simple Query message (counting proxy)",
  per_ping:
    "counter delta over the pass divided by the 200 responses the gateway served",
  cpu_per_ping:
    "CPU time of the bench process (Deno: gateway, functions, Auth stand-in) and of the bench cluster's postmaster and its children (other databases' backends excluded) over the pass, divided by the 200 responses",
  wal_per_ping:
    "pg_stat_wal's bytes over the pass (the cluster's): the bench's alone on its own throw-away cluster (config.cluster); on a given cluster, other databases' writes too",
  hot_percent: "n_tup_hot_upd / n_tup_upd delta on usuarios",
  fixed_rate_latency:
    "open loop: latency counted from each request's scheduled start",
  token_cache:
    "first seen: every request carries a distinct token the isolate never verified (a cache miss); again: the same tokens once more, no more than the cache holds (each a hit)",
};

if (import.meta.main) {
  // One line, as npm start prints its failures, not a stack trace.
  await main().catch((error) => {
    console.error(`npm run bench failed: ${error?.message ?? error}`);
    Deno.exit(1);
  });
}
