/**
 * Local verification of asymmetric access tokens (ES256, RS256) against the
 * project's published JWKS, cached by a {@linkcode KeySets}: presence-ping's
 * hot path, which then proves in its one SQL statement that the session
 * still exists and the user is neither banned nor deleted
 * (docs/performance.md).
 *
 * Only a success is decided here. Anything else — HS256, a `kid` that is
 * not published, a bad signature, an expired token — returns `null` and the
 * caller asks Auth (`getUser`), so both paths give the same answers for the
 * same tokens. A JWKS that cannot be fetched in time means Auth is down:
 * 503 at once, rather than a second timeout on `getUser`.
 *
 * @module
 */
import {
  createLocalJWKSet,
  createRemoteJWKSet,
  decodeProtectedHeader,
  errors,
  type JWK,
  jwtVerify,
} from "jose";
import { PROVIDER_TIMEOUT_MS, providerUnavailable } from "./auth.ts";
import type { FunctionEnv } from "./env.ts";
import { TokenCache } from "./token_cache.ts";

/** What a locally verified token says, still to be checked against the database. */
export interface SessionClaims {
  /** `sub`: the identity's id. */
  readonly sub: string;
  /** `session_id`: the Auth session the token belongs to. */
  readonly sessionId: string;
}

const _ALGORITHMS = ["ES256", "RS256"];

/** The `aud` of the access tokens Supabase Auth issues to users. */
export const ACCESS_TOKEN_AUDIENCE = "authenticated";
const _UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * How long a fetched JWKS is used (10 min): a signing key withdrawn from the
 * JWKS is honoured at most this long after the withdrawal (plus the fetch's
 * own at most 5 s), by the key set and the verified-token cache alike.
 */
export const JWKS_MAX_AGE_MS = 600_000;

interface _KeySet {
  readonly verify:
    | ReturnType<typeof createRemoteJWKSet>
    | ReturnType<typeof createLocalJWKSet>;
  /** Fetches the keys again; a set from `SUPABASE_JWKS` has none. */
  readonly reload?: () => Promise<void>;
  /**
   * When the copy in use was fetched, by the owner's clock (`undefined`
   * until the first fetch); for a set from `SUPABASE_JWKS`, when this
   * instance first used it.
   */
  fetchedAt?: number;
}

/** How many verified tokens a handler set keeps (first in, first out). */
export const TOKEN_CACHE_ENTRIES = 10_000;

/**
 * The key sets a handler set verifies with, and the tokens it verified:
 * `deps.ts` holds one per handler set, with its clock.
 *
 * Fetched key sets are kept per Auth URL and used for
 * {@linkcode JWKS_MAX_AGE_MS} by `now`; jose refetches on an unknown `kid`
 * at most every 30 s, and times out like every other call to Auth. The
 * platform's `SUPABASE_JWKS`, where set, spares the first fetch: the same
 * keys the endpoint publishes, handed to the function at start. That copy
 * is used for {@linkcode JWKS_MAX_AGE_MS} from its first use, as a fetched
 * one would be, and the endpoint's after that: an isolate that outlives a
 * key's withdrawal stops honouring it all the same. The environment is read
 * per request, so those sets are kept by their text.
 *
 * Verified tokens are kept per Auth URL and issuer: a ping with a token seen
 * before skips the signature check (the database still proves the session
 * on every ping). 10,000 tokens of about 1 KiB at most per issuer; no entry
 * outlives the copy of the key set that verified it, or the token's `exp`.
 */
export class KeySets {
  readonly #now: () => number;
  readonly #remote = new Map<string, _KeySet>();
  readonly #local = new Map<string, _KeySet>();
  readonly #verified = new Map<string, TokenCache<SessionClaims>>();

  /** Key sets judged by the clock `now` (ms since the epoch). */
  constructor(now: () => number) {
    this.#now = now;
  }

