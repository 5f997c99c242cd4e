/**
 * The printed report: plain-text tables of a {@linkcode BenchResults}.
 *
 * @module
 */
import type { BenchResults, PingPass, WorkPerPing } from "./types.ts";
import type { LoadResult } from "./load.ts";

/**
 * Formats the results as the text `npm run bench` prints.
 *
 * @example
 * ```ts
 * console.log(formatReport(results));
 * ```
 */
export function formatReport(r: BenchResults): string {
  const e = r.environment;
  const out: string[] = [];
  out.push(
    "presence-ping benchmark",
    `date      ${e.date}`,
    `machine   ${e.machine.nproc} cores, ${e.machine.cpuModel}, ${e.machine.memoryGiB} GiB`,
    `versions  Deno ${e.versions.deno}; ${e.versions.postgres}`,
    `          ${e.versions.pgbench ?? "pgbench missing"}; ${
      e.versions.wrk ?? "wrk missing (Deno client used)"
    }`,
    `postgres  ${
      Object.entries(e.postgresSettings).map(([k, v]) => `${k}=${v}`).join(
        " ",
      )
    }`,
    `command   ${e.command}`,
    `before    machine ${
      r.background.busyPercent.toFixed(0)
    }% busy with other work (waited ${
      r.background.waitedS.toFixed(0)
    } s); busiest: ${r.background.busiest.join("; ")}`,
    `config    ${r.config.users} users, ${r.config.durationS} s per pass (+${r.config.warmupS} s warm-up), load tool ${r.config.loadTool}, DB_POOL_MAX ${r.config.dbPoolMax}`,
    `          functions' log lines: ${r.config.functionLogLines} (written to a file, one per request)`,
    "",
  );

  out.push("Work per ping (counting proxies; steady state, per 200 response)");
  out.push(_table(
    [
      "token / path",
      "fn→PG stmts",
      "fn→PG RTs",
      "fn→Auth HTTP",
      "Auth→PG stmts",
      "Auth→PG RTs",
      "total RTs",
      "xacts",
      "tup upd",
      "WAL B",
    ],
    r.workPerPing.map((w) => [
      w.label,
      _n(w.functionDb.statements, 2),
      _n(w.functionDb.roundTrips, 2),
      _n(_httpTotal(w), 2),
      _n(w.authDb.statements, 2),
      _n(w.authDb.roundTrips, 2),
      _n(
        w.functionDb.roundTrips + _httpTotal(w) + w.authDb.roundTrips,
        2,
      ),
      _n(w.perPing.transactions, 2),
      _n(w.perPing.tuplesUpdated, 2),
      _n(w.perPing.walBytes, 0),
    ]),
  ));
  for (const w of r.workPerPing) {
    out.push(
      `  ${w.label}: ${w.pings} pings, ${w.errors} errors; Auth paths ${
        JSON.stringify(_rounded(w.authHttp))
      }; fn→PG messages Parse ${_n(w.functionDb.parse, 2)} Bind ${
        _n(w.functionDb.bind, 2)
      } Execute ${_n(w.functionDb.execute, 2)} Flush ${
        _n(w.functionDb.flush, 2)
      } Sync ${_n(w.functionDb.sync, 2)}`,
    );
  }
  out.push("");

  out.push(
    `Throughput and latency (${
      r.throughput[0]?.rows ?? "?"
    } rows in usuarios; combined ceiling = 1/(1/db + 1/http), the throughput if the two costs were simply added)`,
  );
  const rows: string[][] = [];
  for (const t of r.throughput) {
    const line = (name: string, l: LoadResult, extra = "") => [
      name,
      String(t.concurrency),
      _n(l.rps, 0),
      _n(l.latencyMs.p50, 2),
      _n(l.latencyMs.p95, 2),
      _n(l.latencyMs.p99, 2),
      String(l.errors),
      l.cpu
        ? `${l.cpu.machineBusyPercent.toFixed(0)}% (${
          l.cpu.otherBusyPercent.toFixed(0)
        }%)`
        : "",
      extra,
    ];
    rows.push(
      line(
        "presence-ping ES256",
        t.ping.es256.load,
        `${_pct(t.ratio.es256)} of combined`,
      ),
      line(
        "presence-ping HS256",
        t.ping.hs256.load,
        `${_pct(t.ratio.hs256)} of combined`,
      ),
      line(
        "DB: function call (pgbench -M extended)",
        t.dbForms.functionCall,
        t.dbForms.chosen === "functionCall" ? "= DB ceiling" : "",
      ),
      line(
        "DB: inline statement (pgbench -M prepared)",
        t.dbForms.inlinePrepared,
        t.dbForms.chosen === "inlinePrepared" ? "= DB ceiling" : "",
      ),
      line("HTTP ceiling (bare Deno)", t.http),
      [
        "combined ceiling",
        String(t.concurrency),
        _n(t.combinedRps, 0),
        "",
        "",
        "",
        "",
        "",
        "",
      ],
    );
  }
  out.push(_table(
    [
      "pass",
      "conc",
      "req/s",
      "p50 ms",
      "p95 ms",
      "p99 ms",
      "errors",
      "CPU busy",
      "",
    ],
    rows,
  ));
  out.push(
    "  CPU busy: all cores, load generator included (in brackets: other sessions' processes, i.e. noise). Per ping:",
    ...r.throughput.flatMap((t) =>
      (["es256", "hs256"] as const).map((k) => {
        const p = t.ping[k];
        return `    c=${t.concurrency} ${k.toUpperCase()}: Deno CPU ${
          _n(p.cpu.denoMsPerRequest, 3)
        } ms, Postgres CPU ${_n(p.cpu.postgresMsPerRequest, 3)} ms, PG active ${
          _n(p.perPing.dbActiveMs, 3)
        } ms, ${_n(p.perPing.buffers, 1)} buffers, ${
          _n(p.perPing.walBytes, 0)
        } WAL B, HOT ${_pct1(p.perPing.hotPercent)}`;
      })
    ),
    "",
  );
  if (r.dbInlineExtended) {
    out.push(
      `Before the function: the inline statement as postgres.js sends it (unnamed, planned on every ping), pgbench -M extended, c=16: ${
        _n(r.dbInlineExtended.rps, 0)
      } tx/s, p99 ${_n(r.dbInlineExtended.latencyMs.p99, 2)} ms`,
      "",
    );
  }
  if (r.tokenCache) {
    const t = r.tokenCache;
    out.push(
      `Cache of verified tokens: ${t.tokens} ES256 tokens, each sent once, c=${t.concurrency} (Deno client, closed loop)`,
    );
    out.push(_passTable([
      ["every token first seen (verified)", t.firstSeen],
      ["the same tokens again (cached)", t.seenBefore],
    ]));
    out.push("");
  }
  if (r.pool.length) {
    out.push(
      `Pool size as a cause: ES256 with DB_POOL_MAX=${
        r.pool[0].dbPoolMax
      } (the other passes: ${r.config.dbPoolMax})`,
    );
    out.push(_passTable(
      r.pool.map((p) => [`c=${p.concurrency}`, p.pass] as [string, PingPass]),
    ));
    out.push("");
  }

  if (r.fixedRate) {
    const f = r.fixedRate;
    out.push(
      `Fixed rate (open loop, Deno client): ${f.targetRps} req/s = half the ES256 peak of ${
        _n(f.peakRps, 0)
      } req/s`,
    );
    out.push(_table(
      [
        "served req/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms",
        "errors",
        "CPU busy (others)",
      ],
      [[
        _n(f.load.rps, 0),
        _n(f.load.latencyMs.p50, 2),
        _n(f.load.latencyMs.p95, 2),
        _n(f.load.latencyMs.p99, 2),
        _n(f.load.latencyMs.max, 1),
        `${f.load.errors} ${
          f.load.errors ? JSON.stringify(f.load.errorKinds) : ""
        }`,
        f.load.cpu
          ? `${f.load.cpu.machineBusyPercent.toFixed(0)}% (${
            f.load.cpu.otherBusyPercent.toFixed(0)
          }%)`
          : "",
      ]],
    ));
    out.push("");
  }

  if (r.skipWrite.present) {
    const s = r.skipWrite;
    out.push(
      `Skip-write setting (PRESENCE_MIN_WRITE_INTERVAL_S), ES256, c=16`,
    );
    out.push(_passTable([
      ["off (0, default)", s.off],
      [`on (${s.intervalS} s)`, s.on],
    ]));
    out.push("");
  } else {
    out.push("Skip-write setting: not in the handler yet (not measured)", "");
  }

  out.push(
    "Rows in usuarios (ES256, c=16; per-ping columns are per 200 response)",
  );
  out.push(_passTable(
    r.scale.map((s) => [`${s.rows} rows`, s.pass] as [string, PingPass]),
  ));
  if (r.fillfactor.tried) {
    out.push(
      `Fillfactor trial (bench database only; migrations unchanged): fillfactor=${r.fillfactor.fillfactor}, VACUUM FULL, ${r.fillfactor.rows} rows`,
    );
    out.push(_passTable([[
      `fillfactor ${r.fillfactor.fillfactor}`,
      r.fillfactor.pass,
    ]]));
  } else {
    out.push(`Fillfactor: not tried: ${r.fillfactor.reason}`);
  }
  out.push("");
  if (r.explain) {
    out.push(
      `EXPLAIN (ANALYZE, BUFFERS) of the ping for user ${r.explain.user} at ${r.explain.rows} rows (rolled back):`,
      r.explain.plan.split("\n").map((l) => `  ${l}`).join("\n"),
      "",
    );
  }

  out.push("Targets");
  out.push(_table(
    ["target", "met", "measured"],
    r.targets.map((t) => [t.name, t.met ? "yes" : "NO", t.detail]),
  ));
  return out.join("\n");
}

