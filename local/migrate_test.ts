import assert from "node:assert/strict";
import postgres from "postgres";
import { bootstrapDatabase } from "./db/bootstrap.ts";
import { fixtureBelongs, isLoopbackUrl, pushMigrations } from "./migrate.ts";
import { StartError } from "./start_error.ts";
import { createTestDatabase } from "./testing/database.ts";

Deno.test("isLoopbackUrl: loopback hosts and Unix sockets are this machine; any other host is not", () => {
  for (
    const url of [
      "postgresql://postgres:postgres@127.0.0.1:54322/postgres",
      "postgres://u@localhost/db",
      "postgresql://u@127.8.9.10:5432/db",
      "postgresql://u@[::1]:5432/db",
      "postgresql://u@/db?host=/var/run/postgresql",
    ]
  ) assert.equal(isLoopbackUrl(url), true, url);
  for (
    const url of [
      "postgresql://postgres:pw@db.abcdefghijklmnop.supabase.co:5432/postgres",
      "postgresql://postgres.abc:pw@aws-0-eu-west-1.pooler.supabase.com:6543/postgres",
      "postgresql://u@10.0.0.5/db",
      "postgresql://u@localhost.example.com/db",
      "postgresql://u@127.0.0.1.nip.io/db",
      "postgresql://u@x/db?host=db.internal",
      "not a url",
      "db.abcdefghijklmnop.supabase.co:5432/postgres",
      "project.co:54321",
    ]
  ) assert.equal(isLoopbackUrl(url), false, url);
});

Deno.test("fixtureBelongs: never in a database on another machine (seeded identities have known passwords), decided without connecting", async () => {
  // A reserved name that resolves nowhere: connecting would fail.
  assert.equal(
    await fixtureBelongs(
      "postgresql://postgres:pw@db.example.invalid/postgres",
    ),
    false,
  );
});

Deno.test("pushMigrations: a database that applied a migration this checkout lacks, or that has not applied one dated before its newest, says so and what to do, before applying anything", async () => {
  const db = await createTestDatabase();
  const sql = postgres(db.url, { max: 1, prepare: false, onnotice: () => {} });
  const refusal = (url: string) =>
    pushMigrations(url, { includeSeed: false }).then(
      () => assert.fail("pushed"),
      (e: unknown) => {
        assert.ok(e instanceof StartError, String(e));
        return e;
      },
    );
  try {
    await bootstrapDatabase(db.url);
    await pushMigrations(db.url, { includeSeed: false });
    // Applied on another branch.
    await sql`insert into supabase_migrations.schema_migrations
                (version, name, statements)
              values ('20991231000000', 'other_branch', array['select 1'])`;
    const other = await refusal(db.url);
    assert.equal(
      other.message,
      "The database has applied migrations this checkout does not have (20991231000000)",
    );
    assert.match(other.hint, /npm run reset/);
    assert.match(
      other.hint,
      // The CLI 3 spelling: --remote=<url> (--db-url is gone).
      /supabase migration repair --status reverted 20991231000000 --remote=<url>/,
    );
    await sql`delete from supabase_migrations.schema_migrations
              where version = '20991231000000'`;
    // A teammate's migration, dated before the newest applied one.
    const [{ version, name }] = await sql`
      delete from supabase_migrations.schema_migrations
      where version = (select min(version) from supabase_migrations.schema_migrations
                       where version > '20261123000000')
      returning version, name`;
    const earlier = await refusal(db.url);
    assert.equal(
      earlier.message,
      `Migrations dated before the newest one the database has applied are not applied yet (${version}_${name}.sql)`,
    );
    assert.match(earlier.hint, /npm run reset.*--include-all --remote=<url>/);
  } finally {
    await sql.end();
    await db.close();
  }
});
