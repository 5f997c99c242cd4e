/**
 * The fast subset of the reliability suites, run on every change: the same
 * checks as `npm run verify` with smaller counts, against an in-process
 * stack on PGlite (or on PostgreSQL with TEST_DATABASE_URL). Seed:
 * VERIFY_SEED (default 20261122). The full run is tests/verify/main.ts.
 */
import assert from "node:assert/strict";
import { generateSigningKey, LOCAL_JWT_SECRET } from "../../local/auth/mod.ts";
import { startStack } from "../../local/stack.ts";
import { createTestDatabase } from "../../local/testing/database.ts";
import { e2eTest } from "../support/e2e.ts";
import { restartablePglite } from "./_databases.ts";
import { captureConsole } from "./_logs.ts";
import { Rng, Secrets, Tally } from "./_support.ts";
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
import { cursorKeySecrets, scanLogs } from "./secrets.ts";

const SEED = Number(Deno.env.get("VERIFY_SEED") ?? 20261122);
const ADMIN_EMAILS = [
  "jefa@example.com",
  "unconfirmed-boss@verify.test",
  "claimed-boss@verify.test",
  "fresh-boss@verify.test",
  "stamped-boss@verify.test",
];

const logs = captureConsole();
const db = Deno.env.get("TEST_DATABASE_URL")
  ? await createTestDatabase()
  : null;
const signingKey = await generateSigningKey();
const stack = await startStack({
  apiPort: 0,
  dbPort: 0,
  dataDir: null,
  databaseUrl: db?.url,
  signingKey,
  seedIdentities: false,
  functionEnv: {
    ADMIN_EMAILS: ADMIN_EMAILS.join(","),
    USERNAME_MATCH_DOMAINS: ODD_EMAIL_DOMAINS,
  },
});
const secrets = new Secrets();
secrets.add(stack.dbUrl, signingKey.privateJwk.d, LOCAL_JWT_SECRET);
secrets.add(...await cursorKeySecrets(stack.serviceRoleKey));
// The functions sign cursors with the secret key where they have one.
secrets.add(stack.secretKey, ...await cursorKeySecrets(stack.secretKey));
const t: Target = {
  apiUrl: stack.apiUrl,
  dbUrl: stack.dbUrl,
  anonKey: stack.anonKey,
  serviceRoleKey: stack.serviceRoleKey,
  jwtSecret: LOCAL_JWT_SECRET,
  signingKey,
  sql: openSql(stack.dbUrl),
  adminEmails: ADMIN_EMAILS,
  secrets,
};
const all = new Tally();

// Runs a suite on its own tally, keeps the figures for the final table, and
// fails the test with every failure listed.
async function suite(run: (tally: Tally) => Promise<void>): Promise<void> {
  const tally = new Tally();
  await run(tally);
  for (const [k, v] of tally.tried) all.count(k, v);
  for (const f of tally.failures) all.fail(f.category, f.detail);
  for (const [k, v] of tally.figures) all.figure(k, v);
  assert.equal(
    tally.failureCount,
    0,
    `${tally.failureCount} failures (seed ${SEED}):\n${
      tally.failures.slice(0, 15).map((f) => `- [${f.category}] ${f.detail}`)
        .join("\n")
    }`,
  );
}

e2eTest(
  "presence-ping: malformed requests get documented JSON errors, never a 5xx",
  () =>
    suite(async (tally) => {
      const u = await signedInUser(t, { row: { auth_user_id: true } });
      const v = await signedInUser(t, { row: { auth_user_id: true } });
      await runBadInput(t, tally, {
        fn: "presence-ping",
        count: 500,
        rng: new Rng(SEED),
        seed: SEED,
        tokens: { valid: u.token, other: v.token },
        safeBody: { state: "offline" },
      });
      await runOddIdentities(t, tally, 1);
    }),
);

e2eTest(
  "auth-sync: malformed requests get documented JSON errors, never a 5xx",
  () =>
    suite(async (tally) => {
      const admin = await signedInUser(t, {
        row: { auth_user_id: true, rol: "admin" },
      });
      const u = await signedInUser(t, { row: { auth_user_id: true } });
      await runBadInput(t, tally, {
        fn: "auth-sync",
        count: 500,
        rng: new Rng(SEED + 1),
        seed: SEED + 1,
        tokens: { valid: admin.token, other: u.token },
        safeBody: { action: "sync", ids: [u.rowId], dry_run: true },
      });
      await runOddAuthSync(t, tally);
    }),
);

e2eTest(
  "presence: malformed requests get documented JSON errors, never a 5xx",
  () =>
    suite(async (tally) => {
      const u = await signedInUser(t, { row: { auth_user_id: true } });
      const v = await signedInUser(t, { row: { auth_user_id: true } });
      await runBadInput(t, tally, {
        fn: "presence",
        count: 500,
        rng: new Rng(SEED + 3),
        seed: SEED + 3,
        tokens: { valid: u.token, other: v.token },
        safeBody: { ids: [v.rowId] },
      });
    }),
);

e2eTest(
  "presence-ping, auth-sync and presence: forged, revoked, impostor and injected requests get nothing",
  () =>
    suite((tally) =>
      runAttacks(t, tally, {
        functions: ["presence-ping", "auth-sync", "presence"],
      })
    ),
);

e2eTest(
  "presence-ping: concurrent pings store each user's last acknowledged ping",
  () =>
    suite((tally) =>
      runPingLoad(t, tally, {
        users: 100,
        pingsPerUser: 5,
        clients: 20,
        rng: new Rng(SEED + 2),
      })
    ),
);

e2eTest(
  "auth-sync: concurrent updates of one row are serialized and none is lost",
  () =>
    suite((tally) =>
      runAuthSyncConcurrency(t, tally, { sameField: 10, rounds: 2 })
    ),
);

e2eTest(
  "presence-ping, auth-sync and presence: a failing identity provider gives 503 with Retry-After within 5 s, never 401",
  () =>
    suite((tally) =>
      runProviderFaults(t, tally, {
        functions: ["presence-ping", "auth-sync", "presence"],
        faults: ["stopped", "reset", "500", "429", "slow"],
        requests: 2,
      })
    ),
);

e2eTest(
  "auth-sync: a provider failing mid-update leaves row and account agreeing, or answers partial_failure",
  () => suite((tally) => runProviderMidUpdate(t, tally)),
);

e2eTest(
  "presence-ping: PGlite restarted on the same port and data folder serves pings again within 2 s",
  () =>
    suite(async (tally) => {
      const pglite = await restartablePglite();
      try {
        await runDbOutage(pglite, tally, { secrets, pingers: 3 });
      } finally {
        await pglite.destroy();
      }
    }),
);

e2eTest(
  "logs: no line contains a token, password, key or database URL",
  async () => {
    await t.sql.end({ timeout: 5 });
    await stack.close();
    await db?.close();
    logs.restore();
    try {
      await suite(async (tally) => {
        scanLogs(tally, secrets, { "in-process stack": logs.lines });
        await Promise.resolve();
      });
    } finally {
      console.log(`\nseed ${SEED}\n${all.table()}`);
    }
  },
);
