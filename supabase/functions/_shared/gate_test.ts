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

Deno.test("Gate: a place that holds keeps every waiter out, free places too, until it leaves; then they start in arrival order", () => {
  const gate = new Gate(3);
  const started: string[] = [];
  const a = holder(gate, started, "a");
  const b = holder(gate, started, "b");
  a.hold();
  a.hold(); // holding twice is holding once
  holder(gate, started, "c");
  holder(gate, started, "d");
  assert.deepEqual(started, ["a", "b"]);
  b.leave(); // a place comes back, but the gate is held
  assert.deepEqual(started, ["a", "b"]);
  assert.equal(gate.waiting, 2);
  a.leave();
  assert.deepEqual(started, ["a", "b", "c", "d"]);
  holder(gate, started, "e"); // one place left: no longer held
  assert.deepEqual(started.slice(4), ["e"]);
});

Deno.test("Gate: a place not in cannot hold; a start that leaves at once lets the next waiter start in the same turn", () => {
  const gate = new Gate(1);
  const started: string[] = [];
  const a = holder(gate, started, "a");
  const b = holder(gate, started, "b");
  b.hold(); // still waiting: nothing held
  const quick: Place[] = [];
  quick.push(gate.enter(() => {
    started.push("c");
    quick[0].leave(); // as a statement refused before it is sent
  }));
  const d = holder(gate, started, "d");
  a.leave();
  assert.deepEqual(started, ["a", "b"]);
  b.leave();
  assert.deepEqual(started, ["a", "b", "c", "d"]);
  b.hold(); // out: nothing held
  d.leave();
  holder(gate, started, "e");
  assert.deepEqual(started, ["a", "b", "c", "d", "e"]);
});
