/**
 * The Docker-free local stack: Postgres (PGlite, or any PostgreSQL through a
 * URL), migrations and seed by the Supabase CLI, the Auth stand-in, and the
 * gateway serving Auth and the functions.
 *
 * @module
 */
import postgres from "postgres";
import {
  createDeps,
  type OwnedDeps,
} from "../supabase/functions/_shared/deps.ts";
import {
  readColumns,
  UNINDEXED_AUTH_USER_ID,
} from "../supabase/functions/_shared/columns.ts";
import {
  createAuthApi,
  EMAIL_MAX_FREQUENCY_MS,
  generateSigningKey,
  loadOrCreateSigningKey,
  LOCAL_ANON_KEY,
  LOCAL_JWT_SECRET,
  LOCAL_OPAQUE_KEYS,
  LOCAL_PUBLISHABLE_KEY,
  LOCAL_SECRET_KEY,
  LOCAL_SERVICE_ROLE_KEY,
  OTP_LENGTH,
  REFRESH_TOKEN_REUSE_INTERVAL,
  type SigningKey,
} from "./auth/mod.ts";
import { bootstrapDatabase } from "./db/bootstrap.ts";
import { startPgliteServer } from "./db/pglite_server.ts";
import { functionEnv, localFunctions } from "./functions.ts";
import { FunctionHost } from "./function_host.ts";
import { createDemo } from "./demo.ts";
import { createGateway, localJwtCheck } from "./gateway.ts";
import {
  Inbox,
  type MailTemplate,
  type MailType,
  TEMPLATE_FIELDS,
  unfilledAction,
} from "./auth/mailer.ts";
import { inboxPage } from "./inbox.ts";
import { mailpitApi, type MailpitSender } from "./mailpit.ts";
import {
  fixtureBelongs,
  isLoopbackUrl,
  PROJECT_DIR,
  pushMigrations,
} from "./migrate.ts";
import { seedIdentities } from "./seed_identities.ts";
import { type DataLock, lockDataDir } from "./data_lock.ts";
import { redactIn, redactUrl, StartError } from "./start_error.ts";
import { parse as parseToml } from "smol-toml";

/** Settings of {@linkcode startStack}; every one has a default. */
export interface StackOptions {
  /** API port (`supabase start`: 54321); 0 picks a free one. */
  apiPort?: number;
  /** PGlite's port (`supabase start`: 54322); 0 picks a free one. */
  dbPort?: number;
  /**
   * The Mailpit-compatible mail API's port ({@linkcode mailpitApi};
   * `supabase start`: 54324); 0 picks a free one. Default: none (the
   * inbox is still at `/inbox/` on the API port).
   */
  mailPort?: number | null;
  /** Loopback interface to bind. */
  host?: string;
  /** Folder for PGlite's data and the signing key; `null`: in memory. */
  dataDir?: string | null;
  /** Use this PostgreSQL instead of PGlite. */
  databaseUrl?: string;
  /** Extra function environment, applied last. */
  functionEnv?: Record<string, string>;
  /**
   * Whether the legacy anon and service_role keys are accepted as `apikey`
   * (default true). `false` stands for a hosted project that has disabled
   * them: the gateway refuses them, and the functions' environment still
   * holds them, as the platform's does.
   */
  legacyApiKeys?: boolean;
  /**
   * How the functions run. `"workers"` (what `npm start` asks for): every
   * function under `supabase/functions/` through its deployed `index.ts`,
   * each in a Deno process of its own, reloaded when its files change, as
   * `supabase functions serve` does ({@linkcode FunctionHost}).
   * `"in-process"` (default): the three handlers imported into this
   * process, which is what tests and benchmarks that hand the handlers
   * their dependencies need, at no process cost per stack.
   */
  functions?: "workers" | "in-process";
  /**
   * The in-process functions' dependencies (pools, Auth clients, key set,
   * clock); default a fresh `createDeps()`. Ended with the stack.
   */
  functionDeps?: OwnedDeps;
  /**
   * Whether sign-ups wait for email confirmation (default: config.toml
   * `[auth.email] enable_confirmations`, false as in `supabase start`).
   */
  emailConfirmations?: boolean;
  /**
   * `[auth]` settings applied over the project's config.toml (default:
   * none). The auth-js suite's runner passes its own config.toml's here.
   */
  authConfig?: Partial<AuthConfig>;
  /**
   * Write the local fixture (rows of `supabase/seed.sql`, seeded
   * identities). Default: only into a database the stack created, never
   * into an existing `public.usuarios` ({@linkcode fixtureBelongs}); `true`
   * writes it anyway, `false` never.
   */
  seed?: boolean;
  /** Create the seeded identities when the fixture is written (default true). */
  seedIdentities?: boolean;
  /**
   * Delete PGlite's data in `dataDir` before starting: a fresh database,
   * migrated and seeded again (`npm run reset`). Refused with
   * `databaseUrl`, whose database the stack does not own.
   */
  reset?: boolean;
  /** ES256 key to sign access tokens with (default: from dataDir, or new). */
  signingKey?: SigningKey;
  /**
   * The Auth stand-in's connection pool (default: 4 connections to the
   * database). Ended with the stack. The benchmark passes one through a
   * counting proxy.
   */
  authSql?: postgres.Sql;
  /**
   * Called with every request the API answered and its response, once
   * answered (the benchmark counts pings by status and requests to Auth).
   */
  onResponse?: (req: Request, res: Response) => void;
  /** Progress lines, e.g. `console.log`; silent by default. */
  log?: (line: string) => void;
}

