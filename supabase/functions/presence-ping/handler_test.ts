import assert from "node:assert/strict";
import { effectiveState } from "./handler.ts";

Deno.test("effectiveState: no body and no query gives online", () => {
  assert.equal(effectiveState("", null), "online");
});

Deno.test("effectiveState: body state wins over query state", () => {
  assert.equal(effectiveState('{"state":"online"}', "offline"), "online");
  assert.equal(effectiveState('{"state":"offline"}', "online"), "offline");
});

Deno.test("effectiveState: query state is used when the body has none", () => {
  assert.equal(effectiveState("", "offline"), "offline");
  assert.equal(effectiveState("{}", "offline"), "offline");
  assert.equal(effectiveState('{"state":null}', "offline"), "offline");
});

Deno.test("effectiveState: unknown or non-string states give online", () => {
  assert.equal(effectiveState('{"state":"away"}', "offline"), "online");
  assert.equal(effectiveState('{"state":5}', null), "online");
  assert.equal(effectiveState('{"state":["offline"]}', null), "online");
  assert.equal(effectiveState("", "nope"), "online");
});

Deno.test("effectiveState: trimmed and case-insensitive", () => {
  assert.equal(effectiveState('{"state":"  OffLine "}', null), "offline");
  assert.equal(effectiveState("", " OFFLINE"), "offline");
});

Deno.test("effectiveState: a body that is not JSON, or not an object, counts as no state", () => {
  assert.equal(effectiveState("state=offline", "offline"), "offline");
  assert.equal(effectiveState("{broken", null), "online");
  assert.equal(effectiveState('["offline"]', null), "online");
  assert.equal(effectiveState('"offline"', null), "online");
});
