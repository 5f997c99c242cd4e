/**
 * The benchmark's stack, set up once per run: a fresh database on the
 * run's PostgreSQL (bench/main.ts), migrated with the Supabase CLI; the local stack
 * `npm start` runs (local/stack.ts: the Auth stand-in, the gateway over
 * the very function handlers that deploy, in process) started as several
 * variants on their own ports, each with its own settings and counts
 * (pings by status, Auth requests by path; on counted variants, a counting
 * proxy before Postgres); a bare Deno handler (the HTTP ceiling); 1,000
 * users with their tokens.
 *
 * The variants share the database, the signing key and the users, so
 * their figures compare like with like. What undoes each step goes on the
 * caller's `cleanups` as soon as the step is done, so a failure or Ctrl-C
 * in the middle of setting up undoes what was done.
 *
 * @module
 */
import { parseProcStat } from "../local/proc_stat.ts";
import postgres from "postgres";
import {
  loadOrCreateSigningKey,
  LOCAL_ANON_KEY,
  LOCAL_JWT_SECRET,
} from "../local/auth/mod.ts";
import { LOCAL_USERNAME_MATCH_DOMAINS } from "../local/fixture.ts";
import { startStack } from "../local/stack.ts";
import { createTestDatabase } from "../local/testing/database.ts";
import {
  createDeps,
  type OwnedDeps,
} from "../supabase/functions/_shared/deps.ts";
import { toolVersion } from "./load.ts";
import { type CountingProxy, startCountingProxy } from "./pgproxy.ts";
import {
  type BenchTokens,
  createBenchUsers,
  issuedClaims,
  mintTokens,
} from "./users.ts";

/** A served gateway variant and what it counted since its last reset. */
export interface Variant {
  readonly name: string;
  /** Settings over the defaults (e.g. `PRESENCE_VERIFY`). */
  readonly settings: Record<string, string>;
  readonly apiUrl: string;
  readonly pingUrl: string;
  /** presence-ping responses by status, requests reaching Auth by path. */
  counts(): { pings: Record<number, number>; auth: Record<string, number> };
  reset(): void;
  /** Forgets the tokens its functions verified (each is verified afresh). */
  forgetVerifiedTokens(): void;
  /** Counting proxies before Postgres (functions, Auth) on counted variants. */
  readonly proxies: { functions: CountingProxy; auth: CountingProxy } | null;
}

/** What every pass gets: the running stack, its users and the run's timings. */
export interface BenchContext {
  readonly dbUrl: string;
  /** The cluster's postmaster (its processes are the Postgres CPU counted). */
  readonly postmaster: string;
  /** The bench's own connection to the stack's database. */
  readonly sql: postgres.Sql;
  /** `main` (defaults), `count` and `count-auth` (counted), `skip`. */
  readonly variants: Record<string, Variant>;
  /** URL of the bare Deno handler (the HTTP ceiling). */
  readonly bareUrl: string;
  readonly users: number;
  readonly tokens: BenchTokens;
  /** The tokens, one per line, for wrk. */
  readonly tokenFiles: Record<keyof BenchTokens, string>;
  /** What mints more tokens like these, issued at `iat` (the token-cache pass). */
  readonly mint: (iat?: number) => Promise<BenchTokens>;
  readonly durationS: number;
  readonly warmupS: number;
  readonly versions: { wrk: string; pgbench: string };
  readonly log: (line: string) => void;
  /**
   * Ends the functions' pools and lets Auth's time out, so PostgreSQL's
   * statistics views hold everything done so far: a backend that reported
   * less than a second ago defers the rest for 10 s (PGSTAT_IDLE_INTERVAL)
   * but reports all when it exits.
   */
  quiesce(): Promise<void>;
  /** Function log lines written so far (they go to a file). */
  functionLogLines(): number;
}

/** Settings pinned on every variant, so a developer's environment cannot change what is measured. */
export const DEFAULT_SETTINGS = {
  USERNAME_MATCH_DOMAINS: LOCAL_USERNAME_MATCH_DOMAINS,
  PRESENCE_MIN_WRITE_INTERVAL_S: "0",
  PRESENCE_VERIFY: "local",
};

