import assert from "node:assert/strict";
import postgres from "postgres";
import { testPostgres } from "../../tests/support/postgres.ts";

// What the machine's own clusters look like (version, name, port, status),
// or "" where Debian's tools are absent.
async function machineClusters(): Promise<string> {
  try {
    const out = await new Deno.Command("pg_lsclusters", {
      args: ["--no-header"],
      stdout: "piped",
      stderr: "null",
    }).output();
    return new TextDecoder().decode(out.stdout);
  } catch {
    return "";
  }
}

Deno.test({
  name:
    "testPostgres: without TEST_DATABASE_URL the suite gets a throw-away cluster of its own, deleted at close, and no other cluster is touched",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const before = await machineClusters();
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
    for (const line of before.trim().split("\n").filter(Boolean)) {
      assert.notEqual(url.port, line.trim().split(/\s+/)[2], line);
    }
    const sql = postgres(pg.url, { max: 1, onnotice: () => {} });
    let dataDir: string;
    try {
      const [row] = await sql`select current_setting('data_directory') as d`;
      dataDir = row.d;
    } finally {
      await sql.end();
    }
    assert.match(dataDir, /\/test-pg-[^/]+\/data$/);
    assert.equal(await machineClusters(), before);

    await pg.close();
    await assert.rejects(Deno.stat(dataDir));
    const gone = postgres(pg.url, { max: 1, connect_timeout: 2 });
    try {
      await assert.rejects(gone`select 1`);
    } finally {
      await gone.end();
    }
    assert.equal(await machineClusters(), before);
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
