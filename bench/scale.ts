/**
 * Pass `scale`: the ES256 ping at c=16 with 1,000, 10,000 and 100,000 rows
 * in `usuarios` (filler rows, never pinged), then the largest size without
 * the `ultimo_acceso` index (what the index costs a ping: HOT updates and
 * WAL), and `EXPLAIN (ANALYZE, BUFFERS)` of both ceiling forms for user 1.
 *
 * @module
 */
import postgres from "postgres";
import { type PingPass, pingPass } from "./measure.ts";
import { type CeilingScripts, statementFor } from "./pgbench.ts";
import type { BenchContext } from "./stack.ts";

/** Grows `usuarios` to each size and measures; see the module doc. */
export async function measureScale(
  ctx: BenchContext,
  sizes: readonly number[],
  scripts: CeilingScripts,
) {
  const { sql } = ctx;
  const ping = () => pingPass(ctx, ctx.variants.main, "es256", 16);
  const scale: { rows: number; pass: PingPass }[] = [];
  let rows = 0;
  for (const target of sizes) {
    // Bulk work on a connection of its own, closed at once, so that its
    // statistics are reported before the pass (see ctx.quiesce).
    const bulk = postgres(ctx.dbUrl, { max: 1, onnotice: () => {} });
    try {
      await bulk.unsafe(
        `insert into public.usuarios (correo, nombre_usuario, auth_user_id,
           rol, ultimo_acceso, presence_state)
         select 'filler-' || g || '@bench.test', 'filler-' || g,
           gen_random_uuid(), 'usuario', now() - random() * interval '1 day',
           case when random() < 0.3 then 'online' else 'offline' end
         from generate_series(
           (select count(*)::int from public.usuarios) + 1, $1::int) g`,
        [target],
      );
      // As autovacuum would after a bulk load; each size starts right
      // after a checkpoint, so full-page images weigh the same in WAL.
      await bulk`vacuum analyze public.usuarios`;
      await bulk`checkpoint`;
      [{ rows }] =
        await bulk`select count(*)::int as rows from public.usuarios`;
    } finally {
      await bulk.end();
    }
    ctx.log(`Scale: ${rows} rows, concurrency 16`);
    scale.push({ rows, pass: await ping() });
  }
  ctx.log("Scale: the largest size without the ultimo_acceso index");
  await sql`drop index public.usuarios_ultimo_acceso_idx`;
  await sql`checkpoint`;
  let withoutIndex: PingPass;
  try {
    withoutIndex = await ping();
  } finally {
    await sql`create index if not exists usuarios_ultimo_acceso_idx
              on public.usuarios (ultimo_acceso)`;
  }
  // EXPLAIN ANALYZE really runs the ping: undone by throwing the plan.
  const plan = await sql.begin(async (tx) => {
    let text = "";
    for (const script of [scripts.functionCall, scripts.inline]) {
      const lines = await tx.unsafe(
        `explain (analyze, buffers) ${statementFor(script, 1)}`,
      );
      text += lines.map((l) => l["QUERY PLAN"]).join("\n") + "\n";
    }
    throw new _Plan(text.trimEnd());
  }).catch((e) => {
    if (e instanceof _Plan) return e.message;
    throw e;
  });
  return { scale, withoutIndex, explain: { rows, user: 1, plan } };
}

class _Plan extends Error {}
