import assert from "node:assert/strict";
import postgres from "postgres";
import { loadOrCreateSigningKey } from "../local/auth/mod.ts";
import { throwawayCluster } from "../local/testing/cluster.ts";
import { TOKEN_CACHE_ENTRIES } from "../supabase/functions/_shared/jwt_local.ts";
import { TokenCache } from "../supabase/functions/_shared/token_cache.ts";
import { benchPostgres, freshTokens, PASSES, selectPasses } from "./main.ts";
import { mintTokens } from "./users.ts";
import { measureBulkCost } from "./write_cost.ts";

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

Deno.test("benchPostgres: a non-loopback URL is refused before anything is made; without one, a throw-away cluster of the run's own, which close removes", async () => {
  await assert.rejects(
    benchPostgres("postgresql://u:p@192.0.2.2:5432/postgres"),
    /Refusing to load "192\.0\.2\.2": loopback only/,
  );
  const pg = await benchPostgres(undefined);
  let dir = "";
  try {
    assert.equal(pg.own, true);
    const sql = postgres(pg.url, { max: 1, onnotice: () => {} });
    const [{ data_directory }] = await sql`show data_directory`;
    await sql.end();
    // Made by the run in a temporary folder: not the machine's cluster.
    assert.match(data_directory, /\/test-pg-[^/]+\/data$/);
    dir = data_directory.replace(/\/data$/, "");
  } finally {
    await pg.close();
  }
  await assert.rejects(Deno.stat(dir), Deno.errors.NotFound);
});

// Ctrl-C in the middle of a pass: the run's cluster and every temporary
// file of the run (the signing key among them) are gone when it exits.
Deno.test("bench: Ctrl-C undoes the run: no cluster, database or temporary file left", async () => {
  await _interrupted("", (tmp) => {
    const during = [...Deno.readDirSync(tmp)].map((e) => e.name);
    assert.ok(during.some((n) => n.startsWith("test-pg-")), `${during}`);
  });
});

// On a server it was given, the bench's database is dropped (the server
// is left running).
Deno.test("bench: Ctrl-C on a given server drops the bench's database", async () => {
  const cluster = await throwawayCluster();
  const sql = postgres(cluster.url, { max: 1, onnotice: () => {} });
  const benchDbs = () =>
    sql`select datname from pg_database where datname ~ '^t_[0-9a-f]{16}$'`;
  try {
    await _interrupted(cluster.url, async () => {
      assert.equal((await benchDbs()).length, 1);
    });
    assert.deepEqual([...await benchDbs()], []);
  } finally {
    await sql.end();
    await cluster.destroy();
  }
});

/**
 * Runs `bench/main.ts --only=write-cost` with its TMPDIR in a fresh folder,
 * sends SIGINT a second into its pass (after `during`), and checks that
 * it exits 130 leaving that folder empty and no process naming it.
 */
async function _interrupted(
  databaseUrl: string,
  during: (tmp: string) => unknown,
): Promise<void> {
  const tmp = await Deno.makeTempDir({ prefix: "bench-sigint-" });
  await Deno.chmod(tmp, 0o755); // as root, the cluster runs as postgres
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--no-check",
      new URL("./main.ts", import.meta.url)
        .pathname,
      "--quick",
      "--only=write-cost",
      "--rounds=1",
    ],
    env: { TMPDIR: tmp, TEST_DATABASE_URL: databaseUrl },
    stdout: "null",
    stderr: "piped",
  }).spawn();
  try {
    let seen = "";
    const lines = child.stderr.pipeThrough(new TextDecoderStream());
    for await (const chunk of lines) {
      seen += chunk;
      if (seen.includes("Write cost: index")) break;
    }
    assert.match(seen, /Write cost: index/);
    await new Promise((r) => setTimeout(r, 1_000)); // inside the pass
    await during(tmp);
    child.kill("SIGINT");
    assert.equal((await child.status).code, 130);
    assert.deepEqual([...Deno.readDirSync(tmp)], []);
    assert.deepEqual(await _running(tmp), []);
  } finally {
    try {
      child.kill("SIGKILL");
    } catch {
      // it ended
    }
    await child.status;
    // A postmaster a failed run left behind: stopped by its pid.
    for (const pid of await _running(tmp)) Deno.kill(pid, "SIGQUIT");
    await Deno.remove(tmp, { recursive: true });
  }
}

