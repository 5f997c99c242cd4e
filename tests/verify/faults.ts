/**
 * Faults: the database stopped and started again while pings flow (a
 * throw-away PostgreSQL cluster, or PGlite restarted on the same port and
 * data folder), and an identity provider that is stopped, resets, fails or
 * answers only after 10 s.
 *
 * @module
 */
import postgres from "postgres";
import { generateSigningKey, LOCAL_JWT_SECRET } from "../../local/auth/mod.ts";
import { serveFunctions } from "../support/functions.ts";
import { startStack } from "../../local/stack.ts";
import type { RestartableDb } from "./_databases.ts";
import { freePort } from "./_databases.ts";
import {
  contractProblem,
  post,
  type Secrets,
  sleep,
  type Tally,
} from "./_support.ts";
import { openSql, signedInUser, type Target, type User } from "./_target.ts";
import type { FunctionName } from "./bad_input.ts";

/** Bound on the time from "database back" to every ping succeeding. */
export const RECOVERY_LIMIT_MS = 2_000;

interface _Ping {
  pinger: number;
  start: number;
  end: number;
  status: number;
  code: string | null;
}

/** Options of {@linkcode runDbOutage}. */
export interface OutageOptions {
  /** Users pinging at once (default 5). */
  readonly pingers?: number;
  /** How long the database stays down (default 3 s). */
  readonly downMs?: number;
  readonly secrets: Secrets;
  /** Where the stack's progress lines go. */
  readonly log?: (line: string) => void;
}

/**
 * Starts a stack on `db`, keeps pings flowing, stops the database, starts
 * it again, and checks: 200 before; only the documented 500 (or 503 when
 * Auth itself needs the database, or when a ping waited past
 * `DB_STATEMENT_TIMEOUT_MS`) while down; 200 again within
 * {@linkcode RECOVERY_LIMIT_MS} of the database being back; no connection
 * of the functions' pool left over (PostgreSQL).
 */
