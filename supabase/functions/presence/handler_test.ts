import assert from "node:assert/strict";
import type { CursorState } from "./cursor.ts";
import { CURSOR_MAX_AGE_S, isFresh } from "./handler.ts";

const now = Date.parse("2026-11-23T10:00:00Z");
const cursor = (ageS: number, awayS = 300, offlineS = 900): CursorState => ({
  time: BigInt(now - ageS * 1000) * 1000n,
  snapshot: "1:1:",
  awayS,
  offlineS,
});

Deno.test("isFresh: a cursor up to CURSOR_MAX_AGE_S old, with the same thresholds, continues", () => {
  assert.equal(isFresh(cursor(0), 300, 900, now), true);
  assert.equal(isFresh(cursor(CURSOR_MAX_AGE_S), 300, 900, now), true);
});

Deno.test("isFresh: an older cursor, or other thresholds, asks for a resync", () => {
  assert.equal(isFresh(cursor(CURSOR_MAX_AGE_S + 1), 300, 900, now), false);
  assert.equal(isFresh(cursor(5, 120), 300, 900, now), false);
  assert.equal(isFresh(cursor(5, 300, 600), 300, 900, now), false);
});
