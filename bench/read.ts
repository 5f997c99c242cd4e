/**
 * The read pass of `npm run bench`: the `presence` function at concurrency
 * 16, for a full page and for an empty changes-since call, on the bench's
 * largest table; the plan of a changes-since statement with few changes;
 * and what the `ultimo_acceso` index costs pings (HOT updates, WAL), by a
 * ping pass with the index dropped for the comparison.
 *
 * @module
 */
import type postgres from "postgres";
import { presenceStatement } from "../supabase/functions/presence/query.ts";
import { type LoadResult, runDenoClient, runWrk } from "./load.ts";
import type { PingPass, ReadPassResults } from "./types.ts";

/** Inputs of {@linkcode runReadPass}. */
export interface ReadPassOptions {
  sql: postgres.Sql;
  /** Base URL of the bench's main gateway. */
  apiUrl: string;
  tokens: readonly string[];
  tokensFile: string;
  useWrk: boolean;
  durationS: number;
  warmupS: number;
  log: (line: string) => void;
  /** A presence-ping pass at c=16 on the main variant. */
  pingPass: () => Promise<PingPass>;
  /** The scale pass already run at this size, with the index. */
  withIndex: PingPass;
}

const _CONCURRENCY = 16;
const _PLAN_CHANGES = 10;

/** Runs the read pass; leaves the index as the migration made it. */
export async function runReadPass(
  o: ReadPassOptions,
): Promise<ReadPassResults> {
  const [{ rows }] = await o.sql<{ rows: number }[]>`
    select count(*)::int as rows from public.usuarios`;
  const url = `${o.apiUrl}/functions/v1/presence`;
  const load = (body: string, d: number) =>
    o.useWrk
      ? runWrk({
        url,
        tokensFile: o.tokensFile,
        concurrency: _CONCURRENCY,
        durationS: d,
        body,
      })
      : runDenoClient({
        url,
        tokens: o.tokens,
        body,
        mode: "duration",
        concurrency: _CONCURRENCY,
        durationS: d,
      });
  const pass = async (label: string, body: string) => {
    o.log(`Read pass: ${label}, ${rows} rows, concurrency ${_CONCURRENCY}`);
    await load(body, o.warmupS);
    return await load(body, o.durationS);
  };
  const fullPage = await pass("full page", JSON.stringify({ limit: 100 }));
  const first = await _read(url, o.tokens[0], {});
  const emptyChanges = await pass(
    "empty changes-since",
    JSON.stringify({ cursor: first.cursor }),
  );
  const after = await _read(url, o.tokens[0], { cursor: first.cursor });

  // The plan: a cursor's state taken now, then a few pings' worth of
  // writes, as the next poll would find them.
  await o.sql`analyze public.usuarios`;
  const [cur] = await o.sql<{ t: string; snap: string }[]>`
    select (extract(epoch from now()) * 1000000)::bigint::text as t,
           pg_current_snapshot()::text as snap`;
  await o.sql`
    update public.usuarios
    set ultimo_acceso = date_trunc('milliseconds', now()),
        presence_state = 'online'
    where id in (select id from public.usuarios
                 order by id desc limit ${_PLAN_CHANGES})`;
  const time = BigInt(cur.t);
  const explained = await o.sql<{ "QUERY PLAN": string }[]>`
    explain (analyze, buffers, costs off) ${
    presenceStatement(o.sql, { authUserId: true, lastManualLogoutAt: true }, {
      afterId: 0,
      limit: 100,
      admin: false,
      awayS: 300,
      offlineS: 900,
      since: {
        time,
        snapshot: cur.snap,
        awayS: 300,
        offlineS: 900,
      },
    })
  }`;
  const plan = explained.map((r) => r["QUERY PLAN"]).join("\n");

  o.log("Read pass: ping pass without the ultimo_acceso index, for its cost");
  await o.sql`drop index public.usuarios_ultimo_acceso_idx`;
  // As before the scale pass it is compared with: right after a
  // checkpoint, so full-page images weigh the same in both WAL figures.
  await o.sql`checkpoint`;
  let withoutIndex: PingPass;
  try {
    withoutIndex = await o.pingPass();
  } finally {
    await o.sql`create index if not exists usuarios_ultimo_acceso_idx
                on public.usuarios (ultimo_acceso)`;
  }
  return {
    rows,
    fullPage,
    emptyChanges,
    emptyChangesUsers: after.users.length,
    planChanges: _PLAN_CHANGES,
    plan,
    pings: { withIndex: o.withIndex, withoutIndex },
  };
}

/** The read pass as report lines. */
export function formatReadPass(r: ReadPassResults): string {
  const rps = (l: LoadResult) =>
    `${Math.round(l.rps)} req/s (p50 ${l.latencyMs.p50.toFixed(1)} / p99 ${
      l.latencyMs.p99.toFixed(1)
    } ms, ${l.errors} errors)`;
  const ping = (p: PingPass) =>
    `${Math.round(p.load.rps)} req/s, HOT ${
      p.perPing.hotPercent?.toFixed(1) ?? "-"
    }%, WAL ${Math.round(p.perPing.walBytes)} B/ping, DB active ${
      p.perPing.dbActiveMs.toFixed(2)
    } ms/ping, buffers ${p.perPing.buffers.toFixed(1)}/ping`;
  return [
    `presence (read) at ${r.rows} rows, concurrency ${_CONCURRENCY}`,
    `  full page (limit 100):       ${rps(r.fullPage)}`,
    `  empty changes-since:         ${
      rps(r.emptyChanges)
    }; users in a final delta: ${r.emptyChangesUsers}`,
    `  pings with the ultimo_acceso index:    ${ping(r.pings.withIndex)}`,
    `  pings without the ultimo_acceso index: ${ping(r.pings.withoutIndex)}`,
    `  changes-since plan, ${r.planChanges} rows changed since the cursor:`,
    ...r.plan.split("\n").map((l) => `    ${l}`),
  ].join("\n");
}

async function _read(
  url: string,
  token: string,
  body: unknown,
): Promise<{ cursor: string; users: unknown[] }> {
  const res = await fetch(url, {
    method: "POST",
    headers: {
      Authorization: `Bearer ${token}`,
      "Content-Type": "application/json",
    },
    body: JSON.stringify(body),
  });
  const json = await res.json();
  if (res.status !== 200) {
    throw new Error(`presence answered ${res.status}: ${json.code}`);
  }
  return json;
}