/** Sets the stack up on a fresh database of the cluster in TEST_DATABASE_URL. */
export async function setUp(options: {
  users: number;
  durationS: number;
  warmupS: number;
  skipIntervalS: number;
  log: (line: string) => void;
  /** Where each undo goes; the caller runs them last to first. */
  cleanups: (() => Promise<unknown>)[];
}): Promise<BenchContext> {
  const { log, users, cleanups } = options;
  const versions = {
    wrk: await toolVersion("wrk", "wrk is missing: apt-get install wrk"),
    pgbench: await toolVersion(
      "pgbench",
      "pgbench is missing: apt-get install postgresql-client",
    ),
  };
  // The functions write one log line per request with console.log. Those
  // writes stay (part of a ping's cost, as on the platform, whose
  // collector reads them) but go to a file instead of burying the report.
  const tmp = await Deno.makeTempDir({ prefix: "bench-" });
  cleanups.push(() => Deno.remove(tmp, { recursive: true }));
  const logSink = await Deno.open(`${tmp}/functions.log`, {
    write: true,
    create: true,
  });
  const print = console.log;
  let logLines = 0;
  const encoder = new TextEncoder();
  console.log = (...args: unknown[]) => {
    logLines++;
    logSink.writeSync(encoder.encode(args.map(String).join(" ") + "\n"));
  };
  cleanups.push(() => {
    console.log = print;
    return Promise.resolve(logSink.close());
  });
  const database = await createTestDatabase();
  cleanups.push(() => database.close());
  const dbUrl = database.url;
  const signingKeyFile = `${tmp}/signing_key.json`;
  const signingKey = await loadOrCreateSigningKey(signingKeyFile);
  const specs: [string, Record<string, string>, boolean][] = [
    ["main", {}, false],
    ["count", {}, true],
    ["count-auth", { PRESENCE_VERIFY: "auth" }, true],
    ["skip", {
      PRESENCE_MIN_WRITE_INTERVAL_S: String(options.skipIntervalS),
    }, false],
  ];
  const variants: Record<string, Variant> = {};
  const allDeps: OwnedDeps[] = [];
  let issuer: string | undefined;
  for (const [name, settings, counted] of specs) {
    const proxies = counted
      ? {
        functions: startCountingProxy(dbUrl),
        auth: startCountingProxy(dbUrl),
      }
      : null;
    if (proxies) {
      cleanups.push(
        () => proxies.functions.close(),
        () => proxies.auth.close(),
      );
    }
    const deps = createDeps();
    allDeps.push(deps);
    let pings: Record<number, number> = {};
    let authPaths: Record<string, number> = {};
    // The stack `npm start` runs, its functions in process; the first
    // one migrates the database with the Supabase CLI.
    const stack = await startStack({
      apiPort: 0,
      dataDir: null,
      databaseUrl: dbUrl,
      seed: false,
      signingKey,
      functionDeps: deps,
      // As the stack's own pool, except idle_timeout: see quiesce().
      authSql: postgres(proxies?.auth.url ?? dbUrl, {
        max: 4,
        prepare: false,
        idle_timeout: 1,
        onnotice: () => {},
      }),
      functionEnv: {
        ...(proxies && { SUPABASE_DB_URL: proxies.functions.url }),
        // Every variant accepts the tokens the first one's Auth issues;
        // otherwise another port is another issuer, refused locally.
        ...(issuer && { PRESENCE_TOKEN_ISSUER: issuer }),
        ...DEFAULT_SETTINGS,
        ...settings,
      },
      onResponse(req, res) {
        const path = new URL(req.url).pathname;
        if (path.startsWith("/auth/v1/")) {
          authPaths[path] = (authPaths[path] ?? 0) + 1;
        } else if (path.endsWith("/presence-ping")) {
          pings[res.status] = (pings[res.status] ?? 0) + 1;
        }
      },
    });
    cleanups.push(() => stack.close());
    issuer ??= `${stack.apiUrl}/auth/v1`;
    if (name === "main") log("Migrated the database with the Supabase CLI");
    variants[name] = {
      name,
      settings,
      apiUrl: stack.apiUrl,
      pingUrl: `${stack.apiUrl}/functions/v1/presence-ping`,
      counts: () => structuredClone({ pings, auth: authPaths }),
      reset() {
        pings = {};
        authPaths = {};
        proxies?.functions.reset();
        proxies?.auth.reset();
      },
      forgetVerifiedTokens: () => deps.forgetVerifiedTokens(),
      proxies,
    };
  }
  const bare = _startBareServer();
  cleanups.push(() => bare.shutdown());
  const sql = postgres(dbUrl, { max: 2, prepare: false, onnotice: () => {} });
  cleanups.push(() => sql.end({ timeout: 5 }));
  // A backend's parent is the postmaster (read in /proc: loopback only).
  const [{ pid }] = await sql`select pg_backend_pid() as pid`;
  const { ppid: postmaster } = parseProcStat(
    await Deno.readTextFile(`/proc/${pid}/stat`),
  );

  log(`Creating ${users} users with sessions and tokens`);
  // On a connection of its own, closed at once, so that its statistics
  // are reported before any pass starts.
  const bulk = postgres(dbUrl, {
    max: 1,
    prepare: false,
    onnotice: () => {},
  });
  await createBenchUsers(bulk, users).finally(() => bulk.end());
  // Minted from the claims of a token the stand-in issued, so they are
  // the claims Auth signs by construction.
  const template = await issuedClaims(
    variants.main.apiUrl,
    LOCAL_ANON_KEY,
    1,
  );
  const mint = (iat?: number) =>
    mintTokens({
      users,
      signingKeyFile,
      jwtSecret: LOCAL_JWT_SECRET,
      template,
      iat,
    });
  const tokens = await mint();
  const tokenFiles = { es256: `${tmp}/es256.txt`, hs256: `${tmp}/hs256.txt` };
  for (const kind of ["es256", "hs256"] as const) {
    await Deno.writeTextFile(tokenFiles[kind], tokens[kind].join("\n"));
  }
  return {
    dbUrl,
    postmaster,
    sql,
    variants,
    bareUrl: `http://127.0.0.1:${bare.addr.port}/functions/v1/presence-ping`,
    users,
    tokens,
    tokenFiles,
    mint,
    durationS: options.durationS,
    warmupS: options.warmupS,
    versions,
    log,
    async quiesce() {
      await Promise.all(allDeps.map((deps) => deps.close()));
      await new Promise((r) => setTimeout(r, 1_600));
    },
    functionLogLines: () => logLines,
  };
}

// The HTTP ceiling: answers like a successful ping without its work. It
// reads the body, as the real handler must, and returns the same JSON.
function _startBareServer(): Deno.HttpServer<Deno.NetAddr> {
  const body = JSON.stringify({
    ok: true,
    user: {
      id: 1,
      ultimo_acceso: "2026-11-22T10:15:30.123Z",
      presence_state: "online",
    },
  });
  return Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    async (req) => {
      await req.text();
      return new Response(body, {
        headers: { "Content-Type": "application/json" },
      });
    },
  );
}
