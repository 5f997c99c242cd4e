import assert from "node:assert/strict";
import { covers } from "./query.ts";

const at = (time: bigint, snapshot: string) => ({
  time,
  snapshot,
  awayS: 300,
  offlineS: 900,
});

Deno.test("covers: an older cursor's answer covers a newer one's", () => {
  assert.equal(covers(at(1n, "10:12:10"), at(2n, "10:14:10,12")), true);
  assert.equal(covers(at(1n, "10:12:10,11"), at(1n, "11:13:11")), true);
  assert.equal(covers(at(1n, "5:9:"), at(1n, "5:9:")), true);
});

Deno.test("covers: not when the other cursor could not see what this one saw", () => {
  // 11 committed before the first snapshot but was open at the second.
  assert.equal(covers(at(1n, "10:12:10"), at(2n, "10:14:10,11")), false);
  // A newer snapshot never covers an older one.
  assert.equal(covers(at(2n, "10:14:10,12"), at(1n, "10:12:10")), false);
  // Nor an older time window.
  assert.equal(covers(at(3n, "10:12:10"), at(2n, "10:12:10")), false);
});

Deno.test("covers: not across change logs: a cursor issued while the log was not whole (owed a full read), or under other change-log triggers (fresh5 M1)", () => {
  const whole = { ...at(1n, "10:12:10"), changeLog: "16501A,16502A" };
  const later = { ...at(2n, "10:14:10,12"), changeLog: "16501A,16502A" };
  assert.equal(covers(whole, later), true);
  assert.equal(covers(whole, { ...later, changeLog: "" }), false);
  assert.equal(
    covers({ ...whole, changeLog: "" }, { ...later, changeLog: "" }),
    false,
  );
  assert.equal(covers(whole, { ...later, changeLog: "16501A,16502O" }), false);
  // A cursor of the previous version (no log kept) and one of this one.
  assert.equal(covers(at(1n, "10:12:10"), later), false);
});
