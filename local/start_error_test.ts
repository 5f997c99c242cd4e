import assert from "node:assert/strict";
import { redactIn, redactUrl } from "./start_error.ts";

Deno.test("redactUrl: the user and host:port/database, no password, query or fragment, the credentials ending at the last @", () => {
  assert.equal(
    redactUrl("postgresql://postgres:secret@db:5432/app?sslmode=require"),
    "postgresql://postgres@db:5432/app",
  );
  for (
    const password of ["p#w", "my@Secret#Pass", "pa/ss", "a?b", "x@y/z#w"]
  ) {
    assert.equal(
      redactUrl(`postgresql://postgres.ref:${password}@db.host:6543/postgres`),
      "postgresql://postgres.ref@db.host:6543/postgres",
      password,
    );
  }
  assert.equal(
    redactUrl("postgresql://db:5432/app"),
    "postgresql://db:5432/app",
  );
  assert.equal(redactUrl("db.x:5432/postgres"), "<unparsable database URL>");
});

Deno.test("redactIn: a driver's message quoting the URL, its password, or a piece of it read as a host or path keeps none of them", () => {
  const url =
    "postgresql://postgres.ref:my@Secret#Pass@127.0.0.1:6543/postgres";
  assert.equal(
    redactIn(`Invalid URL: '${url}'`, url),
    "Invalid URL: 'postgresql://postgres.ref@127.0.0.1:6543/postgres'",
  );
  // postgres.js reads this URL's host as "Secret".
  assert.equal(
    redactIn("getaddrinfo ENOTFOUND Secret", url),
    "getaddrinfo ENOTFOUND ***",
  );
  assert.equal(
    redactIn("password authentication failed near my@Secret#Pass", url),
    "password authentication failed near ***",
  );
  const slash = "postgresql://u:abc/defg@h:5432/d";
  assert.equal(
    redactIn('database "defg@h:5432/d" does not exist', slash),
    'database "***@h:5432/d" does not exist',
  );
  const encoded = "postgresql://u:p%40ss@h:5432/d";
  assert.equal(
    redactIn(`connect to ${encoded} failed, password p@ss`, encoded),
    "connect to postgresql://u@h:5432/d failed, password ***",
  );
  // A short password is masked only where it stands alone.
  const short = "postgresql://u:x@h/nodb";
  assert.equal(
    redactIn('database "nodb" does not exist', short),
    'database "nodb" does not exist',
  );
  assert.equal(redactIn("ECONNREFUSED", url), "ECONNREFUSED");
});
