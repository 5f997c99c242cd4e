/**
 * What a function's handler works with, passed in by its caller: each
 * `index.ts` wires a fresh set ({@linkcode createDeps}); the local stack
 * and tests make their own, or wrap one. No module of the functions keeps
 * a pool, a client, a key set or a clock of its own.
 *
 * @module
 */
import type { SupabaseClient } from "@supabase/supabase-js";
import {
  AuthClients,
  authenticate,
  AuthSettings,
  type Identity,
} from "./auth.ts";
import { type DatabaseSettings, Pools, type Sql } from "./db.ts";
import type { FunctionEnv } from "./env.ts";
import { KeySets, type SessionClaims } from "./jwt_local.ts";

/** The Supabase Auth admin API (supabase-js `auth.admin`). */
export type AuthAdmin = SupabaseClient["auth"]["admin"];

/** The dependencies of a handler. */
export interface FunctionDeps {
  /**
   * The pool for the environment's database; statements sent through it
   * are cancelled when `signal` (the request's) aborts.
   */
  readonly database: (env: DatabaseSettings, signal?: AbortSignal) => Sql;
  /** Auth's judgement of a token (`auth.getUser`). */
  readonly authenticate: (token: string, env: FunctionEnv) => Promise<Identity>;
  /**
   * Local verification of an asymmetric token against the key set; `null`
   * when Auth must decide.
   */
  readonly verifyLocally: (
    token: string,
    env: FunctionEnv,
  ) => Promise<SessionClaims | null>;
  /** The Auth admin API, with the service role key (auth-sync). */
  readonly authAdmin: (env: FunctionEnv) => AuthAdmin;
  /** Whether Auth confirms sign-ups at once (`mailer_autoconfirm`). */
  readonly autoconfirms: (env: FunctionEnv) => Promise<boolean>;
  /**
   * Whether the project still accepts a service key (legacy or secret):
   * `null`, or the refusal's message (`AuthSettings.keyRefusal`).
   */
  readonly keyRefusal: (
    key: string,
    env: FunctionEnv,
  ) => Promise<string | null>;
  /** The clock, in ms since the epoch, by which every time rule is judged. */
  readonly now: () => number;
}

/** A set of dependencies that owns resources, and ends them. */
export interface OwnedDeps extends FunctionDeps {
  /**
   * Forgets the tokens verified so far, so that each is verified afresh
   * (benchmarks of the signature check).
   */
  readonly forgetVerifiedTokens: () => void;
  /** Ends the pools opened so far (tests, the local stack's shutdown). */
  readonly close: () => Promise<void>;
}

/** Options of {@linkcode createDeps}. */
export interface DepsOptions {
  /** The clock, ms since the epoch; default `Date.now`. */
  readonly now?: () => number;
}

/**
 * A fresh set of dependencies, sharing nothing with any other: its own
 * pools (one per database URL, opened on first use), Auth clients (anon
 * and service, per Auth URL and key), key sets with their verified tokens,
 * Auth-settings answers, all judged by one clock. A deployed isolate makes
 * one in `index.ts` and keeps it for its life.
 *
 * @example
 * ```ts
 * const deps = createDeps();
 * Deno.serve(createPresencePing(denoEnv, deps));
 * // in a test: createDeps({ now: () => t0 + offset }), then `await deps.close()`
 * ```
 */
export function createDeps(options: DepsOptions = {}): OwnedDeps {
  const now = options.now ?? (() => Date.now());
  const pools = new Pools();
  const clients = new AuthClients();
  const keys = new KeySets(now);
  const settings = new AuthSettings(now);
  return {
    database: (env, signal) => pools.database(env, signal),
    authenticate: (token, env) =>
      authenticate(token, clients.client(env, "anon"), now),
    verifyLocally: (token, env) => keys.verify(token, env),
    authAdmin: (env) => clients.client(env, "service").auth.admin,
    autoconfirms: (env) => settings.autoconfirms(env),
    keyRefusal: (key, env) => settings.keyRefusal(env, key),
    now,
    forgetVerifiedTokens: () => keys.forgetVerified(),
    close: () => pools.close(),
  };
}
