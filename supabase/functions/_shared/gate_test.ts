import assert from "node:assert/strict";
import { Gate, type Place } from "./gate.ts";

/** Enters `name`; what started is noted in `started`. */
function holder(gate: Gate, started: string[], name: string): Place {
  return gate.enter(() => started.push(name));
}

Deno.test("Gate: as many holders as connections; the rest start in arrival order, in the turn a place comes back", () => {
  const gate = new Gate(2);
  const started: string[] = [];
  const [a, b, c] = ["a", "b", "c", "d"].map((n) => holder(gate, started, n));
  assert.deepEqual(started, ["a", "b"]);
  assert.equal(gate.waiting, 2);
  a.leave();
  assert.deepEqual(started, ["a", "b", "c"]);
  b.leave();
  b.leave(); // a second leave gives nothing back
  assert.deepEqual(started, ["a", "b", "c", "d"]);
  assert.equal(gate.waiting, 0);
  holder(gate, started, "e");
  assert.deepEqual(started.slice(4), []);
  c.leave();
  assert.deepEqual(started.slice(4), ["e"]);
});

Deno.test("Gate: a waiter withdrawn never starts and takes no place; one that started cannot be withdrawn", () => {
  const gate = new Gate(1);
  const started: string[] = [];
  const first = holder(gate, started, "a");
  const second = holder(gate, started, "b");
  holder(gate, started, "c");
  assert.equal(first.withdraw(), false);
  assert.equal(second.withdraw(), true);
  assert.equal(second.withdraw(), false);
  second.leave(); // never in: gives nothing back
  assert.deepEqual(started, ["a"]);
  first.leave();
  assert.deepEqual(started, ["a", "c"]);
  assert.equal(gate.waiting, 0);
});

Deno.test("Gate: fewer than one connection is refused", () => {
  assert.throws(() => new Gate(0), RangeError);
  assert.throws(() => new Gate(1.5), RangeError);
});
