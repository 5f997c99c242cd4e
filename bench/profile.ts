/**
 * `deno run -A --cpu-prof --cpu-prof-dir=DIR bench/profile.ts`: a CPU
 * profile of presence-ping's Deno side under load. It serves the main
 * variant of the bench stack on a fresh database, drives ES256 pings with
 * wrk (or the Deno client) at concurrency 16 for `--duration` seconds, and
 * prints the functions with the most self time in this process, grouped by
 * package, from the profile V8 writes when the process exits (`--top`
 * lines; rerun with the profile's path as `--read=FILE` to print it again).
 *
 * @module
 */
import { parseArgs } from "node:util";
import postgres from "postgres";
import { createTestDatabase } from "../local/testing/database.ts";
import { ensurePostgres } from "../tests/support/postgres.ts";
import { type BenchContext, load, once } from "./context.ts";
import { ensureWrk } from "./load.ts";
import { startBenchStack } from "./stack.ts";
import { createBenchUsers, mintTokens } from "./users.ts";

interface _Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

/**
 * Self time per function and per package of a `.cpuprofile`, largest
 * first, as text.
 */
export function summarizeProfile(profile: {
  nodes: _Node[];
  samples: number[];
  timeDeltas: number[];
}, top = 30): string {
  const self = new Map<number, number>();
  profile.samples.forEach((id, i) =>
    self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0))
  );
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  const byFunction = new Map<string, number>();
  const byPackage = new Map<string, number>();
  for (const node of profile.nodes) {
    const us = self.get(node.id) ?? 0;
    if (!us) continue;
    const f = node.callFrame;
    const where = _package(f.url);
    const key = `${f.functionName || "(anonymous)"} ${where}:${
      f.lineNumber + 1
    }`;
    byFunction.set(key, (byFunction.get(key) ?? 0) + us);
    byPackage.set(where, (byPackage.get(where) ?? 0) + us);
  }
  const lines = (m: Map<string, number>, n: number) =>
    [...m].sort((a, b) => b[1] - a[1]).slice(0, n).map(([k, us]) =>
      `  ${(100 * us / total).toFixed(1).padStart(5)}%  ${k}`
    );
  return [
    `Self time by package (${(total / 1e6).toFixed(1)} s sampled):`,
    ...lines(byPackage, 15),
    `Self time by function (top ${top}):`,
    ...lines(byFunction, top),
  ].join("\n");
}

function _package(url: string): string {
  if (!url) return "(native/idle/gc)";
  const npm = /node_modules\/(?:\.deno\/)?(@?[^/@]+(?:\/[^/@]+)?)/.exec(url) ??
    /registry\.npmjs\.org\/(@?[^/]+(?:\/[^/]+)?)\//.exec(url);
  if (npm) return `npm:${npm[1]}`;
  const local = /\/(supabase\/functions|local|bench|tests)\/(.*)$/.exec(url);
  if (local) return `${local[1]}/${local[2]}`;
  if (url.startsWith("ext:")) return url.split("/").slice(0, 2).join("/");
  return url;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      duration: { type: "string", default: "15" },
      read: { type: "string" },
      top: { type: "string", default: "30" },
    },
  });
  if (values.read) {
    const profile = JSON.parse(await Deno.readTextFile(values.read));
    console.log(summarizeProfile(profile, Number(values.top)));
    return;
  }
  const log = (line: string) => console.error(line);
  const pg = await ensurePostgres();
  if (pg.url === null) throw new Error(`No PostgreSQL: ${pg.reason}`);
  Deno.env.set("TEST_DATABASE_URL", pg.url);
  const database = await createTestDatabase();
  const dataDir = await Deno.makeTempDir({ prefix: "profile-data-" });
  const tmp = await Deno.makeTempDir({ prefix: "profile-" });
  const quietLog = console.log;
  console.log = () => {};
  const stack = await startBenchStack({
    databaseUrl: database.url,
    dataDir,
    log,
    variants: [{ name: "main", settings: { PRESENCE_VERIFY: "local" } }],
  });
  const sql = postgres(stack.dbUrl, { max: 1, onnotice: () => {} });
  try {
    const users = 1000;
    await once(stack.dbUrl, (c) => createBenchUsers(c, users));
    const tokens = await mintTokens({
      users,
      signingKeyFile: stack.signingKeyFile,
      jwtSecret: stack.jwtSecret,
      issuer: stack.issuer,
      expiry: stack.jwtExpiry,
    });
    const tokenFiles = {
      es256: `${tmp}/es256.txt`,
      hs256: `${tmp}/hs256.txt`,
    };
    await Deno.writeTextFile(tokenFiles.es256, tokens.es256.join("\n"));
    await Deno.writeTextFile(tokenFiles.hs256, tokens.hs256.join("\n"));
    const ctx: BenchContext = {
      stack,
      sql,
      tokens,
      tokenFiles,
      users,
      quick: false,
      durationS: Number(values.duration),
      warmupS: 2,
      wrk: await ensureWrk(log),
      log,
    };
    await load(ctx, stack.variants.main.pingUrl, "es256", 16, 2);
    const result = await load(
      ctx,
      stack.variants.main.pingUrl,
      "es256",
      16,
      ctx.durationS,
    );
    console.error(
      `ES256 c=16: ${result.rps.toFixed(0)} req/s, ${result.errors} errors`,
    );
  } finally {
    console.log = quietLog;
    await sql.end({ timeout: 5 });
    await stack.close();
    await database.close();
    await Deno.remove(dataDir, { recursive: true });
    await Deno.remove(tmp, { recursive: true });
  }
  console.error(
    "Profile written on exit; print it with: deno run -A bench/profile.ts --read=<file>.cpuprofile",
  );
}

if (import.meta.main) await main();
