import assert from "node:assert/strict";
import { benchCommand, cpuUse, readCpu } from "./measure.ts";

Deno.test("benchCommand: a database URL's password is never recorded or printed", () => {
  assert.equal(benchCommand([]), "npm run bench");
  const command = benchCommand([
    "--quick",
    "--database-url=postgresql://postgres:s3cret@127.0.0.1:5432/postgres",
  ]);
  assert.equal(
    command,
    "npm run bench -- --quick --database-url=postgresql://postgres@127.0.0.1:5432/postgres",
  );
  assert.doesNotMatch(
    benchCommand(["--database-url", "postgres://u:p%40ss@db/x?sslmode=off"]),
    /p%40ss|p@ss|sslmode/,
  );
});

Deno.test("cpuUse: per request, by owner; a process that started counts whole, one that ended is lost, not negative", () => {
  const ticks = (
    self: number,
    postgres: [string, number][],
    others: [string, number][],
    busy: number,
    total: number,
  ) => ({
    self,
    postgres: new Map(postgres),
    others: new Map(others),
    busy,
    total,
  });
  const before = ticks(100, [["10", 50], ["11", 20]], [["90", 5]], 1000, 4000);
  // Backend 11 exited; backend 12 started during the pass.
  const after = ticks(300, [["10", 150], ["12", 40]], [["90", 45]], 1400, 4800);
  const use = cpuUse(before, after, 1000);
  // 200 ticks of 10 ms over 1,000 requests.
  assert.equal(use.denoMsPerRequest, 2);
  assert.equal(use.postgresMsPerRequest, 1.4); // (100 + 40) ticks
  assert.equal(use.machineBusyPercent, 50); // 400 of 800
  assert.equal(use.otherBusyPercent, 5); // 40 of 800
  assert.equal(cpuUse(before, after, 0).denoMsPerRequest, 0);
});

Deno.test("readCpu: this process is itself, never one of the others; the machine's counters only grow", async () => {
  const a = await readCpu();
  let x = 0;
  for (let i = 0; i < 3e7; i++) x += i % 7;
  const b = await readCpu();
  assert.ok(x > 0);
  assert.ok(b.self > a.self, "the loop's CPU is this process's");
  assert.ok(!a.others.has(String(Deno.pid)));
  assert.ok(b.total > a.total && b.busy >= a.busy);
});

// A stand-in postmaster (a shell) with two children, beside an unrelated
// process: only the stand-in's family counts as the bench's PostgreSQL.
Deno.test("readCpu: the bench's PostgreSQL is its postmaster and that one's children, not another cluster's processes", async () => {
  const spawn = (line: string) =>
    new Deno.Command("sh", { args: ["-c", line] }).spawn();
  const postmaster = spawn("sleep 30 & sleep 30 & wait");
  const other = spawn("sleep 30");
  try {
    await new Promise((r) => setTimeout(r, 300));
    const ticks = await readCpu({
      postmaster: String(postmaster.pid),
      dbUrl: "postgresql://u@127.0.0.1:1/t_bench",
    });
    const ours = [...ticks.postgres.keys()];
    assert.equal(ours.length, 3, `${ours}`);
    assert.ok(ours.includes(String(postmaster.pid)));
    assert.ok(!ticks.postgres.has(String(other.pid)));
  } finally {
    for (const p of [postmaster, other]) {
      p.kill();
      await p.status;
    }
  }
});
