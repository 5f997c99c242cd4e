import assert from "node:assert/strict";
import { redact } from "./log.ts";

Deno.test("redact: removes JWTs, API keys, URL credentials and passwords", () => {
  const jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl";
  const text = redact(
    `token ${jwt} key sb_secret_abc123 db postgresql://postgres:hunter2@db:5432/x password=hunter2`,
  );
  assert.ok(!text.includes(jwt));
  assert.ok(!text.includes("sb_secret_abc123"));
  assert.ok(!text.includes("hunter2"));
  assert.ok(text.includes("postgresql://[redacted]@db:5432/x"));
});

Deno.test("redact: leaves ordinary text alone", () => {
  assert.equal(
    redact('column "correo" does not exist'),
    'column "correo" does not exist',
  );
});
