/**
 * A stack for end-to-end tests: its own ports, in-memory PGlite or a fresh
 * database on the PostgreSQL named by `TEST_DATABASE_URL`, or, when
 * `E2E_SUPABASE_URL` is set, an already running stack (`supabase start` or
 * a hosted project) reached with `E2E_SUPABASE_ANON_KEY`,
 * `E2E_SUPABASE_SERVICE_ROLE_KEY` and `E2E_DB_URL`.
 *
 * @module
 */
import { createClient, type SupabaseClient } from "@supabase/supabase-js";
import postgres from "postgres";
import { closeDatabases } from "../../supabase/functions/_shared/db.ts";
import { functionEnv, localFunctions } from "../../local/functions.ts";
import { createGateway } from "../../local/gateway.ts";
import { createTestDatabase } from "../../local/testing/database.ts";
import { startStack } from "../../local/stack.ts";
import { generateSigningKey, type SigningKey } from "../../local/auth/mod.ts";

/** A running stack with helpers to make users and rows. */
export interface TestStack {
  readonly apiUrl: string;
  readonly dbUrl: string;
  readonly anonKey: string;
  readonly serviceRoleKey: string;
  /**
   * The `sb_publishable_…` and `sb_secret_…` keys (an external stack's from
   * `E2E_SUPABASE_PUBLISHABLE_KEY` / `E2E_SUPABASE_SECRET_KEY`, else empty).
   */
  readonly publishableKey: string;
  readonly secretKey: string;
  /** Whether this is an already running stack (`E2E_SUPABASE_URL`) that closing leaves up. */
  readonly external: boolean;
  /** The key the local Auth signs access tokens with (absent for an external stack). */
  readonly signingKey: SigningKey | null;
  /** Direct connection to the stack's database, as the test's own eyes. */
  readonly sql: postgres.Sql;
  /** A fresh anon supabase-js client (no session persisted). */
  anon(): SupabaseClient;
  /** A supabase-js client with the service role key (admin API). */
  admin(): SupabaseClient;
  /**
   * Serves the same function handlers with an environment changed by
   * `overrides` (e.g. a dead `SUPABASE_DB_URL`), on another port, with
   * `/auth/v1` still forwarded to this stack.
   */
  withFunctionEnv(overrides: Record<string, string>): Promise<ServedFunctions>;
  /** Creates a confirmed identity, signs it in, and optionally its row. */
  createUser(options?: CreateUserOptions): Promise<TestUser>;
  close(): Promise<void>;
}

/** Options of {@linkcode TestStack.createUser}. */
export interface CreateUserOptions {
  /** Defaults to a unique `<random>@test.local`. */
  email?: string;
  password?: string;
  /** Confirm the email (default true). */
  confirmed?: boolean;
  /**
   * The `usuarios` row to insert (columns as given; `auth_user_id: true`
   * links the new identity). `null` (default): no row.
   */
  row?: Record<string, unknown> | null;
}

/** Functions served by {@linkcode TestStack.withFunctionEnv}. */
export interface ServedFunctions {
  readonly apiUrl: string;
  close(): Promise<void>;
}

/** A signed-in test identity. */
export interface TestUser {
  readonly id: string;
  readonly email: string;
  readonly password: string;
  /** Its current access token. */
  readonly token: string;
  /** A supabase-js client signed in as this user. */
  readonly client: SupabaseClient;
  /** Id of the inserted `usuarios` row, if any. */
  readonly rowId: number | null;
}

