/**
 * A stack for end-to-end tests: its own ports, in-memory PGlite or a fresh
 * database created on the PostgreSQL named by `TEST_DATABASE_URL` (and
 * dropped at close). Never anything it did not create: the tests drop
 * columns and indexes, delete rows and leave accounts behind, which would
 * destroy a real project's data. {@linkcode refuseForeignTarget} turns away
 * settings that point at one.
 *
 * @module
 */
import { createClient, type SupabaseClient } from "@supabase/supabase-js";
import postgres from "postgres";
import { createDeps } from "../../supabase/functions/_shared/deps.ts";
import { ADMIN_STAMP } from "../../supabase/functions/_shared/email_proof.ts";
import { signUpByMail } from "./inbox.ts";
import { createTestDatabase } from "../../local/testing/database.ts";
import { startStack } from "../../local/stack.ts";
import type { FunctionEnvInput } from "../../local/functions.ts";
import { generateSigningKey, type SigningKey } from "../../local/auth/mod.ts";
import {
  forwardTo,
  type ServedFunctions,
  serveFunctions,
} from "./functions.ts";

/** A running stack with helpers to make users and rows. */
export interface TestStack {
  readonly apiUrl: string;
  readonly dbUrl: string;
  /** The Mailpit-compatible mail API, with `mailPort` given. */
  readonly mailUrl: string | null;
  readonly anonKey: string;
  readonly serviceRoleKey: string;
  /** The `sb_publishable_…` and `sb_secret_…` keys the stack issues. */
  readonly publishableKey: string;
  readonly secretKey: string;
  /** The key the local Auth signs access tokens with. */
  readonly signingKey: SigningKey;
  /** Direct connection to the stack's database, as the test's own eyes. */
  readonly sql: postgres.Sql;
  /**
   * The stack's side of the functions' environment (its URLs and keys),
   * for a handler a test makes itself: `functionEnv(stack.functionInput)`.
   */
  readonly functionInput: FunctionEnvInput;
  /**
   * A fresh anon supabase-js client (no session persisted); with the
   * publishable key where the legacy keys are off.
   */
  anon(): SupabaseClient;
  /**
   * A supabase-js client with the service role key (admin API); with the
   * secret key where the legacy keys are off.
   */
  admin(): SupabaseClient;
  /**
   * Serves the same function handlers with an environment changed by
   * `overrides` (e.g. a dead `SUPABASE_DB_URL`), on another port, with
   * `/auth/v1` still forwarded to this stack.
   */
  withFunctionEnv(overrides: Record<string, string>): Promise<ServedFunctions>;
  /**
   * Ends the served functions' database pools; their next request opens
   * new sessions, which take the database settings changed since.
   */
  reopenFunctionPools(): Promise<void>;
  /** Creates a confirmed identity, signs it in, and optionally its row. */
  createUser(options?: CreateUserOptions): Promise<TestUser>;
  close(): Promise<void>;
}