/** A running stack. */
export interface Stack {
  readonly apiUrl: string;
  readonly dbUrl: string;
  readonly anonKey: string;
  readonly serviceRoleKey: string;
  /** `sb_publishable_…`: stands for the anon key. */
  readonly publishableKey: string;
  /** `sb_secret_…`: stands for the service_role key. */
  readonly secretKey: string;
  readonly jwtSecret: string;
  /** `"pglite"` or `"postgres"`. */
  readonly database: "pglite" | "postgres";
  /** Whether the local fixture was written (or kept) in this database. */
  readonly seeded: boolean;
  /** The Mailpit-compatible mail API, if `mailPort` was given. */
  readonly mailUrl: string | null;
  /** The mails Auth sent (also at `/inbox/` on the API port). */
  readonly inbox: Inbox;
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
  let locked: DataLock | null = null;
  const close = async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
  };
  try {
    // A config.toml the stand-in cannot honour is refused before anything
    // starts.
    const config = {
      ...authConfig(
        undefined,
        undefined,
        (setting, what) =>
          log(
            `supabase/config.toml sets ${setting}, which the local Auth stand-in does not serve (${what})`,
          ),
      ),
      ...options.authConfig,
    };
    // Checked first, so a taken port fails before anything touches a
    // database; bound for real below.
    const apiPort = _freeOrFail(host, options.apiPort ?? 54321, "--port");
    const mailPort = options.mailPort == null
      ? null
      : _freeOrFail(host, options.mailPort, "--mail-port");
    if (options.reset && options.databaseUrl) {
      throw new StartError(
        "--reset deletes the local PGlite data and does not touch a database given by --database-url",
        "Drop and recreate that database yourself, or leave out --database-url",
      );
    }
    if (dataDir) {
      await Deno.mkdir(dataDir, { recursive: true });
      const lock = await lockDataDir(dataDir);
      cleanups.push(() => lock.release());
      locked = lock;
      if (options.reset) {
        await Deno.remove(`${dataDir}/pglite`, { recursive: true })
          .catch((error) => {
            if (!(error instanceof Deno.errors.NotFound)) throw error;
          });
        log(`Deleted the local database in ${dataDir}/pglite`);
      }
    }
    let dbUrl = options.databaseUrl;
    let database: Stack["database"] = "postgres";
    if (!dbUrl) {
      const dbPort = options.dbPort ?? 54322;
      const server = await startPgliteServer({
        dataDir: dataDir ? `${dataDir}/pglite` : undefined,
        host,
        port: dbPort,
        log,
      }).catch((error) => {
        throw _addrInUse(error)
          ? _portTaken(host, dbPort, "--db-port", error)
          : error;
      });
      cleanups.push(() => server.close());
      dbUrl = server.url;
      database = "pglite";
      log(`Started PGlite on ${host}:${server.port}`);
    }
    const seeded = options.seed ??
      await _reach(dbUrl, () => fixtureBelongs(dbUrl!));
    await _reach(dbUrl, () => bootstrapDatabase(dbUrl!));
    log(await pushMigrations(dbUrl, { includeSeed: seeded }));
    if (!seeded && options.seed === undefined) {
      log(
        isLoopbackUrl(dbUrl)
          ? "public.usuarios existed before this stack: the local fixture (seed rows and identities) was not written; pass --seed to write it"
          : "The database is not on this machine: the local fixture (seed rows and identities with known passwords) was not written; pass --seed to write it anyway",
      );
    }

    const sql = options.authSql ?? postgres(dbUrl, {
      max: 4,
      prepare: false,
      onnotice: () => {},
    });
    cleanups.push(() => sql.end({ timeout: 5 }));
    const [{ version }] = await sql<{ version: string }[]>`
      select current_setting('server_version') as version`;
    log(`Database: PostgreSQL ${version} (${database})`);
    // The CLI does not show the migrations' NOTICEs: say here which lookup
    // indexes are plain because the table was adopted, or missing.
    for (const line of await _indexNotes(sql)) log(line);
    const signingKey = options.signingKey ??
      (dataDir
        ? await loadOrCreateSigningKey(`${dataDir}/signing_key.json`)
        : await generateSigningKey());

    const apiUrl = `http://${host}:${apiPort}`;

    const inbox = new Inbox(
      // The kind of mail, never its subject: a project's template may put
      // the code in it (`{{ .Token }}`), and the log is kept on disk.
      (mail) =>
        log(
          `Mail (${mail.type}) to ${mail.to}: open ${apiUrl}/inbox/${mail.id}`,
        ),
      { templates: config.emailTemplates, siteUrl: config.siteUrl },
    );
    const auth = createAuthApi({
      sql,
      jwtSecret: LOCAL_JWT_SECRET,
      signingKey,
      jwtExpiry: config.jwtExpiry,
      mailerAutoconfirm: !(options.emailConfirmations ??
        config.emailConfirmations),
      phoneAutoconfirm: config.phoneAutoconfirm,
      issuer: `${apiUrl}/auth/v1`,
      anonKey: LOCAL_ANON_KEY,
      serviceRoleKey: LOCAL_SERVICE_ROLE_KEY,
      inbox,
      siteUrl: config.siteUrl,
      additionalRedirectUrls: config.additionalRedirectUrls,
      otpExpiry: config.otpExpiry,
      signupEnabled: config.signupEnabled,
      minPasswordLength: config.minPasswordLength,
      log: (line) => log(`[auth] ${line}`),
    });
    const env = functionEnv({
      apiUrl,
      dbUrl,
      anonKey: LOCAL_ANON_KEY,
      serviceRoleKey: LOCAL_SERVICE_ROLE_KEY,
      publishableKey: LOCAL_PUBLISHABLE_KEY,
      secretKey: LOCAL_SECRET_KEY,
      overrides: options.functionEnv,
      log,
    });
    // In-process functions' pools and clients, ended at shutdown (workers
    // hold their own, ended with the worker).
    const deps = options.functionDeps ?? createDeps();
    let functions;
    if (options.functions !== "workers") {
      functions = localFunctions(env, deps);
    } else {
      const host = new FunctionHost({ projectDir: PROJECT_DIR, env, log });
      cleanups.push(() => host.close());
      functions = (name: string) => host.lookup(name);
    }
    const gateway = createGateway({
      auth,
      functions,
      isValidJwt: localJwtCheck(signingKey),
      apiKeys: [LOCAL_ANON_KEY, LOCAL_SERVICE_ROLE_KEY],
      opaqueKeys: LOCAL_OPAQUE_KEYS,
      disabledKeys: options.legacyApiKeys === false
        ? [LOCAL_ANON_KEY, LOCAL_SERVICE_ROLE_KEY]
        : [],
      demo: createDemo({ anonKey: LOCAL_ANON_KEY }),
      inbox: inboxPage(inbox),
    });
    const observe = options.onResponse;
    const server = _serve(
      host,
      apiPort,
      "--port",
      observe
        ? async (req) => {
          const res = await gateway(req);
          observe(req, res);
          return res;
        }
        : gateway,
    );
    cleanups.push(async () => {
      await server.shutdown();
      await deps.close();
    });
    log(`Serving the API on ${apiUrl}`);
    let mailUrl: string | null = null;
    if (mailPort !== null) {
      const mail = _serve(
        host,
        mailPort,
        "--mail-port",
        mailpitApi(inbox, mailSender(), `${apiUrl}/inbox/`),
      );
      cleanups.push(() => mail.shutdown());
      mailUrl = `http://${host}:${mailPort}`;
      log(`Serving the Mailpit API on ${mailUrl}`);
    }
    await locked?.record({ database, apiUrl, dbUrl, mailUrl });

    if (seeded && (options.seedIdentities ?? true)) {
      await seedIdentities(apiUrl, LOCAL_SERVICE_ROLE_KEY);
    }
    return {
      apiUrl,
      dbUrl,
      anonKey: LOCAL_ANON_KEY,
      serviceRoleKey: LOCAL_SERVICE_ROLE_KEY,
      publishableKey: LOCAL_PUBLISHABLE_KEY,
      secretKey: LOCAL_SECRET_KEY,
      jwtSecret: LOCAL_JWT_SECRET,
      database,
      seeded,
      mailUrl,
      inbox,
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}

// What an adopted usuarios lacks or has differently, one log line each.
async function _indexNotes(sql: postgres.Sql): Promise<string[]> {
  const rows = await sql<{ name: string }[]>`
    select indexname::text as name from pg_indexes
    where schemaname = 'public' and tablename = 'usuarios'
      and indexname in ('usuarios_correo_lower_idx',
        'usuarios_nombre_usuario_lower_idx', 'usuarios_auth_user_id_idx')
    order by 1
  `;
  const notes = rows.map(({ name }) =>
    `public.usuarios: "${name}" is a plain index, not a unique one: an adopted table keeps accepting what it accepted (docs/adoption.md)`
  );
  // The functions log it too, on their first lookup of the columns.
  if ((await readColumns(sql)).authUserIdIndexed === false) {
    notes.push(UNINDEXED_AUTH_USER_ID);
  }
  return notes;
}

// The port to serve on: `port` itself, or a free one for 0.
function _freeOrFail(host: string, port: number, flag: string): number {
  try {
    const listener = Deno.listen({ hostname: host, port });
    const { port: bound } = listener.addr as Deno.NetAddr;
    listener.close();
    return bound;
  } catch (error) {
    if (_addrInUse(error)) throw _portTaken(host, port, flag, error);
    throw error;
  }
}

// Serves on a port checked free at start; taken since: the same error.
function _serve(
  host: string,
  port: number,
  flag: string,
  handler: (req: Request) => Response | Promise<Response>,
): Deno.HttpServer {
  try {
    return Deno.serve({ hostname: host, port, onListen: () => {} }, handler);
  } catch (error) {
    throw _addrInUse(error) ? _portTaken(host, port, flag, error) : error;
  }
}

function _addrInUse(error: unknown): boolean {
  return error instanceof Deno.errors.AddrInUse ||
    (error as { code?: string })?.code === "EADDRINUSE";
}

function _portTaken(
  host: string,
  port: number,
  flag: string,
  cause: unknown,
): StartError {
  return new StartError(
    `Port ${port} on ${host} is already in use`,
    `Stop what uses it (perhaps another npm start), or pass ${flag} <another port> (0 picks a free one)`,
    "",
    { cause },
  );
}

// A database that cannot be reached (refused, unknown host, wrong
// password, no such database) is the person's to fix: say which one.
async function _reach<T>(url: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    if (error instanceof StartError) throw error;
    const why = error instanceof Error ? error.message : String(error);
    throw new StartError(
      `Cannot use the database at ${redactUrl(url)}: ${redactIn(why, url)}`,
      "Check --database-url (user, password with any # / ? @ in it percent-encoded, host, port, database) and that PostgreSQL is running and accepts connections",
      "",
      { cause: error },
    );
  }
}

