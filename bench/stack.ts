/**
 * The local stack as the benchmark runs it: the pieces of local/stack.ts
 * (bootstrap, CLI migrations, the Auth stand-in, the gateway over the very
 * function handlers that deploy), put together here so that each can be
 * counted: requests reaching Auth by path, presence pings by status, and,
 * on the counted variant, every statement and round trip to Postgres.
 *
 * One process serves several variants of the gateway on their own ports,
 * each with its own function settings. They share the database, the
 * signing key and the users, so their figures compare like with like.
 *
 * @module
 */
import postgres from "postgres";
import {
  createAuthApi,
  loadOrCreateSigningKey,
  LOCAL_ANON_KEY,
  LOCAL_JWT_SECRET,
  LOCAL_SERVICE_ROLE_KEY,
} from "../local/auth/mod.ts";
import { bootstrapDatabase } from "../local/db/bootstrap.ts";
import { functionEnv, localFunctions } from "../local/functions.ts";
import { createGateway, localJwtCheck } from "../local/gateway.ts";
import { pushMigrations } from "../local/migrate.ts";
import {
  createDeps,
  type OwnedDeps,
} from "../supabase/functions/_shared/deps.ts";
import { type CountingProxy, startCountingProxy } from "./pgproxy.ts";

/** A gateway variant to serve. */
export interface VariantSpec {
  /** Short name used in the report. */
  readonly name: string;
  /** Function settings (e.g. `PRESENCE_VERIFY`), applied last. */
  readonly settings?: Record<string, string>;
  /** Route the functions' and Auth's database traffic through counting proxies. */
  readonly counted?: boolean;
}

/** Requests one variant served since its last reset. */
export interface VariantCounts {
  /** presence-ping responses by status. */
  pings: Record<number, number>;
  /** Requests that reached the Auth stand-in, by path. */
  auth: Record<string, number>;
}

/** A served variant. */
export interface Variant {
  readonly name: string;
  /** Base URL of its gateway. */
  readonly apiUrl: string;
  /** Its presence-ping URL. */
  readonly pingUrl: string;
  /** Counts since the last reset. */
  counts(): VariantCounts;
  /** Zeroes the counts (and the proxies' counts on a counted variant). */
  reset(): void;
  /** Forgets the tokens its functions verified (each is verified afresh). */
  forgetVerifiedTokens(): void;
  /** The proxies of a counted variant. */
  readonly proxies: { functions: CountingProxy; auth: CountingProxy } | null;
}

/** A running bench stack. */
export interface BenchStack {
  readonly dbUrl: string;
  readonly anonKey: string;
  readonly jwtSecret: string;
  /** `iss` of the tokens: the first variant's `<url>/auth/v1`. */
  readonly issuer: string;
  /** The `signing_key.json` in the data folder. */
  readonly signingKeyFile: string;
  /** Access token lifetime. */
  readonly jwtExpiry: number;
  readonly variants: Record<string, Variant>;
  /**
   * Closes every database connection of the stack and waits until Auth's
   * idle ones have gone too, so that PostgreSQL's statistics views hold
   * everything done so far (see {@linkcode quiesce}'s body).
   */
  quiesce(): Promise<void>;
  /** Stops every server, pool and proxy. */
  close(): Promise<void>;
}

/** Options of {@linkcode startBenchStack}. */
export interface BenchStackOptions {
  /** The (fresh) PostgreSQL database. */
  databaseUrl: string;
  /** Folder for the signing key. */
  dataDir: string;
  /** Gateway variants; the first one's URL is the tokens' issuer. */
  variants: readonly VariantSpec[];
  /** Progress lines. */
  log?: (line: string) => void;
}

const _JWT_EXPIRY = 3600;

/**
 * Migrates the database and serves the variants on free loopback ports.
 *
 * @example
 * ```ts
 * const stack = await startBenchStack({
 *   databaseUrl, dataDir, variants: [{ name: "main" }],
 * });
 * await fetch(stack.variants.main.pingUrl, { method: "POST", headers });
 * await stack.close();
 * ```
 */
