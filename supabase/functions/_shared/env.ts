/**
 * Lazy, validated reading of the functions' environment.
 *
 * Read on each request (not at import), so tests and the local gateway can
 * hand each handler its own environment, and every missing variable is
 * reported at once.
 *
 * @module
 */
import { decodeJwt } from "jose";
import { z } from "zod";
import { connectionOptions } from "./db.ts";
import { HttpError } from "./errors.ts";

/** Where variables come from: `Deno.env.get` in production. */
export type EnvSource = (name: string) => string | undefined;

/** The validated configuration of a function. */
export interface FunctionEnv {
  /** Base URL of the Supabase project (Auth lives under `/auth/v1`). */
  readonly supabaseUrl: string;
  /**
   * The public key the functions call Auth with to ask who a token belongs
   * to: the `default` (else first) key of `SUPABASE_PUBLISHABLE_KEYS` where
   * present, else `SUPABASE_ANON_KEY`.
   */
  readonly anonKey: string;
  /**
   * The key for the Auth admin API: the `default` (else first) key of
   * `SUPABASE_SECRET_KEYS` where present, else `SUPABASE_SERVICE_ROLE_KEY`
   * or `SUPABASE_SERVICE_KEY`. Never sent to a client.
   */
  readonly serviceRoleKey: string;
  /**
   * Every key that makes its bearer a trusted server caller, with its name:
   * each key of `SUPABASE_SECRET_KEYS` (named as there: `default`, or the
   * name given in the dashboard) and the legacy service role key(s) that
   * are set (`service_role`).
   */
  readonly secretKeys: readonly NamedKey[];
  /**
   * Every public API key: each key of `SUPABASE_PUBLISHABLE_KEYS` and
   * `SUPABASE_ANON_KEY` when set. Such a key names the project, never a user.
   */
  readonly publishableKeys: readonly string[];
  /**
   * The project's signing keys from `SUPABASE_JWKS` (`{"keys": [...]}` or a
   * bare array), or `null` when it is not set: the published JWKS is
   * fetched instead.
   */
  readonly jwks: { readonly keys: readonly JsonWebKey[] } | null;
  /**
   * The Postgres connection string the functions use: `PRESENCE_DB_URL`
   * when set (on a hosted project, the transaction pooler's string, port
   * 6543), else `SUPABASE_DB_URL`, the direct connection the platform
   * injects.
   */
  readonly dbUrl: string;
  /** Lower-cased, trimmed administrator emails from `ADMIN_EMAILS`. */
  readonly adminEmails: ReadonlySet<string>;
  /** Upper bound of the per-isolate connection pool (`DB_POOL_MAX`, default 2). */
  readonly dbPoolMax: number;
  /**
   * `DB_STATEMENT_TIMEOUT_MS` (default 3000): longest any statement runs
   * before it is cancelled and the request answers 503 `db_timeout`.
   */
  readonly dbStatementTimeoutMs: number;
  /**
   * `PRESENCE_VERIFY`: `"local"` (default) verifies asymmetric tokens against
   * the cached JWKS; `"auth"` always asks Auth.
   */
  readonly presenceVerify: "local" | "auth";
  /**
   * `PRESENCE_MIN_WRITE_INTERVAL_S`: when above 0, a ping that repeats the
   * stored state within this many seconds is answered without a write.
   * 0 (default): every ping writes, as the spec asks.
   */
  readonly presenceMinWriteIntervalS: number;
  /**
   * `USERNAME_MATCH_DOMAINS`: lower-cased email domains whose identities may
   * be matched by the part of the email before the `@` (the spec's weakest
   * strategy); `*` allows every domain. Empty (default): the strategy is off,
   * so an outsider who signs up as `<username>@anywhere` borrows no row.
   */
  readonly usernameMatchDomains: ReadonlySet<string>;
  /**
   * `iss` of the access tokens the fast path accepts: Auth's own URL,
   * `${SUPABASE_URL}/auth/v1` unless `PRESENCE_TOKEN_ISSUER` says otherwise
   * (a function reaching Auth through another address than the one tokens
   * name, as `supabase functions serve` does). A token naming another issuer
   * is left to Auth.
   */
  readonly tokenIssuer: string;
  /**
   * `PRESENCE_AWAY_AFTER_S` (default 300, the spec's "a ping every 2 to 5
   * minutes"): a user stored `online` whose last access is older than this
   * reads as `away`.
   */
  readonly presenceAwayAfterS: number;
  /**
   * `PRESENCE_OFFLINE_AFTER_S` (default 900, the spec's "offline after 10 to
   * 15 minutes"): older than this reads as `offline`. Must be greater than
   * `PRESENCE_AWAY_AFTER_S`.
   */
  readonly presenceOfflineAfterS: number;
  /**
   * `PRESENCE_LOG_LEVEL`: the lowest level of the line each request writes
   * (`http.ts`). `"info"` (default): every request; `"warn"`: refusals the
   * function watches, 503s and failures only, for a busy project whose
   * platform already logs each invocation; `"error"`: failures of 500 and
   * above but 503. The functions' own warnings and errors are always
   * written.
   */
  readonly logLevel: "info" | "warn" | "error";
}

