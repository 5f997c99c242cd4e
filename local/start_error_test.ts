import assert from "node:assert/strict";
import { redactIn, redactUrl } from "./start_error.ts";

Deno.test("redactUrl: the user and host:port/database, no password, no query", () => {
  assert.equal(
    redactUrl("postgresql://postgres:secret@db:5432/app?sslmode=require"),
    "postgresql://postgres@db:5432/app",
  );
  assert.equal(
    redactUrl("postgresql://u:p#w@h/d"),
    "<unparsable database URL>",
  );
});

Deno.test("redactIn: a driver's message quoting the URL, or only its password, keeps neither", () => {
  const url =
    "postgresql://postgres.ref:my#Secret!Pass@127.0.0.1:6543/postgres";
  assert.equal(
    redactIn(`Invalid URL: '${url}'`, url),
    "Invalid URL: '<unparsable database URL>'",
  );
  assert.equal(
    redactIn("password authentication failed near my#Secret!Pass", url),
    "password authentication failed near ***",
  );
  const encoded = "postgresql://u:p%40ss@h:5432/d";
  assert.equal(
    redactIn(`connect to ${encoded} failed, password p@ss`, encoded),
    "connect to postgresql://u@h:5432/d failed, password ***",
  );
  assert.equal(redactIn("ECONNREFUSED", url), "ECONNREFUSED");
});
