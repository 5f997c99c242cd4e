import assert from "node:assert/strict";
import { emailLocalPart } from "./match_user.ts";

Deno.test("emailLocalPart: the part before the last @", () => {
  assert.equal(emailLocalPart("ana@example.com"), "ana");
  assert.equal(emailLocalPart('"a@b"@example.com'), '"a@b"');
});

Deno.test("emailLocalPart: null without an email or a local part", () => {
  assert.equal(emailLocalPart(null), null);
  assert.equal(emailLocalPart("no-at-sign"), null);
  assert.equal(emailLocalPart("@example.com"), null);
});
