/**
 * `npm run verify` / `deno task verify`: the full reliability run. Starts
 * the local stack as `npm start` does (a subprocess running local/start.ts
 * on a fresh PostgreSQL database), then runs bad input, attacks,
 * concurrency and identity-provider faults against it, and database
 * outages on a throw-away PostgreSQL cluster and on PGlite; finally scans
 * every log line for secrets. Prints requests and failures per category,
 * recovery times and memory, and exits 1 on any failure.
 *
 * Rerun with the printed seed: `deno task verify --seed <n>`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import postgres from "postgres";
import { generateSigningKey, LOCAL_JWT_SECRET } from "../../local/auth/mod.ts";
import { SEED_IDENTITIES } from "../../local/fixture.ts";
import { testPostgres } from "../support/postgres.ts";
import {
  clusterUnavailable,
  freePort,
  restartablePglite,
  throwawayCluster,
} from "./_databases.ts";
import { captureConsole } from "./_logs.ts";
import {
  formatMemory,
  type Memory,
  Rng,
  Secrets,
  sleep,
  Tally,
} from "./_support.ts";
import { openSql, signedInUser, type Target } from "./_target.ts";
import {
  runAuthSyncConcurrency,
  runOddAuthSync,
  runProviderMidUpdate,
} from "./auth_sync.ts";
import { runAttacks } from "./attacks.ts";
import {
  ODD_EMAIL_DOMAINS,
  runBadInput,
  runOddIdentities,
} from "./bad_input.ts";
import { runPingLoad } from "./concurrency.ts";
import { runDbOutage, runProviderFaults } from "./faults.ts";
import { bannerBlock, cursorKeySecrets, scanLogs } from "./secrets.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const { values } = parseArgs({
  args: Deno.args,
  options: {
    seed: { type: "string" },
    requests: { type: "string" },
    users: { type: "string" },
  },
});
const seed = Number(
  values.seed ?? Deno.env.get("VERIFY_SEED") ??
    Math.floor(Math.random() * 2 ** 31),
);
const badRequests = Number(values.requests ?? 2500);
const loadUsers = Number(values.users ?? 1000);
const ADMIN_EMAILS = [
  "jefa@example.com",
  "unconfirmed-boss@verify.test",
  "claimed-boss@verify.test",
  "fresh-boss@verify.test",
  "stamped-boss@verify.test",
];

const tally = new Tally();
const secrets = new Secrets();
const rng = new Rng(seed);
const startedAt = new Date();
const t0 = performance.now();
// Progress goes straight to stdout: console output is being captured.
const step = (name: string) =>
  Deno.stdout.writeSync(
    new TextEncoder().encode(
      `[${((performance.now() - t0) / 1000).toFixed(0)} s] ${name}\n`,
    ),
  );

console.log(`Reliability run, seed ${seed}`);
const inProcess = captureConsole();
const childLines: string[] = [];
const tmp = await Deno.makeTempDir({ prefix: "verify-" });
let child: Deno.ChildProcess | null = null;
let exitCode = 1;
let closePg = async () => {};
try {
  // The stack's database: TEST_DATABASE_URL, or a throw-away cluster of the
  // run's own; a cluster it did not create is never altered.
  const pg = await testPostgres();
  if (pg.url === null) {
    throw new Error(`no PostgreSQL for the stack: ${pg.reason}`);
  }
  closePg = pg.close;
  const dbName = `verify_${
    crypto.randomUUID().replaceAll("-", "").slice(0, 12)
  }`;
  const admin = postgres(pg.url, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${dbName}`);
  await admin.end();
  const dbUrl = Object.assign(new URL(pg.url), { pathname: `/${dbName}` })
    .toString();

  // A known signing key in the data folder, so tokens can be minted as the
  // stack's Auth mints them.
  const signingKey = await generateSigningKey();
  await Deno.writeTextFile(
    `${tmp}/signing_key.json`,
    JSON.stringify(signingKey),
    { mode: 0o600 },
  );
  const apiPort = freePort();
  step("starting the stack (local/start.ts) on PostgreSQL");
  child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-all",
      "--v8-flags=--expose-gc",
      "tests/verify/_stack_child.ts",
      "--port",
      String(apiPort),
      "--mail-port",
      "0",
      "--data-dir",
      tmp,
      "--database-url",
      dbUrl,
    ],
    cwd: ROOT,
    env: {
      ADMIN_EMAILS: ADMIN_EMAILS.join(","),
      USERNAME_MATCH_DOMAINS: ODD_EMAIL_DOMAINS,
    },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const memoryWaiters: ((m: Memory) => void)[] = [];
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    let rest = "";
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      rest += chunk;
      const lines = rest.split("\n");
      rest = lines.pop()!;
      for (const line of lines) {
        childLines.push(line);
        if (line.startsWith("VERIFY_MEMORY ")) {
          const m = JSON.parse(line.slice(14));
          const mib = (n: number) => n / 1024 / 1024;
          memoryWaiters.shift()?.({
            rss: mib(m.rss),
            heapUsed: mib(m.heapUsed),
            heapTotal: mib(m.heapTotal),
          });
        }
      }
    }
    if (rest) childLines.push(rest);
  };
  const pumps = [pump(child.stdout), pump(child.stderr)];
  const childMemory = async (): Promise<Memory> => {
    const got = new Promise<Memory>((r) => memoryWaiters.push(r));
    child!.kill("SIGUSR1");
    return await got;
  };
  for (let waited = 0;; waited += 200) {
    if (childLines.some((l) => l.includes("Press Ctrl-C to stop."))) break;
    if (waited > 120_000) throw new Error("the stack did not start in 120 s");
    await sleep(200);
  }
  const apiUrl = `http://127.0.0.1:${apiPort}`;
  secrets.add(dbUrl, signingKey.privateJwk.d, LOCAL_JWT_SECRET);
  secrets.add(...SEED_IDENTITIES.map((s) => s.password));
  const sql = openSql(dbUrl);
  const banner = bannerBlock(childLines);
  const anonKey = /anon key: (\S+)/.exec(banner.join("\n"))?.[1] ?? "";
  const serviceRoleKey =
    /service_role key: (\S+)/.exec(banner.join("\n"))?.[1] ?? "";
  secrets.add(...await cursorKeySecrets(serviceRoleKey));
  // The functions sign cursors with the secret key where they have one.
  const secretKey = /Secret key: (\S+)/.exec(banner.join("\n"))?.[1] ?? "";
  if (secretKey) {
    secrets.add(secretKey, ...await cursorKeySecrets(secretKey));
  }
  const t: Target = {
    apiUrl,
    dbUrl,
    anonKey,
    serviceRoleKey,
    jwtSecret: LOCAL_JWT_SECRET,
    signingKey,
    sql,
    adminEmails: ADMIN_EMAILS,
    secrets,
  };

  // Bad input. A short warm-up first, so the memory baseline is taken with
  // every module loaded and every pool open.
  const pingUser = await signedInUser(t, { row: { auth_user_id: true } });
  const other = await signedInUser(t, { row: { auth_user_id: true } });
  const syncAdmin = await signedInUser(t, {
    row: { auth_user_id: true, rol: "admin" },
  });
  const warm = new Tally();
  await runBadInput(t, warm, {
    fn: "presence-ping",
    count: 200,
    rng: new Rng(seed ^ 1),
    seed: seed ^ 1,
    tokens: { valid: pingUser.token, other: other.token },
    safeBody: { state: "offline" },
  });
  const memStart = await childMemory();
  step(`bad input: ${badRequests} requests per function`);
  const badStarted = performance.now();
  const pp = await runBadInput(t, tally, {
    fn: "presence-ping",
    count: badRequests,
    rng,
    seed,
    tokens: { valid: pingUser.token, other: other.token },
    safeBody: { state: "offline" },
  });
  const as = await runBadInput(t, tally, {
    fn: "auth-sync",
    count: badRequests,
    rng,
    seed,
    tokens: { valid: syncAdmin.token, other: pingUser.token },
    safeBody: { action: "sync", ids: [other.rowId], dry_run: true },
  });
  const pr = await runBadInput(t, tally, {
    fn: "presence",
    count: badRequests,
    rng,
    seed,
    tokens: { valid: pingUser.token, other: syncAdmin.token },
    safeBody: { ids: [other.rowId] },
  });
  tally.figure(
    "bad input: answered in",
    `${
      ((performance.now() - badStarted) / 1000).toFixed(1)
    } s; refused by the HTTP layer (broken framing): ${
      pp.refusedByHttp + as.refusedByHttp + pr.refusedByHttp
    }`,
  );
  tally.figure(
    "bad input: statuses",
    [
      ...new Map(
        [...pp.statuses, ...as.statuses, ...pr.statuses].map(([s]) => [s, 0]),
      ).keys(),
    ]
      .sort().map((s) =>
        `${s}: ${
          (pp.statuses.get(s) ?? 0) + (as.statuses.get(s) ?? 0) +
          (pr.statuses.get(s) ?? 0)
        }`
      ).join(", "),
  );
  const odd = await runOddIdentities(t, tally, 3);
  tally.figure(
    "bad input: odd valid emails",
    `${odd.accepted} signed in and matched; refused by Auth at sign-up: ${
      odd.refusedByProvider.join(", ") || "none"
    }`,
  );
  await runOddAuthSync(t, tally);
  const memAfterBad = await childMemory();
  const growth = memAfterBad.heapUsed - memStart.heapUsed;
  tally.count("bad input: memory flat");
  tally.check(
    "bad input: memory flat",
    growth < 16,
    () => `heap grew ${growth.toFixed(1)} MiB over the bad-input run`,
  );

  step("attacks");
  await runAttacks(t, tally, {
    functions: ["presence-ping", "auth-sync", "presence"],
  });

  step(`concurrency: ${loadUsers} users x 10 pings from 50 clients`);
  await runPingLoad(t, tally, {
    users: loadUsers,
    pingsPerUser: 10,
    clients: 50,
    rng,
  });
  await runAuthSyncConcurrency(t, tally, { sameField: 20, rounds: 5 });

  step("identity provider faults");
  await runProviderFaults(t, tally, {
    functions: ["presence-ping", "auth-sync", "presence"],
    faults: ["stopped", "reset", "500", "429", "slow"],
    requests: 3,
  });
  await runProviderMidUpdate(t, tally);
  const memEnd = await childMemory();
  tally.figure("stack memory at start (after warm-up)", formatMemory(memStart));
  tally.figure("stack memory after bad input", formatMemory(memAfterBad));
  tally.figure("stack memory at end", formatMemory(memEnd));
  await sql.end({ timeout: 5 });

  step("database outages: throw-away PostgreSQL cluster, then PGlite");
  const why = clusterUnavailable();
  if (why) {
    tally.fail("fault: postgres stopped and restarted", `not run: ${why}`);
  } else {
    const cluster = await throwawayCluster();
    try {
      await runDbOutage(cluster, tally, { secrets });
    } finally {
      await cluster.destroy();
    }
  }
  const pglite = await restartablePglite();
  try {
    await runDbOutage(pglite, tally, { secrets });
  } finally {
    await pglite.destroy();
  }

  step("stopping the stack and scanning logs for secrets");
  child.kill("SIGTERM");
  await child.status;
  await Promise.all(pumps);
  child = null;
  const drop = postgres(pg.url, { max: 1, onnotice: () => {} });
  await drop.unsafe(`drop database if exists ${dbName} with (force)`);
  await drop.end();
  scanLogs(tally, secrets, {
    "stack subprocess": childLines,
    "in-process stacks": inProcess.lines,
  });
  exitCode = tally.failureCount === 0 ? 0 : 1;
} catch (error) {
  tally.fail("run", `aborted: ${error instanceof Error ? error.stack : error}`);
} finally {
  inProcess.restore();
  if (child) {
    child.kill("SIGKILL");
    await child.status;
  }
  await Deno.remove(tmp, { recursive: true }).catch(() => {});
  await closePg().catch(() => {});
}

const cpu = (await Deno.readTextFile("/proc/cpuinfo").catch(() => ""))
  .match(/model name\s*:\s*(.+)/)?.[1] ?? "unknown CPU";
const memGiB = (Deno.systemMemoryInfo().total / 1024 ** 3).toFixed(0);
console.log(`\n${tally.table()}\n`);
if (tally.failures.length) {
  console.log(`Failures (first 40 of ${tally.failures.length}):`);
  for (const f of tally.failures.slice(0, 40)) {
    console.log(`- [${f.category}] ${f.detail}`);
  }
  console.log("");
}
console.log(
  `Machine: ${cpu}, ${navigator.hardwareConcurrency} cores, ${memGiB} GiB, ${Deno.build.os} ${Deno.build.arch}, Deno ${Deno.version.deno}`,
);
console.log(
  `Date: ${startedAt.toISOString()}; took ${
    ((performance.now() - t0) / 1000).toFixed(0)
  } s`,
);
console.log(
  `Rerun: npm run verify -- --seed ${seed}   (or deno task verify --seed ${seed})`,
);
console.log(
  `${tally.failureCount === 0 ? "PASSED" : "FAILED"}: ${
    [...tally.tried.values()].reduce((a, b) => a + b, 0)
  } requests and checks, ${tally.failureCount} failures`,
);
Deno.exit(exitCode);