// Settings the stand-in hard-wires (local/auth): another value in a
// project's config.toml is refused, not silently served as the default.
const _HARD_WIRED: {
  path: string[];
  ok: (value: unknown) => boolean;
  what: string;
}[] = [
  {
    path: ["enable_refresh_token_rotation"],
    ok: (v) => v === true,
    what: "refresh tokens always rotate",
  },
  {
    path: ["refresh_token_reuse_interval"],
    ok: (v) => v === REFRESH_TOKEN_REUSE_INTERVAL,
    what: `the reuse interval is ${REFRESH_TOKEN_REUSE_INTERVAL} s`,
  },
  {
    path: ["jwt_secret"],
    ok: (v) => v === LOCAL_JWT_SECRET,
    what: "the legacy keys are signed with the standard local JWT secret",
  },
  {
    path: ["email", "double_confirm_changes"],
    ok: (v) => v === true,
    what: "an email change is confirmed at both addresses",
  },
  {
    path: ["email", "secure_password_change"],
    ok: (v) => v === false,
    what: "a password change asks for no reauthentication",
  },
  {
    path: ["email", "max_frequency"],
    ok: (v) => _durationMs(v) === EMAIL_MAX_FREQUENCY_MS,
    what: `one mail of a kind per user every ${EMAIL_MAX_FREQUENCY_MS} ms`,
  },
  {
    path: ["email", "otp_length"],
    ok: (v) => v === OTP_LENGTH,
    what: `emailed codes have ${OTP_LENGTH} digits`,
  },
  {
    path: ["sessions", "timebox"],
    ok: (v) => v === "" || _durationMs(v) === 0,
    what: "sessions have no time limit",
  },
  {
    path: ["sessions", "inactivity_timeout"],
    ok: (v) => v === "" || _durationMs(v) === 0,
    what: "sessions have no inactivity timeout",
  },
];

