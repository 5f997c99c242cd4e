import assert from "node:assert/strict";
import { Gate, type Place } from "./gate.ts";

const ALONE = { shared: false };
const SHARED = { shared: true };

/** Enters `name` of `kind`; what started is noted in `started`. */
function holder(
  gate: Gate,
  started: string[],
  name: string,
  kind: { shared: boolean },
): Place {
  return gate.enter(() => started.push(name), kind);
}

Deno.test("Gate: as many holders alone as connections; the rest start in arrival order, in the turn a place comes back", () => {
  const gate = new Gate(2);
  const started: string[] = [];
  const [a, b] = ["a", "b", "c", "d"].map((n) =>
    holder(gate, started, n, ALONE)
  );
  assert.deepEqual(started, ["a", "b"]);
  assert.equal(gate.waiting, 2);
  a.leave();
  assert.deepEqual(started, ["a", "b", "c"]);
  b.leave();
  b.leave(); // a second leave gives nothing back
  assert.deepEqual(started, ["a", "b", "c", "d"]);
  assert.equal(gate.waiting, 0);
  holder(gate, started, "e", ALONE);
  assert.deepEqual(started.slice(4), []);
});

Deno.test("Gate: shared holders go in at once, any number; one alone waits until alone and shared together leave a connection free", () => {
  const gate = new Gate(2);
  const started: string[] = [];
  const shared = ["s1", "s2", "s3"].map((n) =>
    holder(gate, started, n, SHARED)
  );
  assert.deepEqual(started, ["s1", "s2", "s3"]);
  holder(gate, started, "a", ALONE);
  shared[0].leave();
  shared[1].leave();
  // One shared holder and none alone: a second connection is free.
  assert.deepEqual(started, ["s1", "s2", "s3", "a"]);
});

Deno.test("Gate: a shared holder does not pass one alone that waits before it, so that neither starves; it may follow it in", () => {
  const gate = new Gate(1);
  const started: string[] = [];
  const first = holder(gate, started, "s1", SHARED);
  holder(gate, started, "a", ALONE);
  holder(gate, started, "s2", SHARED);
  holder(gate, started, "s3", SHARED);
  assert.deepEqual(started, ["s1"]);
  assert.equal(gate.waiting, 3);
  first.leave();
  // On the connection "a" has: a shared holder carries its own Sync.
  assert.deepEqual(started, ["s1", "a", "s2", "s3"]);
});

Deno.test("Gate: a waiter withdrawn never starts and holds back nobody; one that started cannot be withdrawn", () => {
  const gate = new Gate(1);
  const started: string[] = [];
  const first = holder(gate, started, "a", ALONE);
  const second = holder(gate, started, "b", ALONE);
  holder(gate, started, "c", ALONE);
  holder(gate, started, "s", SHARED);
  assert.equal(first.withdraw(), false);
  assert.equal(second.withdraw(), true);
  assert.equal(second.withdraw(), false);
  second.leave(); // never in: gives nothing back
  assert.deepEqual(started, ["a"]);
  first.leave();
  assert.deepEqual(started, ["a", "c", "s"]);
  assert.equal(gate.waiting, 0);
});

Deno.test("Gate: fewer than one connection is refused", () => {
  assert.throws(() => new Gate(0), RangeError);
  assert.throws(() => new Gate(1.5), RangeError);
});