/**
 * Names of the optional settings a function reads besides the `SUPABASE_*`
 * variables the platform injects. The local gateway passes these through
 * from the caller's environment. `PRESENCE_DB_URL` is not among them: the
 * local stack's functions always use the stack's own database, whatever a
 * shell set up for a hosted project exports.
 */
export const FUNCTION_SETTINGS = [
  "ADMIN_EMAILS",
  "DB_POOL_MAX",
  "DB_STATEMENT_TIMEOUT_MS",
  "PRESENCE_VERIFY",
  "PRESENCE_MIN_WRITE_INTERVAL_S",
  "USERNAME_MATCH_DOMAINS",
  "PRESENCE_TOKEN_ISSUER",
  "PRESENCE_AWAY_AFTER_S",
  "PRESENCE_OFFLINE_AFTER_S",
  "PRESENCE_LOG_LEVEL",
] as const;

/** The process environment, as the deployed functions read it. */
export const denoEnv: EnvSource = (name) => Deno.env.get(name);

/** The functions' pool size when `DB_POOL_MAX` is unset. */
export const DEFAULT_DB_POOL_MAX = 2;

// Each optional setting: its schema, applied to the trimmed value (or
// `undefined` when unset or blank, which gives the default). A value the
// schema refuses is an error naming the setting, never a silent default.
const _int = (min: number, max: number, fallback: number) =>
  z.coerce.number().int().min(min).max(max).default(fallback);
// An http(s) URL: `SUPABASE_URL` (Auth's and the gateway's base) and
// `PRESENCE_TOKEN_ISSUER`.
const _HttpUrl = z.url({ protocol: /^https?$/ });

const _SETTINGS = {
  DB_POOL_MAX: _int(1, 100, DEFAULT_DB_POOL_MAX),
  DB_STATEMENT_TIMEOUT_MS: _int(100, 600_000, 3000),
  PRESENCE_VERIFY: z.enum(["local", "auth"]).default("local"),
  PRESENCE_MIN_WRITE_INTERVAL_S: _int(0, 86_400, 0),
  PRESENCE_TOKEN_ISSUER: _HttpUrl.optional(),
  USERNAME_MATCH_DOMAINS: z.string().default("").transform((raw, ctx) => {
    const domains = _list(raw);
    for (const d of domains) {
      if (!_DOMAIN.test(d)) {
        ctx.addIssue({ code: "custom", message: "not a domain name" });
      }
    }
    return new Set(domains);
  }),
  PRESENCE_AWAY_AFTER_S: _int(1, 86_400, 300),
  PRESENCE_OFFLINE_AFTER_S: _int(2, 86_400, 900),
  PRESENCE_LOG_LEVEL: z.enum(["info", "warn", "error"]).default("info"),
} as const;

// Settings that only make sense together: `away` must come before `offline`,
// or no user could ever read as away.
const _Settings = z.object(_SETTINGS).superRefine((s, ctx) => {
  if (s.PRESENCE_AWAY_AFTER_S >= s.PRESENCE_OFFLINE_AFTER_S) {
    ctx.addIssue({
      code: "custom",
      path: ["PRESENCE_OFFLINE_AFTER_S"],
      message: "must be greater than PRESENCE_AWAY_AFTER_S",
    });
  }
});

/** An API key and the name the project gives it. */
export interface NamedKey {
  readonly name: string;
  readonly key: string;
}