// A Go duration as config.toml writes one ("1s", "500ms", "24h", "1h30m");
// NaN for anything else.
function _durationMs(value: unknown): number {
  if (typeof value !== "string" || !/^(\d+(ms|s|m|h))+$/.test(value)) {
    return value === "0" ? 0 : NaN;
  }
  const unit: Record<string, number> = { ms: 1, s: 1e3, m: 6e4, h: 3.6e6 };
  let ms = 0;
  for (const [, n, u] of value.matchAll(/(\d+)(ms|s|m|h)/g)) {
    ms += Number(n) * unit[u];
  }
  return ms;
}

function _refuseSetting(setting: string, what: string): never {
  throw new StartError(
    `supabase/config.toml sets ${setting}, which the local Auth stand-in does not support (${what})`,
    "Remove the setting for local work, or use supabase start (Docker)",
  );
}

/**
 * The ports `supabase/config.toml` gives the API (`[api] port`), the
 * database (`[db] port`) and the mail catcher (`[local_smtp] port`; `null`
 * with `[local_smtp] enabled = false`), the CLI's way to move them; 54321,
 * 54322 and 54324 where it gives none. `npm start` takes them as its
 * defaults.
 *
 * @example
 * ```ts
 * configPorts('[api]\nport = 64321'); // { api: 64321, db: 54322, mail: 54324 }
 * ```
 */
