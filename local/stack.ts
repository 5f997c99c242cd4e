/**
 * The Docker-free local stack: Postgres (PGlite, or any PostgreSQL through a
 * URL), migrations and seed by the Supabase CLI, the Auth stand-in, and the
 * gateway serving Auth and the functions.
 *
 * @module
 */
import postgres from "postgres";
import { closeDatabases } from "../supabase/functions/_shared/db.ts";
import {
  createAuthApi,
  generateSigningKey,
  loadOrCreateSigningKey,
  LOCAL_ANON_KEY,
  LOCAL_JWT_SECRET,
  LOCAL_SERVICE_ROLE_KEY,
  type SigningKey,
} from "./auth/mod.ts";
import { bootstrapDatabase } from "./db/bootstrap.ts";
import { startPgliteServer } from "./db/pglite_server.ts";
import { functionEnv, localFunctions } from "./functions.ts";
import { createGateway, localJwtCheck } from "./gateway.ts";
import { PROJECT_DIR, pushMigrations } from "./migrate.ts";
import { seedIdentities } from "./seed_identities.ts";
import { parse as parseToml } from "smol-toml";

/** Settings of {@linkcode startStack}; every one has a default. */
export interface StackOptions {
  /** API port (`supabase start`: 54321); 0 picks a free one. */
  apiPort?: number;
  /** PGlite's port (`supabase start`: 54322); 0 picks a free one. */
  dbPort?: number;
  /** Loopback interface to bind. */
  host?: string;
  /** Folder for PGlite's data and the signing key; `null`: in memory. */
  dataDir?: string | null;
  /** Use this PostgreSQL instead of PGlite. */
  databaseUrl?: string;
  /** Extra function environment, applied last. */
  functionEnv?: Record<string, string>;
  /**
   * Whether sign-ups wait for email confirmation (default: config.toml
   * `[auth.email] enable_confirmations`, false as in `supabase start`).
   */
  emailConfirmations?: boolean;
  /** Create the seeded identities (default true). */
  seedIdentities?: boolean;
  /** ES256 key to sign access tokens with (default: from dataDir, or new). */
  signingKey?: SigningKey;
  /** Progress lines, e.g. `console.log`; silent by default. */
  log?: (line: string) => void;
}

/** A running stack. */
export interface Stack {
  readonly apiUrl: string;
  readonly dbUrl: string;
  readonly anonKey: string;
  readonly serviceRoleKey: string;
  readonly jwtSecret: string;
  /** `"pglite"` or `"postgres"`. */
  readonly database: "pglite" | "postgres";
  /** Stops the gateway, the pools and the database. */
  close(): Promise<void>;
}

/** Default data folder, git-ignored. */
export const DEFAULT_DATA_DIR = `${PROJECT_DIR}.local/data`;

/**
 * Starts the whole stack and resolves once it serves.
 *
 * @example
 * ```ts
 * const stack = await startStack({ apiPort: 0, dbPort: 0, dataDir: null });
 * console.log(stack.apiUrl);
 * await stack.close();
 * ```
 */
export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const log = options.log ?? (() => {});
  const host = options.host ?? "127.0.0.1";
  const dataDir = options.dataDir === undefined
    ? DEFAULT_DATA_DIR
    : options.dataDir;
  const cleanups: (() => Promise<void>)[] = [];
  const close = async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
  };
  try {
    let dbUrl = options.databaseUrl;
    let database: Stack["database"] = "postgres";
    if (!dbUrl) {
      if (dataDir) await Deno.mkdir(dataDir, { recursive: true });
      const server = await startPgliteServer({
        dataDir: dataDir ? `${dataDir}/pglite` : undefined,
        host,
        port: options.dbPort ?? 54322,
      });
      cleanups.push(() => server.close());
      dbUrl = server.url;
      database = "pglite";
      log(`Started PGlite on ${host}:${server.port}`);
    }
    await bootstrapDatabase(dbUrl);
    log(await pushMigrations(dbUrl));

    const sql = postgres(dbUrl, {
      max: 4,
      prepare: false,
      onnotice: () => {},
    });
    cleanups.push(() => sql.end({ timeout: 5 }));
    const signingKey = options.signingKey ??
      (dataDir
        ? await loadOrCreateSigningKey(`${dataDir}/signing_key.json`)
        : await generateSigningKey());

    const listener = Deno.listen({
      hostname: host,
      port: options.apiPort ?? 54321,
    });
    const apiPort = (listener.addr as Deno.NetAddr).port;
    listener.close();
    const apiUrl = `http://${host}:${apiPort}`;

    const config = _authConfig();
    const auth = createAuthApi({
      sql,
      jwtSecret: LOCAL_JWT_SECRET,
      signingKey,
      jwtExpiry: config.jwtExpiry,
      mailerAutoconfirm: !(options.emailConfirmations ??
        config.emailConfirmations),
      issuer: `${apiUrl}/auth/v1`,
      anonKey: LOCAL_ANON_KEY,
      serviceRoleKey: LOCAL_SERVICE_ROLE_KEY,
    });
    const env = functionEnv({
      apiUrl,
      dbUrl,
      anonKey: LOCAL_ANON_KEY,
      serviceRoleKey: LOCAL_SERVICE_ROLE_KEY,
      overrides: options.functionEnv,
    });
    const gateway = createGateway({
      auth,
      functions: localFunctions(env),
      isValidJwt: localJwtCheck(signingKey),
    });
    const server = Deno.serve(
      { hostname: host, port: apiPort, onListen: () => {} },
      gateway,
    );
    cleanups.push(async () => {
      await server.shutdown();
      await closeDatabases(dbUrl);
    });
    log(`Serving the API on ${apiUrl}`);

    if (options.seedIdentities ?? true) {
      await seedIdentities(apiUrl, LOCAL_SERVICE_ROLE_KEY);
    }
    return {
      apiUrl,
      dbUrl,
      anonKey: LOCAL_ANON_KEY,
      serviceRoleKey: LOCAL_SERVICE_ROLE_KEY,
      jwtSecret: LOCAL_JWT_SECRET,
      database,
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}

// What the Auth stand-in takes from config.toml, as `supabase start` does.
function _authConfig(): { jwtExpiry: number; emailConfirmations: boolean } {
  const config = parseToml(
    Deno.readTextFileSync(`${PROJECT_DIR}supabase/config.toml`),
  ) as {
    auth?: {
      jwt_expiry?: number;
      email?: { enable_confirmations?: boolean };
    };
  };
  return {
    jwtExpiry: config.auth?.jwt_expiry ?? 3600,
    emailConfirmations: config.auth?.email?.enable_confirmations ?? false,
  };
}