/** The name a legacy service role key goes by (`SUPABASE_SERVICE_ROLE_KEY`). */
export const LEGACY_SECRET_KEY_NAME = "service_role";

// `SUPABASE_PUBLISHABLE_KEYS` / `SUPABASE_SECRET_KEYS` as the platform (and
// `supabase functions serve`) sets them: `{"default": "sb_secret_…", ...}`.
// The keys in use order: `default` first, then the others as listed. Unset
// gives no keys, so the legacy variables apply.
const _KeyMap = z.record(z.string(), z.string().trim().min(1)).optional()
  .transform((map) => {
    const entries = Object.entries(map ?? {});
    entries.sort(([a], [b]) =>
      Number(b === "default") - Number(a === "default")
    );
    return entries.map(([name, key]): NamedKey => ({ name, key }));
  });

// `SUPABASE_JWKS`: `{"keys": [...]}` or a bare array of JWKs.
const _Jwks = z.union([
  z.object({ keys: z.array(z.looseObject({ kty: z.string() })) }),
  z.array(z.looseObject({ kty: z.string() })).transform((keys) => ({ keys })),
]).optional().transform((jwks) =>
  jwks ? { keys: jwks.keys as JsonWebKey[] } : null
);

// Parses a variable holding JSON; `undefined` stays unset, text that is not
// JSON becomes a value every schema above refuses.
function _json(raw: string | undefined): unknown {
  if (raw === undefined) return undefined;
  try {
    return JSON.parse(raw);
  } catch {
    return Symbol("not JSON");
  }
}

// What is wrong with `key` as a service key, or null: a publishable key,
// or a JWT whose role is not service_role (the anon key). Names the kind,
// never the key.
function _notAServiceKey(key: string): string | null {
  if (key.startsWith("sb_publishable_")) {
    return "holds a publishable key: a secret key (sb_secret_…) or the service_role key is needed";
  }
  if (!key.startsWith("eyJ")) return null;
  let role: unknown;
  try {
    role = decodeJwt(key).role;
  } catch {
    return null;
  }
  if (role === "service_role") return null;
  return `holds a JWT whose role is ${
    role === "anon" || role === "authenticated" ? role : "not service_role"
  }: the service_role key (or a secret key, sb_secret_…) is needed`;
}

