/**
 * Pass 2, throughput: presence-ping (ES256 and HS256) with wrk at each
 * concurrency, beside the two ceilings measured with the same tool and
 * concurrency (bench/ceilings.ts).
 *
 * @module
 */
import { type CeilingStatements, dbCeiling } from "./ceilings.ts";
import {
  type BenchContext,
  load,
  pingPass,
  rowCount,
  withCpu,
} from "./context.ts";
import type { ThroughputPoint } from "./types.ts";

/** Bare handler, database ceiling and both token kinds, at each concurrency. */
export async function measureThroughput(
  ctx: BenchContext,
  bareUrl: string,
  forms: CeilingStatements,
  concurrencies: readonly number[],
): Promise<ThroughputPoint[]> {
  const rows = await rowCount(ctx.sql);
  const main = ctx.stack.variants.main;
  const points: ThroughputPoint[] = [];
  for (const c of concurrencies) {
    ctx.log(`Concurrency ${c}: bare HTTP handler`);
    await load(ctx, bareUrl, null, c, ctx.warmupS);
    const http = await withCpu(
      ctx,
      () => load(ctx, bareUrl, null, c, ctx.durationS),
    );
    const { db, forms: dbForms } = await dbCeiling(ctx, forms, c);
    ctx.log(`Concurrency ${c}: presence-ping ES256`);
    const es256 = await pingPass(ctx, main, "es256", c);
    ctx.log(`Concurrency ${c}: presence-ping HS256`);
    const hs256 = await pingPass(ctx, main, "hs256", c);
    const combinedRps = 1 / (1 / db.rps + 1 / http.rps);
    points.push({
      concurrency: c,
      rows,
      ping: { es256, hs256 },
      db,
      dbForms,
      http,
      combinedRps,
      ratio: {
        es256: es256.load.rps / combinedRps,
        hs256: hs256.load.rps / combinedRps,
      },
    });
  }
  return points;
}
