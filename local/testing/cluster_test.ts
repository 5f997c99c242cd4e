import assert from "node:assert/strict";
import postgres from "postgres";
import { testPostgres } from "../../tests/support/postgres.ts";
import { throwawayCluster } from "./cluster.ts";

Deno.test({
  name:
    "testPostgres: without TEST_DATABASE_URL the suite gets a throw-away cluster of its own, deleted at close, and a neighbouring cluster is left running as it was",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    // A neighbour of this test's own stands for every other cluster on the
    // machine (which this test neither lists nor compares: others may
    // change them at any time).
    const neighbour = await throwawayCluster();
    const other = postgres(neighbour.url, { max: 1, onnotice: () => {} });
    await other`create table kept (v int)`;
    await other`insert into kept values (1)`;
    const saved = Deno.env.get("TEST_DATABASE_URL");
    Deno.env.delete("TEST_DATABASE_URL");
    let pg;
    try {
      pg = await testPostgres();
    } finally {
      if (saved !== undefined) Deno.env.set("TEST_DATABASE_URL", saved);
    }
    assert.ok(pg.url !== null, pg.url === null ? pg.reason : "");
    const url = new URL(pg.url);
    assert.equal(url.hostname, "127.0.0.1");
    assert.notEqual(url.port, new URL(neighbour.url).port);
    const sql = postgres(pg.url, { max: 1, onnotice: () => {} });
    let dataDir: string;
    try {
      const [row] = await sql`select current_setting('data_directory') as d`;
      dataDir = row.d;
    } finally {
      await sql.end();
    }
    assert.match(dataDir, /\/test-pg-[^/]+\/data$/);

    await pg.close();
    await assert.rejects(Deno.stat(dataDir));
    const gone = postgres(pg.url, { max: 1, connect_timeout: 2 });
    try {
      await assert.rejects(gone`select 1`);
    } finally {
      await gone.end();
    }
    try {
      const [row] = await other`select v from kept`;
      assert.equal(row.v, 1);
    } finally {
      await other.end();
      await neighbour.destroy();
    }
  },
});

Deno.test("testPostgres: TEST_DATABASE_URL, when set, is used as it is", async () => {
  const saved = Deno.env.get("TEST_DATABASE_URL");
  Deno.env.set("TEST_DATABASE_URL", "postgresql://u:p@127.0.0.1:1/db");
  try {
    const pg = await testPostgres();
    assert.equal(pg.url, "postgresql://u:p@127.0.0.1:1/db");
    if (pg.url !== null) await pg.close();
  } finally {
    if (saved === undefined) Deno.env.delete("TEST_DATABASE_URL");
    else Deno.env.set("TEST_DATABASE_URL", saved);
  }
});

Deno.test({
  name:
    "throwawayCluster({ settings }): the server starts (and starts again) with them; a setting that could break out of the shell line is refused",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const cluster = await throwawayCluster({
      settings: { wal_level: "logical", max_wal_senders: 4 },
    });
    const shown = async () => {
      const sql = postgres(cluster.url, { max: 1, onnotice: () => {} });
      try {
        const [r] = await sql`
          select current_setting('wal_level') as wal_level,
                 current_setting('max_wal_senders') as senders`;
        return [r.wal_level, r.senders];
      } finally {
        await sql.end();
      }
    };
    try {
      assert.deepEqual(await shown(), ["logical", "4"]);
      await cluster.stop();
      await cluster.start();
      assert.deepEqual(await shown(), ["logical", "4"]);
    } finally {
      await cluster.destroy();
    }
    for (
      const settings of [
        { wal_level: "logical; touch /tmp/x" },
        { "wal_level=logical -c x": "1" },
        { wal_level: "" },
      ] as Record<string, string>[]
    ) {
      await assert.rejects(
        throwawayCluster({ settings }),
        /unsafe server setting/,
      );
    }
  },
});
