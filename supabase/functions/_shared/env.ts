/**
 * Lazy, validated reading of the functions' environment.
 *
 * Read on each request (not at import), so tests and the local gateway can
 * hand each handler its own environment, and every missing variable is
 * reported at once.
 *
 * @module
 */
import { HttpError } from "./errors.ts";

/** Where variables come from: `Deno.env.get` in production. */
export type EnvSource = (name: string) => string | undefined;

/** The validated configuration of a function. */
export interface FunctionEnv {
  /** Base URL of the Supabase project (Auth lives under `/auth/v1`). */
  readonly supabaseUrl: string;
  /** Public anon key, used to ask Auth who a token belongs to. */
  readonly anonKey: string;
  /** Service role key, for the Auth admin API. Never sent to a client. */
  readonly serviceRoleKey: string;
  /** Postgres connection string injected by the platform. */
  readonly dbUrl: string;
  /** Lower-cased, trimmed administrator emails from `ADMIN_EMAILS`. */
  readonly adminEmails: ReadonlySet<string>;
  /** Upper bound of the per-isolate connection pool (`DB_POOL_MAX`, default 4). */
  readonly dbPoolMax: number;
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
}

/**
 * Names of the optional settings a function reads besides the `SUPABASE_*`
 * variables the platform injects. The local gateway passes these through
 * from the caller's environment.
 */
export const FUNCTION_SETTINGS = [
  "ADMIN_EMAILS",
  "DB_POOL_MAX",
  "PRESENCE_VERIFY",
  "PRESENCE_MIN_WRITE_INTERVAL_S",
] as const;

/** The process environment, as the deployed functions read it. */
export const denoEnv: EnvSource = (name) => Deno.env.get(name);

/**
 * Reads and validates the environment, or throws a 500 `missing_env` whose
 * `missing` object says, for each required variable (or pair), whether it is
 * missing or empty.
 *
 * @example
 * ```ts
 * const env = readEnv((name) => Deno.env.get(name));
 * ```
 */
export function readEnv(get: EnvSource): FunctionEnv {
  const value = (name: string) => get(name)?.trim() || undefined;
  const supabaseUrl = value("SUPABASE_URL");
  const anonKey = value("SUPABASE_ANON_KEY");
  const serviceRoleKey = value("SUPABASE_SERVICE_ROLE_KEY") ??
    value("SUPABASE_SERVICE_KEY");
  const dbUrl = value("SUPABASE_DB_URL");
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
  return {
    supabaseUrl: supabaseUrl.replace(/\/+$/, ""),
    anonKey,
    serviceRoleKey,
    dbUrl,
    adminEmails: parseAdminEmails(get("ADMIN_EMAILS")),
    dbPoolMax: _positiveInt(value("DB_POOL_MAX"), 4),
    presenceVerify: value("PRESENCE_VERIFY")?.toLowerCase() === "auth"
      ? "auth"
      : "local",
    presenceMinWriteIntervalS: _positiveInt(
      value("PRESENCE_MIN_WRITE_INTERVAL_S"),
      0,
    ),
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
  return new Set(
    (raw ?? "").split(",").map((s) => s.trim().toLowerCase()).filter(Boolean),
  );
}

function _positiveInt(raw: string | undefined, fallback: number): number {
  const n = Number(raw);
  return Number.isInteger(n) && n > 0 ? n : fallback;
}