export function configPorts(
  text = Deno.readTextFileSync(`${PROJECT_DIR}supabase/config.toml`),
): { api: number; db: number; mail: number | null } {
  const config = _config(text);
  const port = (value: unknown, fallback: number) =>
    Number.isInteger(value) && (value as number) > 0 &&
      (value as number) <= 65535
      ? value as number
      : fallback;
  return {
    api: port(config.api?.port, 54321),
    db: port(config.db?.port, 54322),
    mail: config.local_smtp?.enabled === false
      ? null
      : port(config.local_smtp?.port, 54324),
  };
}

/**
 * The From of every local mail: `[local_smtp]` `admin_email` and
 * `sender_name` of config.toml (`text`, default the project's file), with
 * the Supabase CLI's defaults.
 */
export function mailSender(
  text = Deno.readTextFileSync(`${PROJECT_DIR}supabase/config.toml`),
): MailpitSender {
  const { local_smtp: smtp } = _config(text);
  return {
    address: typeof smtp?.admin_email === "string"
      ? smtp.admin_email
      : "admin@email.com",
    name: typeof smtp?.sender_name === "string" ? smtp.sender_name : "Admin",
  };
}

function _config(text: string) {
  return parseToml(text) as {
    api?: { port?: unknown };
    db?: { port?: unknown };
    local_smtp?: {
      enabled?: unknown;
      port?: unknown;
      admin_email?: unknown;
      sender_name?: unknown;
    };
  };
}

