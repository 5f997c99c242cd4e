/**
 * Local verification of asymmetric access tokens (ES256, RS256) against the
 * project's published JWKS, cached per isolate: presence-ping's hot path,
 * which then proves in its one SQL statement that the session still exists
 * and the user is neither banned nor deleted (docs/performance.md).
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
  jwksCache,
  type JWKSCacheInput,
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
  /** jose writes the keys and `uat` (when they were fetched, ms) here. */
  readonly fetched: JWKSCacheInput;
}

// jose's remote set caches the keys (JWKS_MAX_AGE_MS), refetches on an
// unknown kid at most every 30 s, and times out like every other call to
// Auth.
const _jwks = new Map<string, _KeySet>();

// The platform's SUPABASE_JWKS, where set, spares the fetch: the same keys
// the endpoint publishes, handed to the function at start. The environment
// is read per request, so sets are kept by their text; tokens verified with
// them are dated by the verification (the set lives as long as the isolate).
const _localJwks = new Map<string, _KeySet>();

function _keySet(env: FunctionEnv): _KeySet {
  if (env.jwks) {
    const text = JSON.stringify(env.jwks.keys);
    let local = _localJwks.get(text);
    if (!local) {
      local = {
        verify: createLocalJWKSet({ keys: [...env.jwks.keys] as JWK[] }),
        fetched: {},
      };
      _localJwks.set(text, local);
    }
    return local;
  }
  let set = _jwks.get(env.supabaseUrl);
  if (!set) {
    const fetched: JWKSCacheInput = {};
    set = {
      fetched,
      verify: createRemoteJWKSet(
        new URL(`${env.supabaseUrl}/auth/v1/.well-known/jwks.json`),
        {
          timeoutDuration: PROVIDER_TIMEOUT_MS,
          cooldownDuration: 30_000,
          cacheMaxAge: JWKS_MAX_AGE_MS,
          // jose fills it in: when the copy in use was fetched.
          [jwksCache]: fetched,
        },
      ),
    };
    _jwks.set(env.supabaseUrl, set);
  }
  return set;
}

function _fetchedAt(keys: _KeySet): number | undefined {
  return "uat" in keys.fetched ? keys.fetched.uat : undefined;
}

// Tokens verified in this isolate, per key set and issuer: a ping with a
// token seen before skips the signature check (the database still proves
// the session on every ping). 10,000 tokens of about 1 KiB at most; no
// entry outlives the copy of the key set that verified it, or the token's
// `exp`.
const _verified = new Map<string, TokenCache<SessionClaims>>();
const _CACHE_ENTRIES = 10_000;

function _cacheFor(env: FunctionEnv): TokenCache<SessionClaims> {
  const key = `${env.supabaseUrl}\n${env.tokenIssuer}`;
  let cache = _verified.get(key);
  if (!cache) {
    cache = new TokenCache({
      maxEntries: _CACHE_ENTRIES,
      maxAgeMs: JWKS_MAX_AGE_MS,
    });
    _verified.set(key, cache);
  }
  return cache;
}

/**
 * Forgets the tokens this isolate verified (all key sets). For benchmarks
 * and tests that need every token to be verified afresh.
 */
export function forgetVerifiedTokens(): void {
  for (const cache of _verified.values()) cache.clear();
}

/**
 * Verifies an asymmetric token locally; `null` when Auth must decide. A
 * token verified before in this isolate, and not past its `exp`, is
 * answered from the cache.
 *
 * @example
 * ```ts
 * const claims = await verifyAsymmetric(token, env);
 * if (!claims) identity = await authenticate(token, env);
 * ```
 */
export async function verifyAsymmetric(
  token: string,
  env: FunctionEnv,
): Promise<SessionClaims | null> {
  const cache = _cacheFor(env);
  const known = cache.get(token);
  if (known) return known;
  let header;
  try {
    header = decodeProtectedHeader(token);
  } catch {
    return null;
  }
  if (!header.kid || !_ALGORITHMS.includes(header.alg ?? "")) return null;
  try {
    // Auth issues access tokens with `iss` = its own URL and `aud` =
    // "authenticated"; a token signed by the same keys for another issuer
    // or audience is left to Auth.
    const keys = _keySet(env);
    // The copy in use before the call, if any, is the oldest one the
    // signature can have been checked against (a reload may replace it
    // during the call): the cache entry is dated by it.
    const fetchedBefore = _fetchedAt(keys);
    const { payload } = await jwtVerify(token, keys.verify, {
      algorithms: _ALGORITHMS,
      issuer: env.tokenIssuer,
      audience: ACCESS_TOKEN_AUDIENCE,
    });
    const sub = payload.sub;
    const sessionId = payload.session_id;
    if (
      typeof sub !== "string" || !_UUID.test(sub) ||
      typeof sessionId !== "string" || !_UUID.test(sessionId)
    ) return null;
    const claims = { sub, sessionId };
    // Without `exp` a token would be good for ever: verified every time.
    if (typeof payload.exp === "number") {
      const now = Date.now();
      cache.set(
        token,
        claims,
        payload.exp,
        now,
        fetchedBefore ?? _fetchedAt(keys) ?? now,
      );
    }
    return claims;
  } catch (error) {
    if (error instanceof errors.JWKSTimeout || error instanceof TypeError) {
      throw providerUnavailable(error);
    }
    return null;
  }
}
