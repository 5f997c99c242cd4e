/**
 * Pass 3, latency: an open loop at half the ES256 peak, latency counted
 * from each request's scheduled start, so that a slow answer cannot hide
 * the requests queued behind it.
 *
 * @module
 */
import { type BenchContext, withCpu } from "./context.ts";
import { runDenoClient } from "./load.ts";
import type { BenchResults, ThroughputPoint } from "./types.ts";

/** p50–p99 at half the highest ES256 rate of the throughput pass. */
export async function measureFixedRate(
  ctx: BenchContext,
  throughput: readonly ThroughputPoint[],
): Promise<NonNullable<BenchResults["fixedRate"]>> {
  const peakRps = Math.max(...throughput.map((t) => t.ping.es256.load.rps));
  const targetRps = Math.max(1, Math.round(peakRps / 2));
  ctx.log(`Fixed rate: ${targetRps} req/s (half of the ES256 peak)`);
  await ctx.stack.quiesce();
  const load = await withCpu(ctx, () =>
    runDenoClient({
      url: ctx.stack.variants.main.pingUrl,
      tokens: ctx.tokens.es256,
      mode: "rate",
      rate: targetRps,
      durationS: ctx.durationS,
    }));
  return { targetRps, peakRps, load };
}