export async function runDbOutage(
  db: RestartableDb,
  tally: Tally,
  o: OutageOptions,
): Promise<void> {
  const category = `fault: ${db.kind} stopped and restarted`;
  const signingKey = await generateSigningKey();
  o.secrets.add(db.url, signingKey.privateJwk.d);
  const stack = await startStack({
    apiPort: 0,
    dbPort: 0,
    dataDir: null,
    databaseUrl: db.url,
    signingKey,
    seedIdentities: false,
    log: o.log,
  });
  const sql = openSql(db.url);
  const t: Target = {
    apiUrl: stack.apiUrl,
    dbUrl: db.url,
    anonKey: stack.anonKey,
    serviceRoleKey: stack.serviceRoleKey,
    jwtSecret: LOCAL_JWT_SECRET,
    signingKey,
    sql,
    adminEmails: [],
    secrets: o.secrets,
  };
  const pings: _Ping[] = [];
  let stopFlag = false;
  try {
    const users: User[] = [];
    for (let i = 0; i < (o.pingers ?? 5); i++) {
      users.push(await signedInUser(t, { row: { auth_user_id: true } }));
    }
    const loops = users.map(async (u, i) => {
      while (!stopFlag) {
        const start = performance.now();
        let status = 0, code: string | null = null;
        try {
          const a = await post(t.apiUrl, "presence-ping", {
            headers: { Authorization: `Bearer ${u.token}` },
            body: JSON.stringify({ state: i % 2 ? "online" : "offline" }),
            signal: AbortSignal.timeout(30_000),
          });
          status = a.status;
          code = a.body?.code ?? null;
          const problem = contractProblem(a, o.secrets);
          if (problem) tally.fail(category, `ping answer: ${problem}`);
        } catch (error) {
          code = String(error);
        }
        pings.push({ pinger: i, start, end: performance.now(), status, code });
        await sleep(20);
      }
    });
    await sleep(1_500);
    const connectionsBefore = await _functionConnections(sql, db);
    const stopping = performance.now();
    await db.stop();
    const down = performance.now();
    await sleep(o.downMs ?? 3_000);
    const starting = performance.now();
    await db.start();
    const up = performance.now();
    // Pings go on until every pinger has recovered (or 30 s have passed),
    // so that a slow recovery is measured rather than cut short.
    await sleep(RECOVERY_LIMIT_MS + 1_500);
    while (
      !Number.isFinite(_recovery(pings, users.length, up)) &&
      performance.now() - up < 30_000
    ) await sleep(100);
    const connectionsAfter = await _functionConnections(sql, db);
    stopFlag = true;
    await Promise.all(loops);

    tally.count(category, pings.length);
    const before = pings.filter((p) => p.end < stopping);
    // Pings sent while the database was down: the documented 500 (503 when
    // Auth needed the database), or a success if held until it was back.
    const during = pings.filter((p) => p.start > down && p.start < starting);
    const label = (p: _Ping) => `${p.status} ${p.code ?? ""}`.trim();
    for (const p of before) {
      tally.check(
        category,
        p.status === 200,
        () => `before the outage: ${label(p)}`,
      );
    }
    let failed500 = 0, failed503 = 0, timedOut = 0, heldOk = 0;
    for (const p of during) {
      if (p.status === 500 && p.code === "presence_update_failed") failed500++;
      else if (p.status === 503 && p.code === "idp_unavailable") failed503++;
      // Held for a connection past DB_STATEMENT_TIMEOUT_MS: the documented
      // 503 (docs/reliability.md, "Database timeouts").
      else if (p.status === 503 && p.code === "db_timeout") timedOut++;
      // The server accepts connections a little before start() returns, so
      // a held ping may succeed from the moment the restart begins.
      else if (p.status === 200 && p.end > starting) heldOk++;
      else {tally.fail(
          category,
          `while down: ${label(p)} (expected 500 presence_update_failed)`,
        );}
    }
    tally.check(
      category,
      during.length > 0,
      () => "no ping sent while the database was down",
    );
    const slowest = Math.max(0, ...during.map((p) => p.end - p.start));
    const recovery = _recovery(pings, users.length, up);
    tally.check(
      category,
      recovery <= RECOVERY_LIMIT_MS,
      () =>
        `recovery took ${recovery.toFixed(0)} ms (limit ${RECOVERY_LIMIT_MS})`,
    );
    tally.figure(
      `${db.kind}: recovery after restart`,
      `${recovery.toFixed(0)} ms`,
    );
    tally.figure(
      `${db.kind}: pings while down`,
      `${during.length} sent: ${failed500} x 500 presence_update_failed, ${failed503} x 503 idp_unavailable, ${timedOut} x 503 db_timeout, ${heldOk} held until it was back; slowest answer ${
        slowest.toFixed(0)
      } ms`,
    );
    tally.figure(
      `${db.kind}: database stop / start took`,
      `${(down - stopping).toFixed(0)} / ${(up - starting).toFixed(0)} ms`,
    );
    if (db.kind === "postgres") {
      tally.figure(
        "postgres: functions' connections before / after",
        `${connectionsBefore} / ${connectionsAfter} (DB_POOL_MAX 2, the default)`,
      );
      tally.check(
        category,
        Number(connectionsAfter) <= 2 && Number(connectionsBefore) <= 2,
        () =>
          `functions' connections ${connectionsBefore} before, ${connectionsAfter} after`,
      );
    }
  } finally {
    stopFlag = true;
    await sql.end({ timeout: 5 });
    await stack.close();
  }
  if (db.kind === "postgres") {
    const check = openSql(db.url);
    try {
      // The pool closes with the stack; its connections must go with it.
      await sleep(300);
      const left = Number(await _functionConnections(check, db));
      tally.figure("postgres: functions' connections after shutdown", left);
      tally.check(
        category,
        left === 0,
        () => `${left} connections left after shutdown`,
      );
    } finally {
      await check.end({ timeout: 5 });
    }
  }
}

// Recovery: from the database accepting connections again until every
// pinger has had a success after which it saw no failure. A ping that hangs
// across the restart counts until it is answered.
function _recovery(
  pings: readonly _Ping[],
  pingers: number,
  up: number,
): number {
  return Math.max(...Array.from({ length: pingers }, (_, i) => {
    const mine = pings.filter((p) => p.pinger === i && p.end > up);
    const lastBad = mine.filter((p) => p.status !== 200).at(-1);
    const firstGood = mine.find((p) =>
      p.status === 200 && (!lastBad || p.start > lastBad.end)
    );
    return firstGood ? firstGood.end - up : Infinity;
  }));
}

async function _functionConnections(
  sql: postgres.Sql,
  db: RestartableDb,
): Promise<number | string> {
  if (db.kind !== "postgres") return "n/a";
  const [row] = await sql`
    select count(*)::int as n from pg_stat_activity
    where application_name = 'presence-auth-functions'
      and datname = current_database()`;
  return row.n;
}

