/**
 * What a poll of the `presence` function costs next to a ping, in one run:
 * the ES256 ping and an empty changes-since call at concurrency 16, both
 * driven by wrk; 1,000 distinct watchers (each its own token and cursor)
 * polling, driven by the Deno client (a body per token), with the CPU of
 * Deno and PostgreSQL per poll; and both read figures again beside an
 * idle open transaction that holds a write (an editor's forgotten `BEGIN`),
 * whose cost must not move.
 *
 * @module
 */
import postgres from "postgres";
import { type LoadResult, runWrk } from "./load.ts";
import { countLoad, type PingPass, pingPass, withCpu } from "./measure.ts";
import type { BenchContext } from "./stack.ts";

const _C = 16;
/** Polls per watcher. */
export const READ_ROUNDS = 5;

/** What the read-cost pass measured. */
export interface ReadCost {
  /** ES256 pings, c=16. */
  ping: PingPass;
  /** An empty changes-since call (one cursor), c=16. */
  emptyChanges: LoadResult;
  /** Distinct watchers, each polling with its own cursor, c=16. */
  watchers: number;
  watcherPolls: LoadResult;
  /** The same two beside an idle transaction holding a write. */
  besideIdle: { emptyChanges: LoadResult; watcherPolls: LoadResult };
}

/** Runs the read-cost pass on the bench's main variant. */
export async function measureReadCost(ctx: BenchContext): Promise<ReadCost> {
  const main = ctx.variants.main;
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
  // With wrk, as the ping pass: the ratio of the two compares like with like.
  const empty = (cursor: string, d: number) =>
    runWrk({
      url,
      tokensFile: ctx.tokenFiles.es256,
      concurrency: _C,
      durationS: d,
      body: JSON.stringify({ cursor }),
    });
  const polls = (taken: string[]) =>
    countLoad(
      url,
      tokens.slice(0, watchers),
      watchers * READ_ROUNDS,
      _C,
      taken.map((c) => JSON.stringify({ cursor: c })),
    );
  const measure = async () => {
    const taken = await cursors();
    await empty(taken[0], ctx.warmupS);
    const emptyChanges = await withCpu(
      ctx,
      () => empty(taken[0], ctx.durationS),
    );
    await ctx.quiesce();
    const watcherPolls = await withCpu(ctx, () => polls(taken));
    return { emptyChanges, watcherPolls };
  };

  ctx.log("Read cost: ES256 ping pass, c=16");
  const ping = await pingPass(ctx, main, "es256", _C);
  ctx.log("Read cost: empty changes-since and watcher polls");
  const alone = await measure();

  ctx.log("Read cost: the same beside an idle transaction holding a write");
  const idle = postgres(ctx.dbUrl, { max: 1, onnotice: () => {} });
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
