import assert from "node:assert/strict";
import { PASSES, selectPasses } from "./main.ts";

Deno.test("selectPasses: --only adds the passes a pass needs, in table order; an unknown name lists the passes", () => {
  assert.deepEqual(selectPasses(undefined), [...PASSES]);
  const names = (only: string) => selectPasses(only).map((p) => p.name);
  assert.deepEqual(names("latency"), ["work", "throughput", "latency"]);
  assert.deepEqual(names("read-cost, scale"), ["work", "scale", "read-cost"]);
  assert.throws(
    () => selectPasses("nope"),
    /Unknown pass "nope"; passes: work, /,
  );
  // Every need names a pass that comes earlier.
  for (const [i, p] of PASSES.entries()) {
    for (const need of p.needs) {
      assert.ok(PASSES.findIndex((q) => q.name === need) < i, `${p.name}`);
    }
  }
});
