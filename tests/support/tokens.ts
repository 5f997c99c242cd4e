/**
 * Access tokens made by the test itself, signed with the project's JWT
 * secret (HS256), which Supabase Auth accepts: for expired tokens, users who
 * cannot sign in, and attacks.
 *
 * @module
 */
import { decodeJwt, importJWK, type JWK, SignJWT } from "jose";

/** The local stack's (and `supabase start`'s) JWT secret. */
export const LOCAL_JWT_SECRET =
  "super-secret-jwt-token-with-at-least-32-characters-long";

/**
 * An HS256 access token with Supabase Auth's claims for `sub`; `claims`
 * override them (e.g. `{ exp: 1 }` for an expired token).
 */
export async function hs256Token(
  apiUrl: string,
  user: { id: string; email: string },
  claims: Record<string, unknown> = {},
  secret = LOCAL_JWT_SECRET,
): Promise<string> {
  return await new SignJWT(_claims(apiUrl, user, claims))
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .sign(new TextEncoder().encode(secret));
}

/**
 * An ES256 access token with Supabase Auth's claims, signed with `key`
 * (the stack's own, or a foreign one) under `kid`.
 */
export async function es256Token(
  apiUrl: string,
  user: { id: string; email: string },
  key: { privateJwk: JsonWebKey; kid: string },
  claims: Record<string, unknown> = {},
): Promise<string> {
  return await new SignJWT(_claims(apiUrl, user, claims))
    .setProtectedHeader({ alg: "ES256", kid: key.kid, typ: "JWT" })
    .sign(await importJWK(_signingJwk(key.privateJwk), "ES256"));
}

/** The `session_id` claim of a token (no verification). */
export function sessionIdOf(token: string): string {
  return String(decodeJwt(token).session_id);
}

// A stored JWK may carry key_ops/use from its public twin, which WebCrypto
// refuses for signing.
function _signingJwk(jwk: JsonWebKey): JWK {
  const { key_ops: _ops, use: _use, ...rest } = jwk as JWK;
  return rest;
}

// The claims Supabase Auth puts in an access token, overridden by `claims`.
function _claims(
  apiUrl: string,
  user: { id: string; email: string },
  claims: Record<string, unknown>,
): Record<string, unknown> {
  const now = Math.floor(Date.now() / 1000);
  return {
    aud: "authenticated",
    role: "authenticated",
    email: user.email,
    phone: "",
    app_metadata: { provider: "email", providers: ["email"] },
    user_metadata: {},
    aal: "aal1",
    amr: [{ method: "password", timestamp: now }],
    is_anonymous: false,
    iss: `${apiUrl}/auth/v1`,
    sub: user.id,
    iat: now,
    exp: now + 3600,
    ...claims,
  };
}
