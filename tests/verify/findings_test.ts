/**
 * Regression tests for what the reliability suites found, one minimal
 * reproduction per finding (each failed until its cause was fixed).
 */
import assert from "node:assert/strict";
import { createDeps } from "../../supabase/functions/_shared/deps.ts";
import { e2eTest } from "../support/e2e.ts";
import { restartablePglite } from "./_databases.ts";
import { sleep } from "./_support.ts";

e2eTest(
  "database: the functions' pool serves queries again within 2 s after a 3 s outage",
  async () => {
    const db = await restartablePglite();
    const env = { dbUrl: db.url, dbPoolMax: 4, dbStatementTimeoutMs: 3000 };
    const deps = createDeps();
    try {
      const sql = deps.database(env);
      await sql`select 1`;
      // Five callers query in a loop, as pinging users do, each waiting for
      // its answer; every answer is recorded with its time.
      const answers: { caller: number; end: number; ok: boolean }[] = [];
      let stop = false;
      const loops = Array.from({ length: 5 }, async (_, caller) => {
        while (!stop) {
          const ok = await sql`select 1`.then(() => true, () => false);
          answers.push({ caller, end: performance.now(), ok });
          await sleep(20);
        }
      });
      await sleep(500);
      await db.stop();
      await sleep(3_000);
      await db.start();
      const up = performance.now();
      const recovered = () =>
        Math.max(...[0, 1, 2, 3, 4].map((caller) => {
          const mine = answers.filter((a) => a.caller === caller && a.end > up);
          const lastBad = mine.findLastIndex((a) => !a.ok);
          const good = mine.slice(lastBad + 1).find((a) => a.ok);
          return good ? good.end - up : Infinity;
        }));
      while (!Number.isFinite(recovered()) && performance.now() - up < 30_000) {
        await sleep(100);
      }
      stop = true;
      await Promise.all(loops);
      assert.ok(
        recovered() <= 2_000,
        `every caller answered again only ${
          recovered().toFixed(0)
        } ms after the database was back`,
      );
    } finally {
      await deps.close();
      await db.destroy();
    }
  },
);
