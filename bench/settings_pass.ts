/**
 * Pass 5, settings as causes: a larger connection pool (`DB_POOL_MAX`),
 * and the optional skip-write setting (`PRESENCE_MIN_WRITE_INTERVAL_S`),
 * each against the main variant.
 *
 * @module
 */
import { type BenchContext, pingPass } from "./context.ts";
import type { BenchResults, PingPass } from "./types.ts";

/** ES256 with the `pool` variant at each concurrency above 4. */
export async function measurePool(
  ctx: BenchContext,
  dbPoolMax: number,
  concurrencies: readonly number[],
): Promise<BenchResults["pool"]> {
  const pool: BenchResults["pool"] = [];
  for (const c of concurrencies.filter((c) => c > 4)) {
    ctx.log(`DB_POOL_MAX=${dbPoolMax}: presence-ping ES256, concurrency ${c}`);
    pool.push({
      dbPoolMax,
      concurrency: c,
      pass: await pingPass(ctx, ctx.stack.variants.pool, "es256", c),
    });
  }
  return pool;
}

/** ES256 at c=16 with the `skip` variant, against `off` (the main pass). */
export async function measureSkipWrite(
  ctx: BenchContext,
  intervalS: number,
  off: PingPass,
): Promise<BenchResults["skipWrite"]> {
  const skip = ctx.stack.variants.skip;
  if (!skip) return { present: false };
  ctx.log(`Skip-write on (${intervalS} s), concurrency 16`);
  return {
    present: true,
    intervalS,
    off,
    on: await pingPass(ctx, skip, "es256", 16),
  };
}
