/**
 * The printed summary of a run: the figures docs/performance.md reports,
 * each beside the ceiling or target it is compared with. Everything else a
 * pass measured (latency percentiles, buffers, EXPLAIN, pgbench scripts,
 * the machine's load per pass) is in the JSON file.
 *
 * @module
 */
import type { LoadResult } from "./load.ts";
import type { BenchResults, PingPass } from "./types.ts";

/**
 * Formats the results of a run whose ping passes all ran.
 *
 * @example
 * ```ts
 * console.log(formatReport(results));
 * ```
 */
export function formatReport(r: BenchResults): string {
  const e = r.environment;
  const c16 = r.throughput.find((t) => t.concurrency === 16)!;
  const es = c16.ping.es256;
  const work = r.workPerPing.find((w) => w.kind === "es256")!;
  const [small, large] = [r.scale[0].pass, r.scale.at(-1)!.pass];
  const cpu = (p: PingPass) =>
    p.cpu.denoMsPerRequest + p.cpu.postgresMsPerRequest;
  const figures: [string, string][] = [
    ["ES256 c=16 req/s", `${rps(es.load)} (p50 / p99 ${lat(es.load)} ms)`],
    [
      "Deno / Postgres CPU per ping",
      `${ms(es.cpu.denoMsPerRequest)} / ${ms(es.cpu.postgresMsPerRequest)}`,
    ],
    ["HOT updates", pct1(es.perPing.hotPercent)],
    [
      "inline statement unprepared, c=16",
      r.dbInlineExtended ? `${rps(r.dbInlineExtended)} tx/s` : "-",
    ],
    ...r.workPerPing.map((w): [string, string] => [
      `work per ping, ${w.label}`,
      `${n(w.functionDb.statements, 2)} statements, ${
        n(w.functionDb.roundTrips, 2)
      } round trips, ${
        n(Object.values(w.authHttp).reduce((a, b) => a + b, 0), 2)
      } Auth calls (Auth stand-in: ${n(w.authDb.statements, 2)} statements)`,
    ]),
  ];
  if (r.tokenCache) {
    const { firstSeen, seenBefore, tokens } = r.tokenCache;
    figures.push([
      `tokens first seen / again (${tokens})`,
      `${rps(firstSeen.load)} / ${rps(seenBefore.load)} req/s, Deno CPU ${
        ms(firstSeen.cpu.denoMsPerRequest)
      } / ${ms(seenBefore.cpu.denoMsPerRequest)}`,
    ]);
  }
  if (r.fixedRate) {
    const f = r.fixedRate.load;
    figures.push([
      `open loop at ${r.fixedRate.targetRps} req/s`,
      `p50 / p95 / p99 ${n(f.latencyMs.p50, 1)} / ${n(f.latencyMs.p95, 1)} / ${
        n(f.latencyMs.p99, 1)
      } ms, max ${n(f.latencyMs.max, 0)}, ${f.errors} errors`,
    ]);
  }
  const noIndex = r.withoutIndex;
  figures.push(
    [
      `without the ultimo_acceso index, ${r.scale.at(-1)!.rows} rows`,
      `${rps(noIndex.load)} req/s, HOT ${
        pct1(noIndex.perPing.hotPercent)
      }, WAL ${n(noIndex.perPing.walBytes, 0)} B per ping (with: ${
        n(large.perPing.walBytes, 0)
      }), buffers ${n(noIndex.perPing.buffers, 1)} (with: ${
        n(large.perPing.buffers, 1)
      })`,
    ],
    [
      "scale, req/s by rows",
      r.scale.map((s) => `${s.rows}: ${rps(s.pass.load)}`).join(", "),
    ],
    [
      `scale ${r.scale[0].rows} → ${r.scale.at(-1)!.rows}`,
      `CPU ×${n(cpu(large) / cpu(small), 2)} (Postgres ×${
        n(large.cpu.postgresMsPerRequest / small.cpu.postgresMsPerRequest, 2)
      }), buffers ×${n(large.perPing.buffers / small.perPing.buffers, 2)}`,
    ],
  );
  if (r.fillfactor.tried) {
    figures.push([
      `fillfactor ${r.fillfactor.fillfactor}`,
      `${rps(r.fillfactor.pass.load)} req/s`,
    ]);
  }
  {
    const { off, on, intervalS } = r.skipWrite;
    figures.push([
      `skip-write ${intervalS} s, off → on`,
      `${rps(off.load)} → ${rps(on.load)} req/s, Postgres CPU ${
        ms(off.cpu.postgresMsPerRequest)
      } → ${ms(on.cpu.postgresMsPerRequest)}, WAL ${
        n(off.perPing.walBytes, 0)
      } → ${n(on.perPing.walBytes, 0)} B, ${
        n(on.perPing.tuplesUpdated, 2)
      } tuples updated`,
    ]);
  }
  return [
    `presence-ping benchmark, ${e.date}`,
    `${e.machine.nproc} cores, ${e.machine.cpuModel}, ${e.machine.memoryGiB} GiB; Deno ${e.versions.deno}; ${e.versions.postgres}`,
    `${e.command}; ${r.config.users} users, ${r.config.durationS} s per pass, ${r.config.loadTool}; other work before the run: ${
      r.background.busyPercent.toFixed(0)
    }% of the CPU`,
    "",
    table(
      [
        "concurrency",
        "ping ES256 req/s (p50 / p99 ms)",
        "ping HS256 req/s",
        "DB: function call",
        "DB: inline, prepared",
        "HTTP ceiling",
        "combined ceiling",
        "ES256 / combined",
      ],
      r.throughput.map((t) => [
        String(t.concurrency),
        `${rps(t.ping.es256.load)} (${lat(t.ping.es256.load)})`,
        rps(t.ping.hs256.load),
        bold(rps(t.dbForms.functionCall), t.dbForms.chosen === "functionCall"),
        bold(
          rps(t.dbForms.inlinePrepared),
          t.dbForms.chosen === "inlinePrepared",
        ),
        rps(t.http),
        rps({ rps: t.combinedRps }),
        `${(100 * t.ratio.es256).toFixed(0)}%`,
      ]),
    ),
    "",
    table(["figure", "value"], figures),
    "",
    table(
      ["target", "result"],
      r.targets.map((
        t,
      ) => [t.name, `${t.met ? "met" : "NOT MET"}: ${t.detail}`]),
    ),
    `(work per ping: counting proxies, ${work.pings} pings per path; the DB ceiling is in bold)`,
  ].join("\n");
}

/** A Markdown table, columns padded (what the docs paste). */
export function table(head: string[], rows: string[][]): string {
  const widths = head.map((h, i) =>
    Math.max(3, h.length, ...rows.map((r) => (r[i] ?? "").length))
  );
  const line = (r: string[]) =>
    `| ${r.map((c, i) => (c ?? "").padEnd(widths[i])).join(" | ")} |`;
  return [line(head), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)]
    .join("\n");
}

/** A number with thousands separators and `digits` decimals. */
export function n(v: number, digits: number): string {
  return Number.isFinite(v)
    ? v.toLocaleString("en-US", {
      minimumFractionDigits: digits,
      maximumFractionDigits: digits,
    })
    : "-";
}

const rps = (l: Pick<LoadResult, "rps">) => n(l.rps, 0);
const ms = (v: number) => `${n(v, 3)} ms`;
const lat = (l: LoadResult) =>
  `${n(l.latencyMs.p50, 1)} / ${n(l.latencyMs.p99, 1)}`;
const pct1 = (v: number | null) => v === null ? "-" : `${v.toFixed(1)}%`;
const bold = (text: string, on: boolean) => on ? `**${text}**` : text;
