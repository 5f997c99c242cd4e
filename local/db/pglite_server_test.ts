import assert from "node:assert/strict";
import postgres from "postgres";
import { startPgliteServer } from "./pglite_server.ts";

Deno.test("startPgliteServer: parameterized queries of several connections do not interleave, beside transactions", async () => {
  const server = await startPgliteServer({ port: 0 });
  const a = postgres(server.url, {
    max: 4,
    prepare: false,
    onnotice: () => {},
  });
  const b = postgres(server.url, {
    max: 4,
    prepare: false,
    onnotice: () => {},
  });
  try {
    await a`create table counter (id int primary key, n int not null)`;
    await a`insert into counter values (1, 0)`;
    const increments = Array.from({ length: 40 }, () =>
      a.begin(async (tx) => {
        const [{ n }] =
          await tx`select n from counter where id = ${1} for update`;
        await tx`update counter set n = ${n + 1} where id = ${1}`;
      }));
    const echoes = Array.from(
      { length: 200 },
      (_, i) =>
        b`select ${i}::int as i, ${"x" + i}::text as s`.then(([r]) => {
          assert.equal(r.i, i);
          assert.equal(r.s, "x" + i);
        }),
    );
    await Promise.all([...increments, ...echoes]);
    const [{ n }] = await b`select n from counter where id = ${1}`;
    assert.equal(n, 40);
  } finally {
    await a.end();
    await b.end();
    await server.close();
  }
});

Deno.test("startPgliteServer: a connection dropped inside a transaction is rolled back and frees the session", async () => {
  const server = await startPgliteServer({ port: 0 });
  const a = postgres(server.url, {
    max: 1,
    prepare: false,
    onnotice: () => {},
  });
  const b = postgres(server.url, {
    max: 1,
    prepare: false,
    onnotice: () => {},
  });
  try {
    await b`create table t (v int)`;
    let inserted!: () => void;
    const insertedOnce = new Promise<void>((r) => (inserted = r));
    const pending = a.begin(async (tx) => {
      await tx`insert into t values (${1})`;
      inserted();
      await new Promise((r) => setTimeout(r, 300));
      await tx`select 1`;
    }).then(() => "committed", () => "aborted");
    await insertedOnce;
    await a.end({ timeout: 0 });
    assert.equal(await pending, "aborted");
    const rows = await b`select count(*)::int as c from t`;
    assert.equal(rows[0].c, 0);
  } finally {
    await b.end();
    await server.close();
  }
});

Deno.test("startPgliteServer: a connection idle in a transaction while another waits is rolled back and closed after idleInTransactionMs (25P03), and the other goes on", async () => {
  const lines: string[] = [];
  const server = await startPgliteServer({
    port: 0,
    idleInTransactionMs: 500,
    log: (line) => lines.push(line),
  });
  const opts = { max: 1, prepare: false, onnotice: () => {} } as const;
  const idle = postgres(server.url, opts);
  const other = postgres(server.url, opts);
  try {
    await other`create table t (v int)`;
    // A BEGIN left open in psql: one write, then nothing.
    const held = await idle.reserve();
    await held`begin`;
    await held`insert into t values (1)`;
    // Waits for the session, then runs once the idle one is closed.
    const rows = await other`select count(*)::int as c from t`;
    assert.equal(rows[0].c, 0, "the idle transaction was rolled back");
    const error = await held`select 1`.then(() => null, (e) => e);
    assert.ok(error, "the idle connection was closed");
    assert.match(lines.join("\n"), /idle in a transaction for 500 ms/);
    held.release();
    // A transaction nobody waits for is left alone, however long it idles.
    const alone = await other.reserve();
    await alone`begin`;
    await alone`insert into t values (2)`;
    await new Promise((r) => setTimeout(r, 800));
    await alone`commit`;
    alone.release();
    const [{ c }] = await other`select count(*)::int as c from t`;
    assert.equal(c, 1);
  } finally {
    await idle.end({ timeout: 0 });
    await other.end();
    await server.close();
  }
});
