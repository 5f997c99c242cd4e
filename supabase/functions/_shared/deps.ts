/**
 * What a function's handler works with, passed in by its caller: each
 * `index.ts` wires the real ones ({@linkcode realDeps}); the local stack
 * and tests may pass their own. Handlers keep no module state.
 *
 * @module
 */
import { authenticate, type Identity } from "./auth.ts";
import { database, type Sql } from "./db.ts";
import type { FunctionEnv } from "./env.ts";
import { type SessionClaims, verifyAsymmetric } from "./jwt_local.ts";

/** The dependencies of a handler. */
export interface FunctionDeps {
  /**
   * The pool for the environment's database; statements sent through it
   * are cancelled when `signal` (the request's) aborts.
   */
  readonly database: (env: FunctionEnv, signal?: AbortSignal) => Sql;
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
  /** The clock, in ms since the epoch. */
  readonly now: () => number;
}

/**
 * The real dependencies: the isolate's pools (`db.ts`, one per database
 * URL), Supabase Auth (`auth.ts`), the JWKS (`jwt_local.ts`, its key sets
 * and verified tokens kept per Auth URL and issuer) and the system clock.
 * Those module caches are keyed by what they were built from, so handlers
 * over different environments never share the wrong one.
 */
export const realDeps: FunctionDeps = {
  database,
  authenticate,
  verifyLocally: verifyAsymmetric,
  now: () => Date.now(),
};
