/**
 * Regression tests for what the reliability suites found, one minimal
 * reproduction per finding (each failed until its cause was fixed).
 */
import assert from "node:assert/strict";
import { generateSigningKey, LOCAL_JWT_SECRET } from "../../local/auth/mod.ts";
import { startStack } from "../../local/stack.ts";
import {
  closeDatabases,
  database,
} from "../../supabase/functions/_shared/db.ts";
import { e2eTest } from "../support/e2e.ts";
import { restartablePglite } from "./_databases.ts";
import { captureConsole } from "./_logs.ts";
import { post, Secrets, sleep } from "./_support.ts";
import { openSql, signedInUser, type Target } from "./_target.ts";

e2eTest(
  "database: the functions' pool serves queries again within 2 s after a 3 s outage",
  async () => {
    const db = await restartablePglite();
    const env = { dbUrl: db.url, dbPoolMax: 4 };
    try {
      const sql = database(env);
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
      await closeDatabases(db.url);
      await db.destroy();
    }
  },
);

e2eTest(
  "auth-sync: a username containing NUL gives 400 validation_failed, not 500",
  async () => {
    const logs = captureConsole();
    const signingKey = await generateSigningKey();
    const stack = await startStack({
      apiPort: 0,
      dbPort: 0,
      dataDir: null,
      signingKey,
      seedIdentities: false,
    });
    const t: Target = {
      apiUrl: stack.apiUrl,
      dbUrl: stack.dbUrl,
      anonKey: stack.anonKey,
      serviceRoleKey: stack.serviceRoleKey,
      jwtSecret: LOCAL_JWT_SECRET,
      signingKey,
      sql: openSql(stack.dbUrl),
      adminEmails: [],
      secrets: new Secrets(),
    };
    try {
      const admin = await signedInUser(t, {
        row: { auth_user_id: true, rol: "admin" },
      });
      const target = await signedInUser(t, { row: { auth_user_id: true } });
      const res = await post(t.apiUrl, "auth-sync", {
        headers: { Authorization: `Bearer ${admin.token}` },
        body: JSON.stringify({
          action: "update",
          id: target.rowId,
          nombre_usuario: "a\u0000b",
        }),
      });
      assert.equal(res.status, 400, res.text);
      assert.equal(res.body.code, "validation_failed");
    } finally {
      logs.restore();
      await t.sql.end({ timeout: 5 });
      await stack.close();
    }
  },
);