/** Options of {@linkcode TestStack.createUser}. */
export interface CreateUserOptions {
  /** Defaults to a unique `<random>@test.local`. */
  email?: string;
  password?: string;
  /**
   * Confirm the email (default true): `true` as an operator does, with the
   * admin API's `email_confirm`; `"by-mail"` as a person does where Auth
   * confirms by mail (`emailConfirmations`): a sign-up, then the mailed link
   * followed from the inbox.
   */
  confirmed?: boolean | "by-mail";
  /**
   * Stamp the address as an operator does for an `ADMIN_EMAILS`
   * administrator: `app_metadata.admin_verified_email` = the email
   * (`_shared/email_proof.ts`). Default false.
   */
  adminVerified?: boolean;
  /**
   * The `usuarios` row to insert (columns as given; `auth_user_id: true`
   * links the new identity). `null` (default): no row.
   */
  row?: Record<string, unknown> | null;
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
    /** `false`: the project has disabled its legacy API keys. */
    legacyApiKeys?: boolean;
    /** Serve the Mailpit-compatible mail API (0: a free port). */
    mailPort?: number;
    /**
     * A database the test made itself (e.g. a hosted-shaped
     * `throwawayCluster`), used instead of a fresh one and left as is at
     * close: `url` for the migrations, the functions and `sql`; `authUrl`
     * (default `url`) for the Auth stand-in, as hosted Auth connects as
     * `supabase_auth_admin`.
     */
    database?: { url: string; authUrl?: string };
  } = {},
): Promise<TestStack> {
  refuseForeignTarget();
  const db = options.database
    ? null
    : Deno.env.get("TEST_DATABASE_URL")
    ? await createTestDatabase()
    : null;
  const signingKey = await generateSigningKey();
  const functionDeps = createDeps();
  const stack = await startStack({
    functionDeps,
    signingKey,
    apiPort: 0,
    dbPort: 0,
    dataDir: null,
    databaseUrl: options.database?.url ?? db?.url,
    authSql: options.database?.authUrl
      ? postgres(options.database.authUrl, {
        max: 4,
        prepare: false,
        onnotice: () => {},
      })
      : undefined,
    functionEnv: options.functionEnv,
    emailConfirmations: options.emailConfirmations,
    legacyApiKeys: options.legacyApiKeys,
    mailPort: options.mailPort,
    seedIdentities: false,
  });
  const { apiUrl, dbUrl, anonKey, serviceRoleKey, publishableKey, secretKey } =
    stack;
  const stop = async () => {
    await stack.close();
    await db?.close();
  };
  const sql = postgres(dbUrl, { max: 2, prepare: false, onnotice: () => {} });
  const client = (key: string) =>
    createClient(apiUrl, key, {
      auth: {
        persistSession: false,
        autoRefreshToken: false,
        detectSessionInUrl: false,
      },
    });
  // A project with its legacy keys off works with the new ones.
  const legacyOff = options.legacyApiKeys === false;
  const userKey = legacyOff ? publishableKey : anonKey;
  const adminKey = legacyOff ? secretKey : serviceRoleKey;
  const admin = client(adminKey);
  const functionInput: FunctionEnvInput = {
    apiUrl,
    dbUrl,
    anonKey,
    serviceRoleKey,
    publishableKey: publishableKey || undefined,
    secretKey: secretKey || undefined,
  };
  return {
    apiUrl,
    dbUrl,
    mailUrl: stack.mailUrl,
    anonKey,
    serviceRoleKey,
    publishableKey,
    secretKey,
    signingKey,
    sql,
    anon: () => client(userKey),
    reopenFunctionPools: () => functionDeps.close(),
    functionInput,
    withFunctionEnv: (overrides) =>
      Promise.resolve(
        serveFunctions(
          { ...functionInput, overrides },
          (req) => forwardTo(apiUrl, req),
        ),
      ),
    admin: () => client(adminKey),
    async createUser(opts = {}) {
      const email = opts.email ??
        `u${crypto.randomUUID().slice(0, 12)}@test.local`;
      const password = opts.password ?? `pw-${crypto.randomUUID()}`;
      const confirmed = opts.confirmed ?? true;
      const stamp = opts.adminVerified
        ? { app_metadata: { [ADMIN_STAMP]: email } }
        : {};
      const userClient = client(userKey);
      let id: string;
      if (confirmed === "by-mail") {
        id = await signUpByMail(userClient, apiUrl, email, password);
        if (opts.adminVerified) {
          const stamped = await admin.auth.admin.updateUserById(id, stamp);
          if (stamped.error) throw stamped.error;
        }
      } else {
        const created = await admin.auth.admin.createUser({
          email,
          password,
          email_confirm: confirmed,
          ...stamp,
        });
        if (created.error) throw created.error;
        id = created.data.user.id;
      }
      let token = "";
      if (confirmed) {
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

/**
 * Settings that would point the tests at a stack they did not start: the
 * former `E2E_SUPABASE_URL` mode ran the suite against `supabase start` or
 * a hosted project, and destroyed its data.
 */
export const FOREIGN_TARGET_SETTINGS: readonly string[] = [
  "E2E_SUPABASE_URL",
  "E2E_DB_URL",
  "E2E_SUPABASE_ANON_KEY",
  "E2E_SUPABASE_SERVICE_ROLE_KEY",
];

/**
 * `stack`'s functions served against a proxy of its Auth that counts the
 * calls per path (`calls`); tokens still name the stack's own issuer.
 * Close `served`, then shut `proxy` down.
 */
export async function servedBehindCountingProxy(
  stack: TestStack,
  env: Record<string, string> = {},
): Promise<{
  calls: Map<string, number>;
  proxy: Deno.HttpServer<Deno.NetAddr>;
  served: ServedFunctions;
}> {
  const calls = new Map<string, number>();
  const proxy = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    (req) => {
      const { pathname } = new URL(req.url);
      calls.set(pathname, (calls.get(pathname) ?? 0) + 1);
      return forwardTo(stack.apiUrl, req);
    },
  );
  const served = await stack.withFunctionEnv({
    SUPABASE_URL: `http://127.0.0.1:${proxy.addr.port}`,
    PRESENCE_TOKEN_ISSUER: `${stack.apiUrl}/auth/v1`,
    ...env,
  });
  return { calls, proxy, served };
}

/**
 * Throws when a setting names a stack or database the tests did not
 * create ({@linkcode FOREIGN_TARGET_SETTINGS}), before anything is touched.
 */
export function refuseForeignTarget(): void {
  const set = FOREIGN_TARGET_SETTINGS.filter((name) => Deno.env.get(name));
  if (set.length === 0) return;
  throw new Error(
    `${
      set.map((n) => `"${n}"`).join(", ")
    } set: the tests run only against a stack they start themselves (they drop columns, delete rows and create accounts). Unset it; TEST_DATABASE_URL names a PostgreSQL server on which they create, and drop, a database of their own.`,
  );
}
