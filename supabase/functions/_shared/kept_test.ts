import assert from "node:assert/strict";
import { Kept } from "./kept.ts";

/** A question that counts its askings and is answered when told. */
function question<T>() {
  const asked: PromiseWithResolvers<T>[] = [];
  return {
    asked,
    ask: () => {
      const one = Promise.withResolvers<T>();
      asked.push(one);
      return one.promise;
    },
  };
}

function kept<T>() {
  let t = 1_000;
  return {
    kept: new Kept<T>({ now: () => t, ttlMs: 60_000, failureMs: 5_000 }),
    advance: (ms: number) => t += ms,
  };
}

Deno.test("Kept: callers that ask while the question is out share it; the answer is kept ttlMs, then asked again", async () => {
  const { kept: k, advance } = kept<string[]>();
  const q = question<string[]>();
  const burst = Array.from({ length: 20 }, () => k.get("rights", q.ask));
  assert.equal(q.asked.length, 1, "a burst asks once");
  q.asked[0].resolve(["anon"]);
  assert.deepEqual(await Promise.all(burst), Array(20).fill(["anon"]));
  advance(59_999);
  assert.deepEqual(await k.get("rights", q.ask), ["anon"]);
  assert.equal(q.asked.length, 1);
  advance(1);
  const again = k.get("rights", q.ask);
  assert.equal(q.asked.length, 2, "asked again once ttlMs have passed");
  q.asked[1].resolve([]);
  assert.deepEqual(await again, []);
});

Deno.test("Kept: a failure is shared by its waiters and kept failureMs, not asked again by every caller", async () => {
  const { kept: k, advance } = kept<boolean>();
  const q = question<boolean>();
  const down = new Error("Auth is down");
  const burst = Array.from({ length: 5 }, () => k.get("autoconfirm", q.ask));
  q.asked[0].reject(down);
  for (const waiting of burst) await assert.rejects(waiting, down);
  advance(4_999);
  await assert.rejects(k.get("autoconfirm", q.ask), down);
  assert.equal(q.asked.length, 1, "the failure is kept");
  advance(1);
  const again = k.get("autoconfirm", q.ask);
  assert.equal(q.asked.length, 2, "asked again once failureMs have passed");
  q.asked[1].resolve(true);
  assert.equal(await again, true);
});

Deno.test("Kept: a question whose asker went away is not the answer: its waiters ask again, and the failure is not kept", async () => {
  const { kept: k } = kept<string>();
  const q = question<string>();
  let gone = false;
  const first = k.get("rights", q.ask, () => gone);
  const waiter = k.get("rights", q.ask);
  gone = true;
  const cancelled = new Error("canceling statement due to user request");
  q.asked[0].reject(cancelled);
  await assert.rejects(first, cancelled, "the asker itself hears its failure");
  for (let turn = 0; turn < 10 && q.asked.length < 2; turn++) {
    await Promise.resolve();
  }
  assert.equal(q.asked.length, 2, "the waiter asked again, on its own");
  q.asked[1].resolve("answer");
  assert.equal(await waiter, "answer");
  assert.equal(await k.get("rights", q.ask), "answer", "and that is kept");
  assert.equal(q.asked.length, 2);
});

Deno.test("Kept: questions under different ids are asked and kept apart", async () => {
  const { kept: k } = kept<number>();
  const q = question<number>();
  const [a, b] = [k.get("a", q.ask), k.get("b", q.ask)];
  assert.equal(q.asked.length, 2);
  q.asked[0].resolve(1);
  q.asked[1].resolve(2);
  assert.deepEqual(await Promise.all([a, b]), [1, 2]);
});
