/**
 * Local verification of asymmetric access tokens (ES256, RS256) against the
 * project's published JWKS, cached per isolate: presence-ping's hot path,
 * which then proves in its one SQL statement that the session still exists
 * and the user is neither banned nor deleted (DECISIONS.md).
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
  createRemoteJWKSet,
  decodeProtectedHeader,
  errors,
  jwtVerify,
} from "jose";
import { PROVIDER_TIMEOUT_MS, providerUnavailable } from "./auth.ts";
import type { FunctionEnv } from "./env.ts";

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

// jose's remote set caches the keys (10 min), refetches on an unknown kid at
// most every 30 s, and times out like every other call to Auth.
const _jwks = new Map<string, ReturnType<typeof createRemoteJWKSet>>();

function _keySet(env: FunctionEnv): ReturnType<typeof createRemoteJWKSet> {
  let set = _jwks.get(env.supabaseUrl);
  if (!set) {
    set = createRemoteJWKSet(
      new URL(`${env.supabaseUrl}/auth/v1/.well-known/jwks.json`),
      {
        timeoutDuration: PROVIDER_TIMEOUT_MS,
        cooldownDuration: 30_000,
        cacheMaxAge: 600_000,
      },
    );
    _jwks.set(env.supabaseUrl, set);
  }
  return set;
}

/**
 * Verifies an asymmetric token locally; `null` when Auth must decide.
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
    const { payload } = await jwtVerify(token, _keySet(env), {
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
    return { sub, sessionId };
  } catch (error) {
    if (error instanceof errors.JWKSTimeout || error instanceof TypeError) {
      throw providerUnavailable(error);
    }
    return null;
  }
}
