/**
 * The Edge Functions the local gateway serves: the very handlers that
 * deploy, each with the environment `supabase functions serve` would give
 * it, and its `verify_jwt` setting from `supabase/config.toml`.
 *
 * @module
 */
import { parse as parseDotenv } from "dotenv";
import { parse as parseToml } from "smol-toml";
import { createAuthSync } from "../supabase/functions/auth-sync/handler.ts";
import type { FunctionDeps } from "../supabase/functions/_shared/deps.ts";
import { FUNCTION_SETTINGS } from "../supabase/functions/_shared/env.ts";
import { createPresence } from "../supabase/functions/presence/handler.ts";
import { createPresencePing } from "../supabase/functions/presence-ping/handler.ts";
import { LOCAL_ADMIN_EMAILS, LOCAL_USERNAME_MATCH_DOMAINS } from "./fixture.ts";
import { PROJECT_DIR } from "./migrate.ts";

/** A served function. */
export interface LocalFunction {
  readonly handler: (req: Request) => Promise<Response>;
  /** Whether the gateway must check the JWT before the function runs. */
  readonly verifyJwt: boolean;
}

/** What the functions' environment is built from. */
export interface FunctionEnvInput {
  apiUrl: string;
  dbUrl: string;
  anonKey: string;
  serviceRoleKey: string;
  /** `sb_publishable_…`, passed as `SUPABASE_PUBLISHABLE_KEYS` like the CLI does. */
  publishableKey?: string;
  /** `sb_secret_…`, passed as `SUPABASE_SECRET_KEYS` like the CLI does. */
  secretKey?: string;
  /** Overrides applied last (tests). */
  overrides?: Record<string, string>;
  /** `supabase/functions/.env`'s variables (default: read from the file). */
  dotenv?: Record<string, string>;
  /** Told what of `.env` is left out, one line each. */
  log?: (line: string) => void;
}

/**
 * The functions' environment, in increasing precedence: the `SUPABASE_*`
 * variables of this stack (and the fixture's `ADMIN_EMAILS` and
 * `USERNAME_MATCH_DOMAINS`), then
 * `supabase/functions/.env` (but `SUPABASE_*` and `PRESENCE_DB_URL`:
 * the stack's own database, always), then the caller's environment for the
 * functions' own settings, then `overrides`.
 */
export function functionEnv(input: FunctionEnvInput): Map<string, string> {
  const env = new Map<string, string>([
    ["SUPABASE_URL", input.apiUrl],
    ["SUPABASE_ANON_KEY", input.anonKey],
    ["SUPABASE_SERVICE_ROLE_KEY", input.serviceRoleKey],
    ["SUPABASE_DB_URL", input.dbUrl],
    // `supabase functions serve` passes the new keys as JSON objects of
    // name to key, as hosted projects do.
    ...(input.publishableKey
      ? [[
        "SUPABASE_PUBLISHABLE_KEYS",
        JSON.stringify({ default: input.publishableKey }),
      ] as [string, string]]
      : []),
    ...(input.secretKey
      ? [[
        "SUPABASE_SECRET_KEYS",
        JSON.stringify({ default: input.secretKey }),
      ] as [string, string]]
      : []),
    ["ADMIN_EMAILS", LOCAL_ADMIN_EMAILS],
    ["USERNAME_MATCH_DOMAINS", LOCAL_USERNAME_MATCH_DOMAINS],
  ]);
  for (const [k, v] of Object.entries(input.dotenv ?? _readDotenv())) {
    // Like `supabase functions serve`: the platform's own names are reserved.
    if (k.startsWith("SUPABASE_")) continue;
    // A hosted project's pooler string kept in .env would point the local
    // functions, and the fixture's known-password administrator, at that
    // database while the banner names the stack's.
    if (k === "PRESENCE_DB_URL") {
      input.log?.(
        "supabase/functions/.env sets PRESENCE_DB_URL, which npm start ignores: the local functions use the stack's database (the DB URL below)",
      );
      continue;
    }
    env.set(k, v);
  }
  for (const name of FUNCTION_SETTINGS) {
    const value = Deno.env.get(name);
    if (value !== undefined) env.set(name, value);
  }
  for (const [k, v] of Object.entries(input.overrides ?? {})) env.set(k, v);
  return env;
}

/** Reads `verify_jwt` of each function from `supabase/config.toml` (default true, as the CLI). */
export function verifyJwtSettings(): Record<string, boolean> {
  const config = parseToml(
    Deno.readTextFileSync(`${PROJECT_DIR}supabase/config.toml`),
  ) as { functions?: Record<string, { verify_jwt?: boolean }> };
  const out: Record<string, boolean> = {};
  for (const [name, fn] of Object.entries(config.functions ?? {})) {
    out[name] = fn.verify_jwt ?? true;
  }
  return out;
}

/**
 * Builds the served functions over one environment and one set of
 * dependencies (`createDeps()`: the stack's database and Auth, reached
 * through the environment's URLs), as `index.ts` wires them when deployed.
 * The caller owns `deps`, and closes it when the functions stop.
 *
 * @example
 * ```ts
 * const deps = createDeps();
 * const functions = localFunctions(env, deps);
 * // ... on shutdown: await deps.close();
 * ```
 */
export function localFunctions(
  env: Map<string, string>,
  deps: FunctionDeps,
): Record<string, LocalFunction> {
  const get = (name: string) => env.get(name);
  const verify = verifyJwtSettings();
  return {
    "presence-ping": {
      handler: createPresencePing(get, deps),
      verifyJwt: verify["presence-ping"] ?? true,
    },
    "auth-sync": {
      handler: createAuthSync(get, deps),
      verifyJwt: verify["auth-sync"] ?? true,
    },
    presence: {
      handler: createPresence(get, deps),
      verifyJwt: verify["presence"] ?? true,
    },
  };
}

function _readDotenv(): Record<string, string> {
  try {
    return parseDotenv(
      Deno.readTextFileSync(`${PROJECT_DIR}supabase/functions/.env`),
    );
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return {};
    throw error;
  }
}