  /**
   * Verifies an asymmetric token locally; `null` when Auth must decide. A
   * token verified before by this instance, and not past its `exp`, is
   * answered from the cache.
   *
   * @example
   * ```ts
   * const claims = await keys.verify(token, env);
   * if (!claims) identity = await deps.authenticate(token, env);
   * ```
   */
  async verify(
    token: string,
    env: FunctionEnv,
  ): Promise<SessionClaims | null> {
    const cache = this.#cacheFor(env);
    const known = cache.get(token, this.#now());
    if (known) return known;
    let header;
    try {
      header = decodeProtectedHeader(token);
    } catch {
      return null;
    }
    if (!header.kid || !_ALGORITHMS.includes(header.alg ?? "")) return null;
    try {
      const keys = await this.#fresh(env);
      // The copy in use before the call is the oldest one the signature
      // can have been checked against (jose may fetch a newer one during
      // the call, on an unknown kid): the cache entry is dated by it.
      const fetchedBefore = keys.fetchedAt;
      // Auth issues access tokens with `iss` = its own URL, `aud` =
      // "authenticated" and an `exp`; a token signed by the same keys for
      // another issuer or audience, or without an expiry (good for ever),
      // is left to Auth.
      const { payload } = await jwtVerify(token, keys.verify, {
        algorithms: _ALGORITHMS,
        issuer: env.tokenIssuer,
        audience: ACCESS_TOKEN_AUDIENCE,
        requiredClaims: ["exp"],
        currentDate: new Date(this.#now()),
      });
      const sub = payload.sub;
      const sessionId = payload.session_id;
      if (
        typeof sub !== "string" || !_UUID.test(sub) ||
        typeof sessionId !== "string" || !_UUID.test(sessionId)
      ) return null;
      const claims = { sub, sessionId };
      const now = this.#now();
      cache.set(token, claims, payload.exp!, now, fetchedBefore ?? now);
      return claims;
    } catch (error) {
      if (error instanceof errors.JWKSTimeout || error instanceof TypeError) {
        // Named for the log: fetch's own words ("fetch failed") say neither
        // what was fetched nor why.
        const why = (error as Error).cause;
        throw providerUnavailable(
          new Error(
            `key set not fetched from ${_jwksUrl(env)}: ${
              (error as Error).message
            }${why instanceof Error ? ` (${why.message})` : ""}`,
            { cause: error },
          ),
        );
      }
      return null;
    }
  }

  /**
   * Forgets the tokens verified so far (all key sets). For benchmarks that
   * need every token to be verified afresh.
   */
  forgetVerified(): void {
    for (const cache of this.#verified.values()) cache.clear();
  }

  // The key set for `env`, a fetched one refetched once its copy is
  // JWKS_MAX_AGE_MS old by this instance's clock (jose's own age limit is
  // off: it reads the system clock).
  async #fresh(env: FunctionEnv): Promise<_KeySet> {
    const set = this.#keySet(env);
    if (!set.reload) return set;
    const at = this.#now();
    if (set.fetchedAt === undefined || at >= set.fetchedAt + JWKS_MAX_AGE_MS) {
      await set.reload();
      set.fetchedAt = at;
    }
    return set;
  }

  #keySet(env: FunctionEnv): _KeySet {
    if (env.jwks) {
      const text = JSON.stringify(env.jwks.keys);
      let local = this.#local.get(text);
      if (!local) {
        const keys = [...env.jwks.keys] as JWK[];
        local = { verify: createLocalJWKSet({ keys }), fetchedAt: this.#now() };
        this.#local.set(text, local);
      }
      if (this.#now() < local.fetchedAt! + JWKS_MAX_AGE_MS) return local;
    }
    let set = this.#remote.get(env.supabaseUrl);
    if (!set) {
      const verify = createRemoteJWKSet(
        new URL(_jwksUrl(env)),
        {
          timeoutDuration: PROVIDER_TIMEOUT_MS,
          cooldownDuration: 30_000,
          cacheMaxAge: Infinity,
        },
      );
      set = { verify, reload: () => verify.reload() };
      this.#remote.set(env.supabaseUrl, set);
    }
    return set;
  }

  #cacheFor(env: FunctionEnv): TokenCache<SessionClaims> {
    const key = `${env.supabaseUrl}\n${env.tokenIssuer}`;
    let cache = this.#verified.get(key);
    if (!cache) {
      cache = new TokenCache({
        maxEntries: TOKEN_CACHE_ENTRIES,
        maxAgeMs: JWKS_MAX_AGE_MS,
      });
      this.#verified.set(key, cache);
    }
    return cache;
  }
}

// Where Auth publishes its key set.
function _jwksUrl(env: FunctionEnv): string {
  return `${env.supabaseUrl}/auth/v1/.well-known/jwks.json`;
}
