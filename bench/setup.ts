/**
 * The benchmark's setting-up: the functions' log lines sent to a file, a
 * fresh database on the machine's PostgreSQL, the bench stack with its
 * variants, the users and their tokens. Everything it starts is undone by
 * the returned `close`.
 *
 * @module
 */
import postgres from "postgres";
import { LOCAL_USERNAME_MATCH_DOMAINS } from "../local/fixture.ts";
import { createTestDatabase } from "../local/testing/database.ts";
import { ensurePostgres } from "../tests/support/postgres.ts";
import { type BenchContext, once } from "./context.ts";
import { ensureWrk } from "./load.ts";
import { pgbenchVersion } from "./pgbench.ts";
import { startBareServer, startBenchStack } from "./stack.ts";
import type { TokenKind } from "./types.ts";
import { createBenchUsers, mintTokens } from "./users.ts";

/** Options of {@linkcode setUp}. */
export interface SetUpOptions {
  quick: boolean;
  durationS: number;
  warmupS: number;
  users: number;
  /** An admin URL on which the fresh database is made (default: the machine's cluster). */
  databaseUrl?: string;
  /** `PRESENCE_MIN_WRITE_INTERVAL_S` of the `skip` variant. */
  skipIntervalS: number;
  log: (line: string) => void;
}

/** A set-up benchmark. */
export interface SetUp {
  ctx: BenchContext;
  /** URL of the bare Deno handler (the HTTP ceiling). */
  bareUrl: string;
  /** Settings pinned on every variant. */
  defaults: Record<string, string>;
  pgbench: string;
  /** Function log lines written so far. */
  functionLogLines(): number;
  /** Puts console.log back and stops and removes everything. */
  close(): Promise<void>;
}

/**
 * Sets the benchmark up. The main variant pins the optional settings to
 * their defaults, so a developer's environment cannot change what is
 * measured; `count` and `count-auth` go through counting proxies, `skip`
 * has the skip-write setting.
 */
export async function setUp(options: SetUpOptions): Promise<SetUp> {
  const { log, users } = options;
  // The functions write one log line per request with console.log. Those
  // writes stay (they are part of a ping's cost, as on the platform, whose
  // collector reads them), but go to a file instead of burying the report.
  const print = console.log.bind(console);
  const logFile = await Deno.makeTempFile({ prefix: "bench-functions-log-" });
  const logSink = await Deno.open(logFile, { write: true, truncate: true });
  const encoder = new TextEncoder();
  let functionLogLines = 0;
  console.log = (...args: unknown[]) => {
    functionLogLines++;
    logSink.writeSync(encoder.encode(args.map(String).join(" ") + "\n"));
  };
  const cleanups: (() => Promise<unknown>)[] = [async () => {
    console.log = print;
    logSink.close();
    await Deno.remove(logFile);
  }];
  const close = async () => {
    for (const cleanup of cleanups) await cleanup().catch(() => {});
  };
  try {
    // A fresh database on a real PostgreSQL, dropped at the end.
    if (options.databaseUrl) {
      Deno.env.set("TEST_DATABASE_URL", options.databaseUrl);
    }
    const pg = await ensurePostgres();
    if (pg.url === null) throw new Error(`No PostgreSQL: ${pg.reason}`);
    Deno.env.set("TEST_DATABASE_URL", pg.url);
    const database = await createTestDatabase();
    cleanups.unshift(() => database.close());
    const dataDir = await Deno.makeTempDir({ prefix: "bench-data-" });
    cleanups.unshift(() => Deno.remove(dataDir, { recursive: true }));
    const tmp = await Deno.makeTempDir({ prefix: "bench-" });
    cleanups.unshift(() => Deno.remove(tmp, { recursive: true }));

    const wrk = await ensureWrk(log);
    const pgbench = await pgbenchVersion();
    if (!pgbench) throw new Error("pgbench is missing (postgresql-client)");

    const defaults: Record<string, string> = {
      USERNAME_MATCH_DOMAINS: LOCAL_USERNAME_MATCH_DOMAINS,
      PRESENCE_MIN_WRITE_INTERVAL_S: "0",
      PRESENCE_VERIFY: "local",
    };
    const stack = await startBenchStack({
      databaseUrl: database.url,
      dataDir,
      log,
      variants: [
        { name: "main", settings: defaults },
        { name: "count", settings: defaults, counted: true },
        {
          name: "count-auth",
          settings: { ...defaults, PRESENCE_VERIFY: "auth" },
          counted: true,
        },
        {
          name: "skip",
          settings: {
            ...defaults,
            PRESENCE_MIN_WRITE_INTERVAL_S: String(options.skipIntervalS),
          },
        },
      ],
    });
    cleanups.unshift(() => stack.close());
    const bare = startBareServer();
    cleanups.unshift(() => bare.close());
    const sql = postgres(stack.dbUrl, {
      max: 2,
      prepare: false,
      onnotice: () => {},
    });
    cleanups.unshift(() => sql.end({ timeout: 5 }));

    log(`Creating ${users} users with sessions and tokens`);
    // Bulk work runs on its own connection, closed at once, so that its
    // statistics are reported before any pass starts (see quiesce()).
    await once(stack.dbUrl, (c) => createBenchUsers(c, users));
    const tokens = await mintTokens({
      users,
      signingKeyFile: stack.signingKeyFile,
      jwtSecret: stack.jwtSecret,
      issuer: stack.issuer,
      expiry: stack.jwtExpiry,
    });
    const tokenFiles: Record<TokenKind, string> = {
      es256: `${tmp}/tokens_es256.txt`,
      hs256: `${tmp}/tokens_hs256.txt`,
    };
    for (const kind of ["es256", "hs256"] as const) {
      await Deno.writeTextFile(tokenFiles[kind], tokens[kind].join("\n"));
    }
    return {
      ctx: {
        stack,
        sql,
        tokens,
        tokenFiles,
        users,
        quick: options.quick,
        durationS: options.durationS,
        warmupS: options.warmupS,
        wrk,
        log,
      },
      bareUrl: bare.url,
      defaults,
      pgbench,
      functionLogLines: () => functionLogLines,
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}
