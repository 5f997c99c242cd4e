import assert from "node:assert/strict";
import { withoutDomain } from "./query.ts";

Deno.test("withoutDomain: a username that is an email is cut at its last @", () => {
  assert.equal(withoutDomain("carla@example.com"), "carla");
  assert.equal(withoutDomain("o'brien@a@b.io"), "o'brien@a");
  assert.equal(withoutDomain("@example.com"), "");
  assert.equal(withoutDomain("diego"), "diego");
  assert.equal(withoutDomain(null), null);
});
