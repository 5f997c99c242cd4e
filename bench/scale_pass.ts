/**
 * Pass `scale`, table size: the concurrency-16 pass with more and more rows
 * in `usuarios`, HOT-update counts, the same pass at the largest size
 * without the `ultimo_acceso` index (what the index costs pings), EXPLAIN
 * of one ping, and a fillfactor trial when updates stop being HOT.
 *
 * @module
 */
import type postgres from "postgres";
import { type BenchContext, once, pingPass, rowCount } from "./context.ts";
import type { ReplayStatement } from "./pgbench.ts";
import type { BenchResults, PingPass } from "./types.ts";
import { growUsuarios } from "./users.ts";

/** What the scale pass found. */
export type ScaleFindings = Pick<
  BenchResults,
  "scale" | "withoutIndex" | "explain" | "fillfactor"
>;

/**
 * Grows `usuarios` to each size in `sizes` and measures ES256 at c=16;
 * then EXPLAINs `statements` for user 1 and tries `fillfactor` when fewer
 * than `hotEnough` percent of updates were HOT.
 */
export async function measureScale(
  ctx: BenchContext,
  sizes: readonly number[],
  statements: readonly ReplayStatement[],
  fillfactor: number,
  hotEnough: number,
): Promise<ScaleFindings> {
  const main = ctx.stack.variants.main;
  const scale: BenchResults["scale"] = [];
  for (const target of sizes) {
    const rows = await once(ctx.stack.dbUrl, async (c) => {
      const rows = await growUsuarios(c, target);
      // Each size starts right after a checkpoint, so that full-page
      // images in the WAL weigh the same on every pass.
      await c.unsafe("checkpoint");
      return rows;
    });
    ctx.log(`Scale: ${rows} rows, concurrency 16`);
    scale.push({ rows, pass: await pingPass(ctx, main, "es256", 16) });
  }
  ctx.log("Scale: the largest size without the ultimo_acceso index");
  await ctx.sql`drop index public.usuarios_ultimo_acceso_idx`;
  // As before each size: right after a checkpoint, so full-page images
  // weigh the same in both WAL figures.
  await ctx.sql`checkpoint`;
  let withoutIndex: PingPass;
  try {
    withoutIndex = await pingPass(ctx, main, "es256", 16);
  } finally {
    await ctx.sql`create index if not exists usuarios_ultimo_acceso_idx
                  on public.usuarios (ultimo_acceso)`;
  }
  const user = 1;
  const rows = await rowCount(ctx.sql);
  const explain = {
    rows,
    user,
    plan: await _explain(ctx.sql, statements, user),
  };
  const hot = scale.at(-1)!.pass.perPing.hotPercent ?? 0;
  if (hot >= hotEnough) {
    return {
      scale,
      withoutIndex,
      explain,
      fillfactor: {
        tried: false,
        reason: `${
          hot.toFixed(1)
        }% of updates at ${rows} rows were already HOT (threshold ${hotEnough}%): a lower fillfactor has nothing to win`,
      },
    };
  }
  ctx.log(`Fillfactor ${fillfactor} trial at ${rows} rows`);
  // On the throw-away bench database only; migrations are the lead's.
  await ctx.sql.unsafe(
    `alter table public.usuarios set (fillfactor = ${fillfactor})`,
  );
  await ctx.sql.unsafe("vacuum full analyze public.usuarios");
  return {
    scale,
    withoutIndex,
    explain,
    fillfactor: {
      tried: true,
      fillfactor,
      rows,
      pass: await pingPass(ctx, main, "es256", 16),
    },
  };
}

class _Rollback extends Error {}

async function _explain(
  sql: postgres.Sql,
  statements: readonly ReplayStatement[],
  user: number,
): Promise<string> {
  let plan = "";
  try {
    await sql.begin(async (tx) => {
      for (const s of statements) {
        const rows = await tx.unsafe(
          `explain (analyze, buffers) ${s.literalFor(user)}`,
        );
        plan += rows.map((r) => r["QUERY PLAN"]).join("\n") + "\n";
      }
      // The ping it ran is undone: EXPLAIN ANALYZE really executes it.
      throw new _Rollback();
    });
  } catch (error) {
    if (!(error instanceof _Rollback)) throw error;
  }
  return plan.trimEnd();
}