function _passTable(passes: [string, PingPass][]): string {
  return _table(
    [
      "pass",
      "req/s",
      "p50 ms",
      "p99 ms",
      "errors",
      "Deno CPU ms",
      "PG CPU ms",
      "PG active ms",
      "buffers",
      "tup upd",
      "WAL B",
      "HOT %",
      "others' CPU",
    ],
    passes.map(([name, p]) => [
      name,
      _n(p.load.rps, 0),
      _n(p.load.latencyMs.p50, 2),
      _n(p.load.latencyMs.p99, 2),
      String(p.load.errors),
      _n(p.cpu.denoMsPerRequest, 3),
      _n(p.cpu.postgresMsPerRequest, 3),
      _n(p.perPing.dbActiveMs, 3),
      _n(p.perPing.buffers, 1),
      _n(p.perPing.tuplesUpdated, 2),
      _n(p.perPing.walBytes, 0),
      _pct1(p.perPing.hotPercent),
      `${p.cpu.otherBusyPercent.toFixed(0)}%`,
    ]),
  );
}

function _httpTotal(w: WorkPerPing): number {
  return Object.values(w.authHttp).reduce((a, b) => a + b, 0);
}

function _rounded(o: Record<string, number>): Record<string, number> {
  return Object.fromEntries(
    Object.entries(o).map(([k, v]) => [k, Math.round(v * 1000) / 1000]),
  );
}

function _table(head: string[], rows: string[][]): string {
  const widths = head.map((h, i) =>
    Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length))
  );
  const fmt = (r: string[]) =>
    "  " +
    r.map((c, i) => i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))
      .join("  ").trimEnd();
  return [fmt(head), fmt(widths.map((w) => "-".repeat(w))), ...rows.map(fmt)]
    .join("\n");
}

function _n(v: number, digits: number): string {
  return Number.isFinite(v)
    ? v.toLocaleString("en-US", {
      minimumFractionDigits: digits,
      maximumFractionDigits: digits,
    })
    : "-";
}

function _pct(v: number): string {
  return `${(100 * v).toFixed(0)}%`;
}

function _pct1(v: number | null): string {
  return v === null ? "-" : `${v.toFixed(1)}%`;
}
