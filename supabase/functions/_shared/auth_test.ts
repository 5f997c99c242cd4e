import assert from "node:assert/strict";
import { bearerToken } from "./auth.ts";
import { HttpError } from "./errors.ts";

const req = (authorization?: string) =>
  new Request("http://x/", {
    headers: authorization === undefined ? {} : { authorization },
  });

Deno.test("bearerToken: takes the token after 'Bearer '", () => {
  assert.equal(bearerToken(req("Bearer a.b.c")), "a.b.c");
  assert.equal(bearerToken(req("Bearer   a.b.c  ")), "a.b.c");
});

Deno.test("bearerToken: a missing header, another scheme or an empty token is 401 missing_bearer", () => {
  for (
    const value of [
      undefined,
      "",
      "Basic abc",
      "bearer a.b.c",
      "Bearer",
      "Bearer    ",
      "Token a.b.c",
    ]
  ) {
    assert.throws(() => bearerToken(req(value)), (e: unknown) => {
      assert.ok(e instanceof HttpError);
      assert.equal(e.status, 401);
      assert.equal(e.code, "missing_bearer");
      return true;
    }, String(value));
  }
});
