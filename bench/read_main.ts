/**
 * `deno task bench:read`: only the read-cost pass of the benchmark
 * (bench/read_cost.ts), on a fresh database of the machine's PostgreSQL,
 * for a quick answer to "what does a poll cost next to a ping". The full
 * `npm run bench` runs the same pass among the others.
 *
 * Flags: `--duration=S` (default 10), `--users=N` (default 1000),
 * `--database-url=URL`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { formatReadCost, measureReadCost } from "./read_cost.ts";
import { setUp } from "./setup.ts";
import { environment } from "./stats.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    duration: { type: "string" },
    users: { type: "string" },
    "database-url": { type: "string" },
  },
});
const log = (line: string) =>
  console.error(`[${new Date().toISOString().slice(11, 19)}] ${line}`);
const print = console.log.bind(console);
const bench = await setUp({
  quick: false,
  durationS: Number(flags.duration ?? 10),
  warmupS: 2,
  users: Number(flags.users ?? 1000),
  databaseUrl: flags["database-url"],
  bigPool: 16,
  skipIntervalS: 60,
  log,
});
try {
  const cost = await measureReadCost(bench.ctx);
  const env = await environment(bench.ctx.sql, {
    pgbench: bench.pgbench,
    wrk: bench.ctx.wrk,
  });
  print(`${new Date().toISOString()} ${JSON.stringify(env)}`);
  print(formatReadCost(cost));
} finally {
  await bench.close();
}
