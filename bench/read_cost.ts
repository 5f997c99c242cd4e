/**
 * What a poll of the `presence` function costs next to a ping, in one run:
 * the ES256 ping and an empty changes-since call at concurrency 16; 1,000
 * distinct watchers (each its own token and cursor) polling, with the CPU
 * of Deno and PostgreSQL per poll; and both read figures again beside an
 * idle open transaction that holds a write (an editor's forgotten `BEGIN`),
 * whose cost must not move.
 *
 * @module
 */
import postgres from "postgres";
import { type BenchContext, pingPass, withCpu } from "./context.ts";
import { type LoadResult, runDenoClient } from "./load.ts";
import type { ReadCost } from "./types.ts";

const _C = 16;
const _ROUNDS = 5;

/** Runs the read-cost pass on the bench's main variant. */
export async function measureReadCost(ctx: BenchContext): Promise<ReadCost> {
  const main = ctx.stack.variants.main;
  const url = `${main.apiUrl}/functions/v1/presence`;
  const tokens = ctx.tokens.es256;
  const watchers = Math.min(1000, tokens.length);
  // Cursors taken after the pings, as a watcher polling every few seconds
  // holds them: what each poll finds is what changed since (nothing here).
  const cursors = async () => {
    ctx.log(`Read cost: ${watchers} watchers take a cursor`);
    const taken: string[] = [];
    for (let i = 0; i < watchers; i++) {
      taken.push((await _read(url, tokens[i], { limit: 1 })).cursor);
    }
    return taken;
  };
  const empty = (cursor: string, d: number) =>
    runDenoClient({
      url,
      tokens,
      body: JSON.stringify({ cursor }),
      mode: "duration",
      concurrency: _C,
      durationS: d,
    });
  const polls = (taken: string[]) =>
    runDenoClient({
      url,
      tokens: tokens.slice(0, watchers),
      bodies: taken.map((c) => JSON.stringify({ cursor: c })),
      mode: "count",
      count: watchers * _ROUNDS,
      concurrency: _C,
    });
  const measure = async () => {
    const taken = await cursors();
    await empty(taken[0], ctx.warmupS);
    const emptyChanges = await withCpu(
      ctx,
      () => empty(taken[0], ctx.durationS),
    );
    await ctx.stack.quiesce();
    const watcherPolls = await withCpu(ctx, () => polls(taken));
    return { emptyChanges, watcherPolls };
  };

  ctx.log("Read cost: ES256 ping pass, c=16");
  const ping = await pingPass(ctx, main, "es256", _C);
  ctx.log("Read cost: empty changes-since and watcher polls");
  const alone = await measure();

  ctx.log("Read cost: the same beside an idle transaction holding a write");
  const idle = postgres(ctx.stack.dbUrl, { max: 1, onnotice: () => {} });
  let release = () => {};
  const held = new Promise<void>((r) => release = r);
  let opened = () => {};
  const isOpen = new Promise<void>((r) => opened = r);
  const tx = idle.begin(async (sql) => {
    // A write that holds a transaction id (and so the snapshots' xmin)
    // without locking a row any ping needs.
    await sql`insert into public.usuarios (nombre_usuario)
              values ('bench-idle-transaction')`;
    opened();
    await held;
  });
  try {
    await isOpen;
    // Pings while it stays open: the changes an xmin-bound read would
    // have to wade through.
    await pingPass(ctx, main, "es256", _C);
    const besideIdle = await measure();
    return {
      ping,
      emptyChanges: alone.emptyChanges,
      watchers,
      watcherPolls: alone.watcherPolls,
      besideIdle,
    };
  } finally {
    release();
    await tx.catch(() => {});
    await idle.end();
  }
}

/** The pass as report lines. */
export function formatReadCost(r: ReadCost): string {
  const line = (l: LoadResult) =>
    `${Math.round(l.rps)} req/s (p50 ${l.latencyMs.p50.toFixed(1)} / p99 ${
      l.latencyMs.p99.toFixed(1)
    } ms, ${l.errors} errors)${
      l.cpu
        ? `, CPU per request: Deno ${
          l.cpu.denoMsPerRequest.toFixed(3)
        } ms, Postgres ${l.cpu.postgresMsPerRequest.toFixed(3)} ms`
        : ""
    }`;
  const share = 100 * r.emptyChanges.rps / r.ping.load.rps;
  return [
    `presence read cost, concurrency ${_C}`,
    `  ES256 ping:                      ${line(r.ping.load)}`,
    `  empty changes-since:             ${line(r.emptyChanges)} = ${
      share.toFixed(0)
    }% of the ping`,
    `  ${r.watchers} watchers x ${_ROUNDS} polls: ${line(r.watcherPolls)}`,
    `  beside an idle transaction:`,
    `    empty changes-since:           ${line(r.besideIdle.emptyChanges)}`,
    `    ${r.watchers} watchers x ${_ROUNDS} polls: ${
      line(r.besideIdle.watcherPolls)
    }`,
  ].join("\n");
}

async function _read(
  url: string,
  token: string,
  body: unknown,
): Promise<{ cursor: string }> {
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
