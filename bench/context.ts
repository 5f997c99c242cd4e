/**
 * What every pass of the benchmark shares: the running stack, the tokens,
 * the timings, and the two ways of loading it (closed loop at a
 * concurrency, with the server's counters around it).
 *
 * @module
 */
import postgres from "postgres";
import { type LoadResult, runDenoClient, runWrk } from "./load.ts";
import type { BenchStack, Variant } from "./stack.ts";
import {
  cpuUse,
  delta,
  type PgCounters,
  readCounters,
  readCpu,
} from "./stats.ts";
import type { PerPing, PingPass, TokenKind } from "./types.ts";
import type { BenchTokens } from "./users.ts";

/** The run's shared state, handed to each pass. */
export interface BenchContext {
  readonly stack: BenchStack;
  /** The bench's own connection to the stack's database. */
  readonly sql: postgres.Sql;
  readonly tokens: BenchTokens;
  /** The tokens, one per line, for wrk. */
  readonly tokenFiles: Record<TokenKind, string>;
  readonly users: number;
  readonly quick: boolean;
  readonly durationS: number;
  readonly warmupS: number;
  /** wrk's version, or null when the Deno client stands in. */
  readonly wrk: string | null;
  readonly log: (line: string) => void;
}

/**
 * A closed-loop load of `url` at concurrency `c` for `d` seconds, with wrk
 * (or the Deno client), rotating through the tokens of `kind` (ES256 for
 * the bare handler, which ignores them).
 */
export function load(
  ctx: BenchContext,
  url: string,
  kind: TokenKind | null,
  c: number,
  d: number,
): Promise<LoadResult> {
  return ctx.wrk
    ? runWrk({
      url,
      tokensFile: ctx.tokenFiles[kind ?? "es256"],
      concurrency: c,
      durationS: d,
    })
    : runDenoClient({
      url,
      tokens: ctx.tokens[kind ?? "es256"],
      mode: "duration",
      concurrency: c,
      durationS: d,
    });
}

/**
 * A presence-ping pass on `variant`: warm-up, then `run` (by default a
 * closed loop at concurrency `c`) with PostgreSQL's counters and the CPU
 * of Deno and Postgres read around it.
 */
export async function pingPass(
  ctx: BenchContext,
  variant: Variant,
  kind: TokenKind,
  c: number,
  run?: () => Promise<LoadResult>,
): Promise<PingPass> {
  const measured = run ??
    (() => load(ctx, variant.pingUrl, kind, c, ctx.durationS));
  if (!run) await load(ctx, variant.pingUrl, kind, c, ctx.warmupS);
  await ctx.stack.quiesce();
  variant.reset();
  const before = await readCounters(ctx.sql);
  const cpuBefore = await readCpu(databaseName(ctx));
  const result = await measured();
  const cpuAfter = await readCpu(databaseName(ctx));
  await ctx.stack.quiesce();
  const counters = delta(before, await readCounters(ctx.sql));
  const served = variant.counts().pings[200] ?? 0;
  const cpu = cpuUse(cpuBefore, cpuAfter, served);
  return {
    kind,
    variant: variant.name,
    load: { ...result, cpu },
    perPing: perPing(counters, served),
    cpu,
    counters,
  };
}

/** `run`'s result with the CPU used while it ran, per request. */
export async function withCpu(
  ctx: BenchContext,
  run: () => Promise<LoadResult>,
): Promise<LoadResult> {
  const before = await readCpu(databaseName(ctx));
  const result = await run();
  const after = await readCpu(databaseName(ctx));
  return { ...result, cpu: cpuUse(before, after, result.requests) };
}

/** The name of the bench's database (its backends' CPU is the bench's). */
export function databaseName(ctx: BenchContext): string {
  return decodeURIComponent(new URL(ctx.stack.dbUrl).pathname.slice(1));
}

/**
 * Runs `work` on a connection of its own, closed at once, so that its
 * statistics are reported before the next pass starts.
 */
export async function once<T>(
  url: string,
  work: (sql: postgres.Sql) => Promise<T>,
): Promise<T> {
  const sql = postgres(url, { max: 1, prepare: false, onnotice: () => {} });
  try {
    return await work(sql);
  } finally {
    await sql.end({ timeout: 5 });
  }
}

/** Counter deltas per successful ping. */
export function perPing(c: PgCounters, pings: number): PerPing {
  const per = (v: number) => pings ? v / pings : 0;
  return {
    pings,
    transactions: per(c.xactCommit + c.xactRollback),
    tuplesUpdated: per(c.tupUpdated),
    hotPercent: c.nTupUpd > 0 ? 100 * c.nTupHotUpd / c.nTupUpd : null,
    buffers: per(c.blksHit + c.blksRead),
    dbActiveMs: per(c.activeTimeMs),
    walBytes: per(c.walBytes),
  };
}

/** Rows in `usuarios`. */
export async function rowCount(sql: postgres.Sql): Promise<number> {
  const [{ rows }] = await sql<{ rows: number }[]>`
    select count(*)::int as rows from public.usuarios`;
  return rows;
}