/** What the Auth stand-in takes from config.toml, as `supabase start` does. */
export interface AuthConfig {
  jwtExpiry: number;
  emailConfirmations: boolean;
  /** `[auth.sms] enable_confirmations` off, as the CLI sets it. */
  phoneAutoconfirm: boolean;
  siteUrl: string;
  additionalRedirectUrls: string[];
  otpExpiry: number;
  signupEnabled: boolean;
  minPasswordLength: number;
  /** `[auth.email.template.*]`: the project's own mails, by kind. */
  emailTemplates: Partial<Record<MailType, MailTemplate>>;
}

/**
 * Reads `[auth]` of config.toml (`text`, default the project's file). A
 * setting that changes what Auth does and that the stand-in cannot honour
 * is passed to `unsupported`, by default a {@linkcode StartError} naming
 * it, never silently ignored. A provider or factor it does not serve, whose
 * calls fail loudly locally (an OAuth provider's `/authorize` 400, phone
 * and MFA routes 404), is passed to `notServed` instead (`npm start` logs
 * a line), so that a project that signs in with GitHub and email still
 * starts.
 */
export function authConfig(
  text = Deno.readTextFileSync(`${PROJECT_DIR}supabase/config.toml`),
  unsupported: (setting: string, what: string) => void = _refuseSetting,
  notServed: (setting: string, what: string) => void = () => {},
): AuthConfig {
  const config = parseToml(text) as {
    auth?: {
      site_url?: string;
      additional_redirect_urls?: string[];
      jwt_expiry?: number;
      enable_signup?: boolean;
      enable_anonymous_sign_ins?: boolean;
      minimum_password_length?: number;
      password_requirements?: string;
      hook?: Record<string, { enabled?: unknown }>;
      jwt_issuer?: unknown;
      external_url?: unknown;
      signing_keys_path?: unknown;
      captcha?: { enabled?: unknown };
      email?: {
        enable_confirmations?: boolean;
        otp_expiry?: number;
        enable_signup?: boolean;
        enabled?: unknown;
        template?: Record<string, { subject?: string; content_path?: string }>;
        notification?: Record<string, { enabled?: unknown }>;
      };
      sms?: {
        enable_signup?: unknown;
        enabled?: unknown;
        enable_confirmations?: unknown;
      };
      external?: Record<string, { enabled?: unknown }>;
      mfa?: Record<string, unknown>;
    };
  };
  const auth = config.auth ?? {};
  for (const { path, ok, what } of _HARD_WIRED) {
    const value = path.reduce<unknown>(
      (at, key) => (at as Record<string, unknown> | undefined)?.[key],
      auth,
    );
    if (value === undefined || ok(value)) continue;
    const section = path.length > 1 ? `[auth.${path[0]}]` : "[auth]";
    unsupported(
      `${section} ${path.at(-1)} = ${JSON.stringify(value)}`,
      what,
    );
  }
  for (const [hook, { enabled }] of Object.entries(auth.hook ?? {})) {
    if (enabled === true) {
      unsupported(
        `[auth.hook.${hook}] enabled = true`,
        "Auth hooks are not run: tokens would lack the hook's claims",
      );
    }
  }
  if (auth.enable_anonymous_sign_ins === true) {
    unsupported(
      "[auth] enable_anonymous_sign_ins = true",
      "anonymous sign-ins",
    );
  }
  if (auth.password_requirements) {
    unsupported(
      `[auth] password_requirements = "${auth.password_requirements}"`,
      "only minimum_password_length is checked",
    );
  }
  // `enabled` is the name `supabase init` writes since CLI 3 (the
  // provider on or off); `enable_signup` the older one.
  for (const key of ["enable_signup", "enabled"] as const) {
    if (auth.email?.[key] === false) {
      unsupported(`[auth.email] ${key} = false`, "email is its only provider");
    }
  }
  if (auth.captcha?.enabled === true) {
    unsupported(
      "[auth.captcha] enabled = true",
      "no captcha is checked: sign-ups and sign-ins without a captcha_token would pass",
    );
  }
  for (
    const [key, what] of [
      ["jwt_issuer", "tokens' iss is the local API's /auth/v1"],
      [
        "external_url",
        "tokens' iss and mailed links are the local API's /auth/v1",
      ],
      ["signing_keys_path", "tokens are signed with the stack's own key"],
    ] as const
  ) {
    const value = auth[key];
    if (value !== undefined && value !== "") {
      unsupported(`[auth] ${key} = ${JSON.stringify(value)}`, what);
    }
  }
  for (
    const [kind, { enabled }] of Object.entries(
      auth.email?.notification ?? {},
    )
  ) {
    if (enabled === true) {
      notServed(
        `[auth.email.notification.${kind}] enabled = true`,
        "notification mails are not sent",
      );
    }
  }
  for (const key of ["enable_signup", "enabled"] as const) {
    if (auth.sms?.[key] === true) {
      notServed(
        `[auth.sms] ${key} = true`,
        "phone sign-ins are not served: their routes answer 404",
      );
    }
  }
  for (const [provider, { enabled }] of Object.entries(auth.external ?? {})) {
    if (enabled === true) {
      notServed(
        `[auth.external.${provider}] enabled = true`,
        "no OAuth provider is served: /authorize answers 400",
      );
    }
  }
  for (const [factor, settings] of Object.entries(auth.mfa ?? {})) {
    if (typeof settings !== "object" || settings === null) continue;
    for (const key of ["enroll_enabled", "verify_enabled"]) {
      if ((settings as Record<string, unknown>)[key] === true) {
        notServed(
          `[auth.mfa.${factor}] ${key} = true`,
          "no MFA factor is served: its routes answer 404",
        );
      }
    }
  }
  return {
    emailTemplates: _emailTemplates(auth.email?.template ?? {}, unsupported),
    jwtExpiry: auth.jwt_expiry ?? 3600,
    emailConfirmations: auth.email?.enable_confirmations ?? false,
    phoneAutoconfirm: auth.sms?.enable_confirmations !== true,
    siteUrl: auth.site_url ?? "http://127.0.0.1:3000",
    additionalRedirectUrls: auth.additional_redirect_urls ?? [],
    otpExpiry: auth.email?.otp_expiry ?? 3600,
    signupEnabled: auth.enable_signup ?? true,
    minPasswordLength: auth.minimum_password_length ?? 6,
  };
}

