import assert from "node:assert/strict";
import { fixtureBelongs, isLoopbackUrl } from "./migrate.ts";

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