/** Processes whose command line names `dir` (the run's cluster). */
async function _running(dir: string): Promise<number[]> {
  const ps = await new Deno.Command("ps", { args: ["-eo", "pid=,args="] })
    .output();
  return new TextDecoder().decode(ps.stdout).split("\n")
    .filter((l) => l.includes(dir)).map((l) => Number(l.trim().split(" ")[0]));
}

// presence_state stays HOT (free space, no index on it); ultimo_acceso does
// only before the product, whose index covers it, triggers or not.
Deno.test("measureBulkCost: the app's bulk update per column, before the product, with it, and with its triggers dropped", async () => {
  const given = Deno.env.get("TEST_DATABASE_URL");
  const pg = await benchPostgres(given);
  Deno.env.set("TEST_DATABASE_URL", pg.url);
  try {
    const rows = await measureBulkCost(1, [], 3_000);
    assert.deepEqual(
      rows.map((r) => `${r.table} ${r.column} ${r.hotPercent}%`),
      [
        "before presence_state 100%",
        "before ultimo_acceso 100%",
        "product presence_state 100%",
        "product ultimo_acceso 0%",
        "triggers dropped presence_state 100%",
        "triggers dropped ultimo_acceso 0%",
      ],
    );
  } finally {
    if (!given) Deno.env.delete("TEST_DATABASE_URL");
    await pg.close();
  }
});

// ES256 signatures are deterministic here: equal claims, equal tokens.
// Minting rounds a second apart (a clock stepped 1 s per reading) used to
// give every round the same iat and so the same tokens.
Deno.test("freshTokens: distinct by construction, whatever the clock does, and no more than the verified-token cache holds", async () => {
  const dir = await Deno.makeTempDir();
  const realNow = Date.now;
  try {
    const signingKeyFile = `${dir}/signing_key.json`;
    await loadOrCreateSigningKey(signingKeyFile);
    const mint = (iat: number) =>
      mintTokens({
        users: 3,
        signingKeyFile,
        jwtSecret: "x".repeat(32),
        template: { iss: "bench", iat: 0, exp: 3600 },
        iat,
      });
    let now = realNow();
    Date.now = () => now += 1000;
    const tokens = await freshTokens(mint, 10);
    assert.equal(new Set(tokens).size, 10);
    Date.now = realNow;
    await assert.rejects(
      freshTokens(mint, TOKEN_CACHE_ENTRIES + 1),
      /the cache holds 10000/,
    );
  } finally {
    Date.now = realNow;
    await Deno.remove(dir, { recursive: true });
  }
});

// Why the count stops at the cache's size: replayed in order, as the pass
// sends them, one token more than a first-in-first-out cache holds never
// hits (each miss evicts the next one due).
Deno.test("verified-token cache: the first-seen tokens all miss, then all hit, at the cache's size; one more and none hits", () => {
  const replay = (count: number) => {
    const cache = new TokenCache<number>({
      maxEntries: TOKEN_CACHE_ENTRIES,
      maxAgeMs: 600_000,
    });
    const pass = () => {
      let hits = 0;
      for (let i = 0; i < count; i++) {
        if (cache.get(`t${i}`, 0) !== undefined) hits++;
        else cache.set(`t${i}`, 1, 3600, 0);
      }
      return hits;
    };
    return [pass(), pass()];
  };
  assert.deepEqual(replay(TOKEN_CACHE_ENTRIES), [0, TOKEN_CACHE_ENTRIES]);
  assert.deepEqual(replay(TOKEN_CACHE_ENTRIES + 1), [0, 0]);
});
