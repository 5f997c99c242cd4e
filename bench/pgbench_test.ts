import assert from "node:assert/strict";
import { PGlite } from "@electric-sql/pglite";
import { startPgliteServer } from "../local/db/pglite_server.ts";
import { ceilingScripts, runPgbench, statementFor } from "./pgbench.ts";
import { USER_NAMING } from "./users.ts";

// The handler's call as the counting proxy caught it for bench user 7.
const _captured = (n: number) =>
  `select session_ok, id, ultimo_acceso, presence_state from presence.record_ping('${
    USER_NAMING.id(n)
  }'::uuid, '${
    USER_NAMING.sessionId(n)
  }'::uuid, null, 'online', array['example.com']::text[], 0)`;

Deno.test("ceiling scripts: the captured call replays for any bench user, and a statement the bench cannot replay is refused", async () => {
  const scripts = ceilingScripts(_captured(7), 1000);
  assert.match(scripts.functionCall, /^\\set n random\(1, 1000\)\n/);
  assert.doesNotMatch(scripts.functionCall, /b[01]000000-0000-4000-8000-\d/);
  // For every user, the replayed call passes the arguments the handler
  // would pass for that user (a stand-in function echoes them).
  const db = await PGlite.create();
  try {
    await db.exec(`create schema presence;
      create function presence.record_ping(u uuid, s uuid, e text, st text,
        d text[], i int)
      returns table (session_ok text, id text, ultimo_acceso text,
        presence_state text)
      language sql as $$ select u::text, s::text, st, d::text || i $$`);
    for (const n of [1, 7, 42, 1000]) {
      const replayed = await db.query(statementFor(scripts.functionCall, n));
      assert.deepEqual(replayed.rows, (await db.query(_captured(n))).rows);
      assert.equal(
        (replayed.rows[0] as { session_ok: string }).session_ok,
        USER_NAMING.id(n),
      );
    }
  } finally {
    await db.close();
  }
  assert.match(statementFor(scripts.inline, 42), /with guard as/);
  assert.doesNotMatch(statementFor(scripts.inline, 42), /:n\b/);
  assert.throws(
    () => ceilingScripts("select * from presence.record_ping($1, $2)", 10),
    /has parameters/,
  );
  assert.throws(
    () => ceilingScripts("select 1 from public.usuarios", 10),
    /No bench user/,
  );
});

Deno.test("runPgbench: counts every transaction with its latency, and a run pgbench aborts is an error that says why", async () => {
  const db = await startPgliteServer({ port: 0 });
  try {
    const r = await runPgbench(db.url, "\\set n random(1, 10)\nselect :n;\n", {
      c: 2,
      protocol: "extended",
      transactions: 50,
    });
    assert.equal(r.tool, "pgbench");
    assert.equal(r.requests, 100);
    assert.equal(r.errors, 0);
    assert.ok(r.rps > 0 && r.durationS > 0);
    const l = r.latencyMs;
    assert.ok(0 < l.p50 && l.p50 <= l.p95 && l.p95 <= l.p99 && l.p99 <= l.max);
    await assert.rejects(
      runPgbench(db.url, "select 1 / 0;\n", {
        c: 1,
        protocol: "extended",
        transactions: 5,
      }),
      /pgbench failed: [\s\S]*division by zero/,
    );
  } finally {
    await db.close();
  }
});
