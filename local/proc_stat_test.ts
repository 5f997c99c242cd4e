import assert from "node:assert/strict";
import { parseProcStat } from "./proc_stat.ts";

Deno.test("parseProcStat: parent and utime + stime, counted from the last ')' (a command name may hold both)", () => {
  const stat =
    "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 31 0 0 20 0 1 0 1000 0 0";
  assert.deepEqual(parseProcStat(stat), { ppid: "17", ticks: 281 });
});

Deno.test("parseProcStat: this process's own line reads as numbers", () => {
  if (Deno.build.os !== "linux") return;
  const own = parseProcStat(Deno.readTextFileSync("/proc/self/stat"));
  assert.ok(Number.isInteger(own.ticks) && own.ticks >= 0);
  assert.match(own.ppid, /^\d+$/);
});
