import assert from "node:assert/strict";
import { lockDataDir, readStackInfo } from "./data_lock.ts";

Deno.test("lockDataDir: stack.json, which may hold a database URL with its password, is readable by its owner only", async () => {
  const dataDir = await Deno.makeTempDir({ prefix: "lock-" });
  try {
    const lock = await lockDataDir(dataDir);
    await lock.record({
      database: "postgres",
      apiUrl: "http://127.0.0.1:1",
      dbUrl: "postgresql://app:pw@db.internal/app",
    });
    assert.equal(
      (await Deno.stat(`${dataDir}/stack.json`)).mode! & 0o777,
      0o600,
    );
    assert.equal((await readStackInfo(dataDir))?.apiUrl, "http://127.0.0.1:1");
    await lock.release();
  } finally {
    await Deno.remove(dataDir, { recursive: true });
  }
});

Deno.test("readStackInfo: a stack.json left by a stack that died, whose process id another process now has, is no running stack, and lockDataDir takes the folder over", async () => {
  const dataDir = await Deno.makeTempDir({ prefix: "lock-stale-" });
  // A live process that is not the stack that wrote the file.
  const other = new Deno.Command("sleep", { args: ["30"] }).spawn();
  try {
    await Deno.writeTextFile(
      `${dataDir}/stack.json`,
      JSON.stringify({
        pid: other.pid,
        processStart: "1",
        apiUrl: "http://127.0.0.1:1",
      }),
    );
    assert.equal(await readStackInfo(dataDir), null);
    const lock = await lockDataDir(dataDir);
    assert.equal((await readStackInfo(dataDir))?.pid, Deno.pid);
    await lock.release();
  } finally {
    other.kill();
    await other.status;
    await Deno.remove(dataDir, { recursive: true });
  }
});