/** How a fake identity provider misbehaves. */
export type ProviderFault = "stopped" | "reset" | "500" | "429" | "slow";

/** A fake identity provider on loopback. */
interface _FakeProvider {
  readonly url: string;
  close(): Promise<void>;
}

function _fakeProvider(fault: ProviderFault): _FakeProvider {
  if (fault === "stopped") {
    return { url: `http://127.0.0.1:${freePort()}`, close: async () => {} };
  }
  if (fault === "reset") {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const accepting = (async () => {
      for await (const conn of listener) {
        // Reads the request, then drops the connection without a word.
        conn.read(new Uint8Array(4096)).finally(() => conn.close()).catch(
          () => {},
        );
      }
    })().catch(() => {});
    return {
      url: `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}`,
      async close() {
        listener.close();
        await accepting;
      },
    };
  }
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    async (req) => {
      if (fault === "slow") {
        // Answers after 10 s, unless the caller gives up first.
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, 10_000);
          req.signal.addEventListener("abort", () => {
            clearTimeout(timer);
            resolve();
          });
        });
        return Response.json({ id: "x" });
      }
      const status = Number(fault);
      return Response.json(
        {
          code: status,
          error_code: status === 429
            ? "over_request_rate_limit"
            : "unexpected_failure",
          msg: "fault",
        },
        { status },
      );
    },
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    close: () => server.shutdown(),
  };
}

/** Options of {@linkcode runProviderFaults}. */
export interface ProviderFaultOptions {
  readonly functions: readonly FunctionName[];
  readonly faults: readonly ProviderFault[];
  /** Requests per fault and function, sent at once (default 3). */
  readonly requests?: number;
}

/** Longest a 503 may take: the 5 s provider timeout plus 1 s of slack. */
export const PROVIDER_ANSWER_LIMIT_MS = 6_000;

/**
 * Serves the functions with `SUPABASE_URL` on a failing identity provider
 * and checks that every call with a valid token gets 503 `idp_unavailable`
 * with `Retry-After` within {@linkcode PROVIDER_ANSWER_LIMIT_MS}, never 401.
 */
export async function runProviderFaults(
  t: Target,
  tally: Tally,
  o: ProviderFaultOptions,
): Promise<void> {
  const user = await signedInUser(t, { row: { auth_user_id: true } });
  const admin = await signedInUser(t, {
    row: { auth_user_id: true, rol: "admin" },
  });
  const bodies: Record<FunctionName, unknown> = {
    "presence-ping": { state: "offline" },
    "auth-sync": { action: "sync", ids: [user.rowId], dry_run: true },
    presence: { ids: [user.rowId] },
  };
  const tokens: Record<FunctionName, string> = {
    "presence-ping": user.token,
    "auth-sync": admin.token,
    presence: user.token,
  };
  let slowest = 0;
  await Promise.all(o.faults.map(async (fault) => {
    const provider = _fakeProvider(fault);
    const served = serveFunctions({
      apiUrl: provider.url,
      dbUrl: t.dbUrl,
      anonKey: t.anonKey,
      serviceRoleKey: t.serviceRoleKey,
    });
    const { apiUrl } = served;
    try {
      for (const fn of o.functions) {
        const category = `fault: identity provider ${fault}`;
        await Promise.all(
          Array.from({ length: o.requests ?? 3 }, async () => {
            tally.count(category);
            const started = performance.now();
            const a = await post(apiUrl, fn, {
              headers: { Authorization: `Bearer ${tokens[fn]}` },
              body: JSON.stringify(bodies[fn]),
            });
            const elapsed = performance.now() - started;
            slowest = Math.max(slowest, elapsed);
            const problem = contractProblem(a, t.secrets);
            tally.check(
              category,
              problem === null && a.status === 503 &&
                a.body?.code === "idp_unavailable" &&
                a.headers.get("retry-after") === "5" &&
                elapsed <= PROVIDER_ANSWER_LIMIT_MS,
              () =>
                `${fn}: ${a.status} ${a.text.slice(0, 120)} Retry-After=${
                  a.headers.get("retry-after")
                } after ${elapsed.toFixed(0)} ms ${problem ?? ""}`,
            );
          }),
        );
      }
    } finally {
      // These functions' own pools (the stack under test keeps its own).
      await served.close();
      await provider.close();
    }
  }));
  tally.figure(
    "identity provider faults: slowest 503",
    `${slowest.toFixed(0)} ms (limit ${PROVIDER_ANSWER_LIMIT_MS})`,
  );
}
