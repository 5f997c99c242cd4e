/**
 * Access tokens made by the test itself, signed with the project's JWT
 * secret (HS256), which Supabase Auth accepts: for expired tokens, users who
 * cannot sign in, and attacks.
 *
 * @module
 */
import { SignJWT } from "jose";

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
  const now = Math.floor(Date.now() / 1000);
  return await new SignJWT({
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
  })
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .sign(new TextEncoder().encode(secret));
}
