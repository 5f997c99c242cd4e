/**
 * The chart of a run (bench/chart.png): throughput and p99 per
 * concurrency beside the ceilings, and cost per ping by table size.
 *
 * @module
 */
import { renderChart } from "./chart.ts";
import type { BenchResults } from "./types.ts";

/** The run's chart as PNG bytes. */
export function resultsChart(r: BenchResults): Uint8Array {
  const groups = r.throughput.map((t) => `c=${t.concurrency}`);
  const colors = {
    es256: "#1f77b4",
    hs256: "#ff7f0e",
    db: "#2ca02c",
    http: "#9467bd",
    combined: "#7f7f7f",
  };
  const e = r.environment;
  return renderChart(
    "presence-ping on the local stack (wrk, loopback)",
    `${
      e.date.slice(0, 10)
    } · ${e.machine.nproc} cores ${e.machine.cpuModel} · ${e.machine.memoryGiB} GiB · Deno ${e.versions.deno} · ${
      e.versions.postgres.split(" ").slice(0, 2).join(" ")
    } · ${r.config.users} users · ${r.config.durationS} s per pass`,
    [
      {
        title: "Throughput",
        unit: "requests per second (log)",
        groups,
        log: true,
        series: [
          {
            label: "ping ES256",
            color: colors.es256,
            values: r.throughput.map((t) => t.ping.es256.load.rps),
          },
          {
            label: "ping HS256",
            color: colors.hs256,
            values: r.throughput.map((t) => t.ping.hs256.load.rps),
          },
          {
            label: "DB ceiling (pgbench, cheapest form)",
            color: colors.db,
            values: r.throughput.map((t) => t.db.rps),
          },
          {
            label: "HTTP ceiling (bare Deno)",
            color: colors.http,
            values: r.throughput.map((t) => t.http.rps),
          },
          {
            label: "combined 1/(1/db+1/http)",
            color: colors.combined,
            values: r.throughput.map((t) => t.combinedRps),
          },
        ],
      },
      {
        title: "p99 latency",
        unit: "milliseconds (log)",
        groups,
        log: true,
        series: [
          {
            label: "ping ES256",
            color: colors.es256,
            values: r.throughput.map((t) => t.ping.es256.load.latencyMs.p99),
          },
          {
            label: "ping HS256",
            color: colors.hs256,
            values: r.throughput.map((t) => t.ping.hs256.load.latencyMs.p99),
          },
          {
            label: "DB ceiling (pgbench)",
            color: colors.db,
            values: r.throughput.map((t) => t.db.latencyMs.p99),
          },
          {
            label: "HTTP ceiling (bare Deno)",
            color: colors.http,
            values: r.throughput.map((t) => t.http.latencyMs.p99),
          },
        ],
      },
      {
        title: "Rows in usuarios (ES256, c=16)",
        unit: "req/s · CPU µs per ping",
        groups: r.scale.map((s) => `${s.rows.toLocaleString("en-US")} rows`),
        series: [
          {
            label: "req/s",
            color: colors.es256,
            values: r.scale.map((s) => s.pass.load.rps),
          },
          {
            label: "Deno CPU µs per ping",
            color: colors.http,
            values: r.scale.map((s) => s.pass.cpu.denoMsPerRequest * 1000),
          },
          {
            label: "Postgres CPU µs per ping",
            color: colors.db,
            values: r.scale.map((s) => s.pass.cpu.postgresMsPerRequest * 1000),
          },
        ],
      },
    ],
  );
}