const _DOMAIN =
  /^(\*|[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*)$/;

/**
 * Reads and validates the environment. Throws a 500 `missing_env` whose
 * `missing` object says, for each required variable (or pair), whether it is
 * missing or empty; or a 500 `invalid_env` whose `invalid` object names each
 * optional setting with a value it cannot use, and what it expects.
 *
 * @example
 * ```ts
 * const env = readEnv((name) => Deno.env.get(name));
 * ```
 */
export function readEnv(get: EnvSource): FunctionEnv {
  const value = (name: string) => get(name)?.trim() || undefined;
  const invalid: Record<string, string> = {};
  const keyMap = (name: string) => {
    const parsed = _KeyMap.safeParse(_json(value(name)));
    if (parsed.success) return parsed.data;
    invalid[name] = "must be a JSON object of key names to keys";
    return [];
  };
  const publishable = keyMap("SUPABASE_PUBLISHABLE_KEYS").map((k) => k.key);
  const secret = keyMap("SUPABASE_SECRET_KEYS");
  const legacySecrets = [
    value("SUPABASE_SERVICE_ROLE_KEY"),
    value("SUPABASE_SERVICE_KEY"),
  ].filter((k): k is string => k !== undefined);
  // A key set twice (a legacy variable beside another) is trusted once,
  // under its first name.
  const secretKeys = [
    ...secret,
    ...legacySecrets.map((key) => ({ name: LEGACY_SECRET_KEY_NAME, key })),
  ].filter((k, i, all) => all.findIndex((o) => o.key === k.key) === i);
  const jwks = _Jwks.safeParse(_json(value("SUPABASE_JWKS")));
  if (!jwks.success) {
    invalid.SUPABASE_JWKS = 'must be a JWKS: {"keys": [...]} or an array';
  }
  const supabaseUrl = value("SUPABASE_URL");
  const anonKey = publishable[0] ?? value("SUPABASE_ANON_KEY");
  const serviceRoleKey = secret[0]?.key ?? legacySecrets[0];
  const pooledUrl = value("PRESENCE_DB_URL");
  const dbUrl = pooledUrl ?? value("SUPABASE_DB_URL");
  if (!supabaseUrl || !anonKey || !serviceRoleKey || !dbUrl) {
    throw new HttpError("missing_env", {
      extra: {
        missing: {
          SUPABASE_URL: !supabaseUrl,
          SUPABASE_ANON_KEY: !anonKey,
          SUPABASE_SERVICE_ROLE_KEY_or_SUPABASE_SERVICE_KEY: !serviceRoleKey,
          SUPABASE_DB_URL: !dbUrl,
        },
      },
    });
  }
  const settings = _Settings.safeParse(
    Object.fromEntries(
      Object.keys(_SETTINGS).map((name) => [
        name,
        name === "PRESENCE_VERIFY" || name === "PRESENCE_LOG_LEVEL"
          ? value(name)?.toLowerCase()
          : value(name),
      ]),
    ),
  );
  if (!settings.success) {
    for (const issue of settings.error.issues) {
      invalid[String(issue.path[0])] ??= issue.message;
    }
  }
  if (!_HttpUrl.safeParse(supabaseUrl).success) {
    invalid.SUPABASE_URL =
      "must be the project's URL: https://<ref>.supabase.co (http://127.0.0.1:54321 locally)";
  }
  // Each service key where it was set, for a key of another kind (a
  // publishable key, the anon JWT) in its place: every admin call would be
  // refused, read as a fault of the caller's rights.
  const keySources: [string, string][] = [
    ...secret.map((k): [string, string] => ["SUPABASE_SECRET_KEYS", k.key]),
    ...[
      "SUPABASE_SERVICE_ROLE_KEY",
      "SUPABASE_SERVICE_KEY",
    ].map((name): [string, string] => [name, value(name) ?? ""]),
  ];
  for (const [name, key] of keySources) {
    const wrong = _notAServiceKey(key);
    if (wrong) invalid[name] ??= wrong;
  }
  try {
    connectionOptions(dbUrl);
  } catch (error) {
    // The message names the part, never the string (it holds a password).
    invalid[pooledUrl ? "PRESENCE_DB_URL" : "SUPABASE_DB_URL"] =
      (error as Error).message;
  }
  if (!settings.success || !jwks.success || Object.keys(invalid).length > 0) {
    throw new HttpError("invalid_env", { extra: { invalid } });
  }
  const s = settings.data;
  return {
    supabaseUrl: supabaseUrl.replace(/\/+$/, ""),
    anonKey,
    serviceRoleKey,
    secretKeys,
    publishableKeys: [
      ...new Set([...publishable, value("SUPABASE_ANON_KEY") ?? ""]),
    ].filter(Boolean),
    jwks: jwks.data,
    dbUrl,
    adminEmails: parseAdminEmails(get("ADMIN_EMAILS")),
    dbPoolMax: s.DB_POOL_MAX,
    dbStatementTimeoutMs: s.DB_STATEMENT_TIMEOUT_MS,
    presenceVerify: s.PRESENCE_VERIFY,
    presenceMinWriteIntervalS: s.PRESENCE_MIN_WRITE_INTERVAL_S,
    usernameMatchDomains: s.USERNAME_MATCH_DOMAINS,
    tokenIssuer: s.PRESENCE_TOKEN_ISSUER ??
      `${supabaseUrl.replace(/\/+$/, "")}/auth/v1`,
    presenceAwayAfterS: s.PRESENCE_AWAY_AFTER_S,
    logLevel: s.PRESENCE_LOG_LEVEL,
    presenceOfflineAfterS: s.PRESENCE_OFFLINE_AFTER_S,
  };
}

/**
 * Splits `ADMIN_EMAILS` on commas, trimming and lower-casing each entry and
 * dropping empty ones.
 *
 * @example
 * ```ts
 * parseAdminEmails(" Ana@Example.com, ,bo@x.io"); // Set {"ana@example.com", "bo@x.io"}
 * ```
 */
export function parseAdminEmails(raw: string | undefined): Set<string> {
  return new Set(_list(raw ?? ""));
}

function _list(raw: string): string[] {
  return raw.split(",").map((s) => s.trim().toLowerCase()).filter(Boolean);
}
