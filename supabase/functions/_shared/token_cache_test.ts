import assert from "node:assert/strict";
import { TokenCache } from "./token_cache.ts";

const T0 = 1_800_000_000_000;
const EXP = T0 / 1000 + 3600;

Deno.test("TokenCache: an entry is answered until the token's exp, then dropped", () => {
  const cache = new TokenCache<string>({
    maxEntries: 10,
    maxAgeMs: 86_400_000,
  });
  cache.set("a.b.c", "claims", EXP, T0);
  assert.equal(cache.get("a.b.c", T0), "claims");
  assert.equal(cache.get("a.b.c", EXP * 1000 - 1), "claims");
  assert.equal(cache.get("a.b.c", EXP * 1000), undefined);
  assert.equal(cache.size, 0);
});

Deno.test("TokenCache: no entry outlives maxAgeMs, even before exp", () => {
  const cache = new TokenCache<string>({ maxEntries: 10, maxAgeMs: 60_000 });
  cache.set("a.b.c", "claims", EXP, T0);
  assert.equal(cache.get("a.b.c", T0 + 59_999), "claims");
  assert.equal(cache.get("a.b.c", T0 + 60_000), undefined);
});

Deno.test("TokenCache: a token already past its exp is not stored", () => {
  const cache = new TokenCache<string>({ maxEntries: 10, maxAgeMs: 60_000 });
  cache.set("a.b.c", "claims", T0 / 1000, T0);
  cache.set("d.e.f", "claims", T0 / 1000 - 5, T0);
  assert.equal(cache.size, 0);
  assert.equal(cache.get("a.b.c", T0 - 10_000), undefined);
});

Deno.test("TokenCache: keyed by the whole token string", () => {
  const cache = new TokenCache<string>({ maxEntries: 10, maxAgeMs: 60_000 });
  cache.set("head.payload.signature", "claims", EXP, T0);
  assert.equal(cache.get("head.payload.signature", T0), "claims");
  assert.equal(cache.get("head.payload.signaturf", T0), undefined);
  assert.equal(cache.get("head.payload.", T0), undefined);
  assert.equal(cache.get("head.payload.signature ", T0), undefined);
  assert.equal(cache.get("head.payload", T0), undefined);
});

Deno.test("TokenCache: bounded; the entry verified longest ago goes first", () => {
  const cache = new TokenCache<number>({ maxEntries: 3, maxAgeMs: 60_000 });
  for (let i = 0; i < 5; i++) cache.set(`t${i}`, i, EXP, T0);
  assert.equal(cache.size, 3);
  assert.equal(cache.get("t0", T0), undefined);
  assert.equal(cache.get("t1", T0), undefined);
  assert.deepEqual(["t2", "t3", "t4"].map((t) => cache.get(t, T0)), [2, 3, 4]);
  // Storing a known token again renews its place rather than adding one.
  cache.set("t2", 20, EXP, T0);
  cache.set("t5", 5, EXP, T0);
  assert.equal(cache.size, 3);
  assert.equal(cache.get("t3", T0), undefined);
  assert.equal(cache.get("t2", T0), 20);
});

Deno.test("TokenCache: refuses bounds that would hold nothing", () => {
  assert.throws(
    () => new TokenCache({ maxEntries: 0, maxAgeMs: 1 }),
    RangeError,
  );
  assert.throws(
    () => new TokenCache({ maxEntries: 1, maxAgeMs: 0 }),
    RangeError,
  );
});

Deno.test("TokenCache: clear forgets everything", () => {
  const cache = new TokenCache<string>({ maxEntries: 10, maxAgeMs: 60_000 });
  cache.set("a.b.c", "claims", EXP, T0);
  cache.clear();
  assert.equal(cache.get("a.b.c", T0), undefined);
});

Deno.test("TokenCache: an entry lasts maxAgeMs from when its keys were fetched, not from when it was verified", () => {
  const cache = new TokenCache<string>({ maxEntries: 10, maxAgeMs: 600_000 });
  // Keys fetched at T0; the token verified with them 9 minutes later.
  cache.set("a.b.c", "claims", EXP, T0 + 540_000, T0);
  assert.equal(cache.get("a.b.c", T0 + 599_999), "claims");
  assert.equal(cache.get("a.b.c", T0 + 600_000), undefined);
  // Keys already past their lifetime: nothing is stored.
  cache.set("d.e.f", "claims", EXP, T0 + 600_000, T0);
  assert.equal(cache.size, 0);
});