export async function startBenchStack(
  options: BenchStackOptions,
): Promise<BenchStack> {
  const log = options.log ?? (() => {});
  const dbUrl = options.databaseUrl;
  const cleanups: (() => Promise<void>)[] = [];
  const close = async () => {
    for (const cleanup of cleanups.reverse()) {
      await cleanup().catch(() => {});
    }
  };
  try {
    await bootstrapDatabase(dbUrl);
    await pushMigrations(dbUrl);
    log("Migrated the database with the Supabase CLI");
    const signingKeyFile = `${options.dataDir}/signing_key.json`;
    const signingKey = await loadOrCreateSigningKey(signingKeyFile);
    const ports = options.variants.map(() => _freePort());
    const issuer = `http://127.0.0.1:${ports[0]}/auth/v1`;

    const isValidJwt = localJwtCheck(signingKey);

    const variants: Record<string, Variant> = {};
    const allDeps: OwnedDeps[] = [];
    for (const [i, spec] of options.variants.entries()) {
      const apiUrl = `http://127.0.0.1:${ports[i]}`;
      const proxies = spec.counted
        ? {
          functions: startCountingProxy(dbUrl),
          auth: startCountingProxy(dbUrl),
        }
        : null;
      if (proxies) {
        cleanups.push(() => proxies.functions.close());
        cleanups.push(() => proxies.auth.close());
      }
      // As local/stack.ts, except idle_timeout: see quiesce().
      const authSql = postgres(proxies?.auth.url ?? dbUrl, {
        max: 4,
        prepare: false,
        idle_timeout: 1,
        onnotice: () => {},
      });
      cleanups.push(() => authSql.end({ timeout: 5 }));
      const auth = createAuthApi({
        sql: authSql,
        jwtSecret: LOCAL_JWT_SECRET,
        signingKey,
        jwtExpiry: _JWT_EXPIRY,
        issuer,
        anonKey: LOCAL_ANON_KEY,
        serviceRoleKey: LOCAL_SERVICE_ROLE_KEY,
      });
      const functionsDbUrl = proxies?.functions.url ?? dbUrl;
      const env = functionEnv({
        apiUrl,
        dbUrl: functionsDbUrl,
        anonKey: LOCAL_ANON_KEY,
        serviceRoleKey: LOCAL_SERVICE_ROLE_KEY,
        // Every variant accepts the tokens the first one's Auth issues:
        // without this, a variant on another port would refuse them on
        // the fast path (another issuer) and ask Auth for each.
        overrides: { PRESENCE_TOKEN_ISSUER: issuer, ...spec.settings },
      });
      let counts: VariantCounts = { pings: {}, auth: {} };
      const countedAuth = async (req: Request) => {
        const path = new URL(req.url).pathname;
        counts.auth[path] = (counts.auth[path] ?? 0) + 1;
        return await auth(req);
      };
      const deps = createDeps();
      allDeps.push(deps);
      const gateway = createGateway({
        auth: countedAuth,
        functions: localFunctions(env, deps),
        isValidJwt,
      });
      const handler = async (req: Request) => {
        const res = await gateway(req);
        if (new URL(req.url).pathname.endsWith("/presence-ping")) {
          counts.pings[res.status] = (counts.pings[res.status] ?? 0) + 1;
        }
        return res;
      };
      const server = Deno.serve(
        { hostname: "127.0.0.1", port: ports[i], onListen: () => {} },
        handler,
      );
      cleanups.push(async () => {
        await server.shutdown();
        await deps.close();
      });
      variants[spec.name] = {
        name: spec.name,
        apiUrl,
        pingUrl: `${apiUrl}/functions/v1/presence-ping`,
        counts: () => structuredClone(counts),
        reset() {
          counts = { pings: {}, auth: {} };
          proxies?.functions.reset();
          proxies?.auth.reset();
        },
        forgetVerifiedTokens: () => deps.forgetVerifiedTokens(),
        proxies,
      };
      log(`Serving variant "${spec.name}" on ${apiUrl}`);
    }
    return {
      dbUrl,
      anonKey: LOCAL_ANON_KEY,
      jwtSecret: LOCAL_JWT_SECRET,
      issuer,
      signingKeyFile,
      jwtExpiry: _JWT_EXPIRY,
      variants,
      async quiesce() {
        // A backend that reported less than a second ago defers the rest
        // for 10 s (PGSTAT_IDLE_INTERVAL), but reports all when it exits:
        // so end the functions' pools and let Auth's time out.
        await Promise.all(allDeps.map((deps) => deps.close()));
        await new Promise((r) => setTimeout(r, 1_600));
      },
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}

/**
 * A bare Deno handler that answers like a successful ping without doing any
 * of its work: the HTTP ceiling. It reads the body, as the real handler
 * must, and returns the same JSON.
 */
export function startBareServer(): { url: string; close(): Promise<void> } {
  const body = JSON.stringify({
    ok: true,
    user: {
      id: 1,
      ultimo_acceso: "2026-11-22T10:15:30.123Z",
      presence_state: "online",
    },
  });
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    async (req) => {
      await req.text();
      return new Response(body, {
        headers: { "Content-Type": "application/json" },
      });
    },
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}/functions/v1/presence-ping`,
    close: () => server.shutdown(),
  };
}

function _freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}