// config.toml's template kinds, as the mails the stand-in sends name them.
const _TEMPLATE_KINDS: Record<string, MailType> = {
  confirmation: "signup",
  invite: "invite",
  recovery: "recovery",
  magic_link: "magiclink",
  email_change: "email_change",
};

// `[auth.email.template.<kind>]`: `subject`, and the HTML at `content_path`
// (from the project folder, as the CLI reads it). A file that is missing,
// or uses more of Go's templates than the fields the inbox fills in
// (`{{ if }}`, `.Data`), is passed to `unsupported`: never mailed half
// rendered. A kind the stand-in sends no mail of (reauthentication) is
// left alone.
function _emailTemplates(
  section: Record<string, { subject?: string; content_path?: string }>,
  unsupported: (setting: string, what: string) => void,
): Partial<Record<MailType, MailTemplate>> {
  const templates: Partial<Record<MailType, MailTemplate>> = {};
  // What a setting uses that the inbox would leave unfilled: refused.
  const filled = (setting: string, text: string): boolean => {
    const other = unfilledAction(text);
    if (other === null) return true;
    unsupported(
      setting,
      `{{ ${other} }} is not filled in locally (only ${
        TEMPLATE_FIELDS.map((f) => `{{ .${f} }}`).join(", ")
      })`,
    );
    return false;
  };
  for (
    const [kind, { subject, content_path: path }] of Object.entries(section)
  ) {
    const type = _TEMPLATE_KINDS[kind];
    if (!type) continue;
    const at = `[auth.email.template.${kind}]`;
    if (subject && !filled(`${at} subject = "${subject}"`, subject)) continue;
    const template: MailTemplate = { subject };
    if (path) {
      const setting = `${at} content_path = "${path}"`;
      try {
        template.html = Deno.readTextFileSync(
          path.startsWith("/") ? path : `${PROJECT_DIR}${path}`,
        );
      } catch {
        unsupported(setting, "no such file");
        continue;
      }
      if (!filled(setting, template.html)) continue;
    }
    templates[type] = template;
  }
  return templates;
}
