/**
 * `npm run bench`: the performance benchmark of presence-ping.
 *
 * On a fresh database of the machine's PostgreSQL it starts the local
 * stack's pieces (bench/stack.ts), makes the users and their tokens in
 * bulk, and then, all over loopback and bounded in time:
 *
 * 1. counts the work of one ping per token kind (statements and round trips
 *    to Postgres through a counting proxy, requests reaching Auth):
 *    bench/work_pass.ts;
 * 2. drives presence-ping with wrk at concurrency 1, 16 and 64, and
 *    measures the two ceilings with the same tool and concurrency: the
 *    cheapest form of the same work on the database (pgbench) and a bare
 *    Deno handler: bench/throughput_pass.ts, bench/ceilings.ts;
 * 3. runs one open-loop pass at half the peak rate for p99:
 *    bench/latency_pass.ts;
 * 4. compares tokens seen for the first time with tokens the isolate has
 *    verified before: bench/token_cache_pass.ts;
 * 5. measures a larger pool and the optional skip-write setting:
 *    bench/settings_pass.ts;
 * 6. repeats the concurrency-16 pass with 1,000, 10,000 and 100,000 rows,
 *    with HOT-update counts, EXPLAIN, and a fillfactor trial:
 *    bench/scale_pass.ts;
 * 7. drives the presence function (full page, empty changes-since) and
 *    weighs the ultimo_acceso index against pings: bench/read.ts;
 * 8. puts a poll next to a ping in one pass, with 1,000 distinct watchers
 *    and an idle transaction beside them: bench/read_cost.ts.
 *
 * It prints a table, writes bench/results/<date>.json and draws
 * bench/results/chart.png (copied to bench/chart.png on full runs).
 *
 * Flags: `--quick` (short passes), `--duration=S`, `--users=N`,
 * `--pings=N` (pings per work count), `--database-url=URL` (an admin URL on
 * which a fresh database is made; default: TEST_DATABASE_URL or the
 * machine's cluster).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { FUNCTION_SETTINGS } from "../supabase/functions/_shared/env.ts";
import { PROJECT_DIR } from "../local/migrate.ts";
import {
  ceilingStatements,
  inlineExtended,
  pgbenchScript,
} from "./ceilings.ts";
import { pingPass } from "./context.ts";
import { measureFixedRate } from "./latency_pass.ts";
import { formatReadPass, runReadPass } from "./read.ts";
import { formatReadCost, measureReadCost } from "./read_cost.ts";
import { formatReport } from "./report.ts";
import { resultsChart } from "./results_chart.ts";
import { measureScale } from "./scale_pass.ts";
import { measurePool, measureSkipWrite } from "./settings_pass.ts";
import { setUp } from "./setup.ts";
import { environment, waitForIdle } from "./stats.ts";
import { HOT_ENOUGH, targets } from "./targets.ts";
import { measureThroughput } from "./throughput_pass.ts";
import { measureTokenCache } from "./token_cache_pass.ts";
import type { BenchResults } from "./types.ts";
import { measureWork } from "./work_pass.ts";

const _CONCURRENCIES = [1, 16, 64];
const _SCALE_ROWS = [1_000, 10_000, 100_000];
const _SKIP_INTERVAL_S = 60;
const _FILLFACTOR = 80;
const _BIG_POOL = 16;

async function main(): Promise<void> {
  const { values: flags } = parseArgs({
    args: Deno.args,
    options: {
      quick: { type: "boolean", default: false },
      duration: { type: "string" },
      users: { type: "string" },
      pings: { type: "string" },
      "database-url": { type: "string" },
    },
  });
  const quick = flags.quick ?? false;
  const durationS = Number(flags.duration ?? (quick ? 3 : 10));
  const warmupS = quick ? 1 : 2;
  const users = Number(flags.users ?? 1000);
  const pingsPerCount = Number(flags.pings ?? (quick ? 300 : 2000));
  const freshTokens = quick ? 3_000 : 15_000;
  const log = (line: string) =>
    console.error(`[${new Date().toISOString().slice(11, 19)}] ${line}`);
  const print = console.log.bind(console);
  const started = performance.now();

  const background = await waitForIdle(quick ? 10 : 60, log);
  if (background.busyPercent >= 15) {
    log(
      `Going on although the machine is ${
        background.busyPercent.toFixed(0)
      }% busy (${background.busiest.join("; ")}): figures will be low`,
    );
  }
  const bench = await setUp({
    quick,
    durationS,
    warmupS,
    users,
    databaseUrl: flags["database-url"],
    bigPool: _BIG_POOL,
    skipIntervalS: _SKIP_INTERVAL_S,
    log,
  });
  try {
    const { ctx } = bench;
    const work = await measureWork(ctx, bench.defaults, pingsPerCount);
    const forms = await ceilingStatements(
      ctx,
      work.perPingStatements,
      work.sampleUser,
    );
    const throughput = await measureThroughput(
      ctx,
      bench.bareUrl,
      forms,
      _CONCURRENCIES,
    );
    const dbInlineExtended = await inlineExtended(ctx, forms, 16);
    const fixedRate = await measureFixedRate(ctx, throughput);
    const tokenCache = await measureTokenCache(ctx, 16, freshTokens);
    const pool = await measurePool(ctx, _BIG_POOL, _CONCURRENCIES);
    const skipWrite = await measureSkipWrite(
      ctx,
      _SKIP_INTERVAL_S,
      throughput.find((t) => t.concurrency === 16)!.ping.es256,
    );
    const scaled = await measureScale(
      ctx,
      _SCALE_ROWS,
      [...forms.functionCall, ...forms.inline],
      _FILLFACTOR,
      HOT_ENOUGH,
    );

    // 7. The read path, on the largest table (bench/read.ts).
    const main = ctx.stack.variants.main;
    const read = await runReadPass({
      sql: ctx.sql,
      apiUrl: main.apiUrl,
      tokens: ctx.tokens.es256,
      tokensFile: ctx.tokenFiles.es256,
      useWrk: Boolean(ctx.wrk),
      durationS,
      warmupS,
      log,
      pingPass: () => pingPass(ctx, main, "es256", 16),
      withIndex: scaled.scale.at(-1)!.pass,
    });
    // 8. A poll next to a ping, 1,000 watchers, an idle transaction
    //    beside them (bench/read_cost.ts).
    const readCost = await measureReadCost(ctx);

    const env = await environment(ctx.sql, {
      pgbench: bench.pgbench,
      wrk: ctx.wrk,
    });
    const results: BenchResults = {
      environment: env,
      background,
      config: {
        quick,
        durationS,
        warmupS,
        users,
        concurrencies: _CONCURRENCIES,
        pingsPerCount,
        dbPoolMax: Deno.env.get("DB_POOL_MAX") ?? "2 (default)",
        loadTool: ctx.wrk ? "wrk" : "deno-client",
        functionLogLines: bench.functionLogLines(),
        handlerSettings: FUNCTION_SETTINGS.filter((s) => s !== "ADMIN_EMAILS"),
      },
      definitions: _DEFINITIONS,
      tokenChecks: work.tokenChecks,
      workPerPing: work.workPerPing,
      throughput,
      fixedRate,
      dbInlineExtended,
      tokenCache,
      skipWrite,
      ...scaled,
      pool,
      pgbenchScripts: {
        functionCall: pgbenchScript(forms.functionCall, users),
        inline: pgbenchScript(forms.inline, users),
      },
      read,
      targets: [],
    };
    results.targets = targets(results);
    print(formatReport(results));
    print(`\n${formatReadPass(read)}`);
    print(`\n${formatReadCost(readCost)}`);
    print(
      `\nSQL per ping (captured from the ES256 count):\n${forms.raw.functionCall}\n`,
    );
    print(
      `pgbench script, function call:\n${results.pgbenchScripts.functionCall}\n`,
    );
    print(
      `pgbench script, inline statement:\n${results.pgbenchScripts.inline}\n`,
    );
    await _write(results, quick, print);
    print(
      `Finished in ${((performance.now() - started) / 1000).toFixed(0)} s`,
    );
  } finally {
    await bench.close();
  }
}

// bench/results/<date>.json and chart.png; a full run's chart also goes to
// bench/chart.png, the one the README shows.
async function _write(
  results: BenchResults,
  quick: boolean,
  print: (line: string) => void,
): Promise<void> {
  const resultsDir = `${PROJECT_DIR}bench/results`;
  await Deno.mkdir(resultsDir, { recursive: true });
  const stamp = results.environment.date.replace(/[:.]/g, "-").slice(0, 19);
  const jsonPath = `${resultsDir}/${stamp}${quick ? "-quick" : ""}.json`;
  await Deno.writeTextFile(jsonPath, JSON.stringify(results, null, 2) + "\n");
  const png = resultsChart(results);
  await Deno.writeFile(`${resultsDir}/chart.png`, png);
  if (!quick) await Deno.writeFile(`${PROJECT_DIR}bench/chart.png`, png);
  print(`JSON: ${jsonPath.replace(PROJECT_DIR, "")}`);
  print(`Chart: bench/results/chart.png${quick ? "" : " and bench/chart.png"}`);
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