/** Starts a stack for one test file (or suite). */
export async function startTestStack(
  options: {
    functionEnv?: Record<string, string>;
    /** Sign-ups wait for email confirmation (`mailer_autoconfirm` off). */
    emailConfirmations?: boolean;
  } = {},
): Promise<TestStack> {
  const external = Deno.env.get("E2E_SUPABASE_URL");
  let apiUrl: string, dbUrl: string, anonKey: string, serviceRoleKey: string;
  let publishableKey = Deno.env.get("E2E_SUPABASE_PUBLISHABLE_KEY") ?? "";
  let secretKey = Deno.env.get("E2E_SUPABASE_SECRET_KEY") ?? "";
  let stop: () => Promise<void>;
  let signingKey: SigningKey | null = null;
  if (external) {
    apiUrl = external;
    dbUrl = _required("E2E_DB_URL");
    anonKey = _required("E2E_SUPABASE_ANON_KEY");
    serviceRoleKey = _required("E2E_SUPABASE_SERVICE_ROLE_KEY");
    stop = async () => {};
  } else {
    const db = Deno.env.get("TEST_DATABASE_URL")
      ? await createTestDatabase()
      : null;
    signingKey = await generateSigningKey();
    const stack = await startStack({
      signingKey,
      apiPort: 0,
      dbPort: 0,
      dataDir: null,
      databaseUrl: db?.url,
      functionEnv: options.functionEnv,
      emailConfirmations: options.emailConfirmations,
      seedIdentities: false,
    });
    ({ apiUrl, dbUrl, anonKey, serviceRoleKey, publishableKey, secretKey } =
      stack);
    stop = async () => {
      await stack.close();
      await db?.close();
    };
  }
  const sql = postgres(dbUrl, { max: 2, prepare: false, onnotice: () => {} });
  const client = (key: string) =>
    createClient(apiUrl, key, {
      auth: {
        persistSession: false,
        autoRefreshToken: false,
        detectSessionInUrl: false,
      },
    });
  const admin = client(serviceRoleKey);
  return {
    apiUrl,
    dbUrl,
    anonKey,
    serviceRoleKey,
    publishableKey,
    secretKey,
    external: Boolean(external),
    signingKey,
    sql,
    anon: () => client(anonKey),
    withFunctionEnv(overrides) {
      const env = functionEnv({
        apiUrl,
        dbUrl,
        anonKey,
        serviceRoleKey,
        publishableKey: publishableKey || undefined,
        secretKey: secretKey || undefined,
        overrides,
      });
      const server = Deno.serve(
        { hostname: "127.0.0.1", port: 0, onListen: () => {} },
        createGateway({
          auth: (req) => {
            const url = new URL(req.url);
            return fetch(`${apiUrl}${url.pathname}${url.search}`, req);
          },
          functions: localFunctions(env),
          isValidJwt: () => Promise.resolve(false),
        }),
      );
      return Promise.resolve({
        apiUrl: `http://127.0.0.1:${server.addr.port}`,
        async close() {
          await server.shutdown();
          await closeDatabases(env.get("SUPABASE_DB_URL"));
        },
      });
    },
    admin: () => client(serviceRoleKey),
    async createUser(opts = {}) {
      const email = opts.email ??
        `u${crypto.randomUUID().slice(0, 12)}@test.local`;
      const password = opts.password ?? `pw-${crypto.randomUUID()}`;
      const created = await admin.auth.admin.createUser({
        email,
        password,
        email_confirm: opts.confirmed ?? true,
      });
      if (created.error) throw created.error;
      const id = created.data.user.id;
      let token = "";
      const userClient = client(anonKey);
      if (opts.confirmed ?? true) {
        const signIn = await userClient.auth.signInWithPassword({
          email,
          password,
        });
        if (signIn.error) throw signIn.error;
        token = signIn.data.session.access_token;
      }
      let rowId: number | null = null;
      if (opts.row) {
        const row = { ...opts.row };
        if (row.auth_user_id === true) row.auth_user_id = id;
        const [inserted] = await sql`
          insert into public.usuarios ${sql(row)} returning id`;
        rowId = Number(inserted.id);
      }
      return { id, email, password, token, client: userClient, rowId };
    },
    async close() {
      await sql.end({ timeout: 5 });
      await stop();
    },
  };
}

function _required(name: string): string {
  const value = Deno.env.get(name);
  if (!value) throw new Error(`"${name}" must be set with E2E_SUPABASE_URL`);
  return value;
}
