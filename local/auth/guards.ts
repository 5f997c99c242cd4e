/**
 * Bearer-token checks in front of the user and admin routes, as Supabase
 * Auth's `requireAuthentication` and `requireAdminCredentials` middlewares
 * (internal/api/auth.go, middleware.go) perform them.
 *
 * What Supabase Auth does with a banned user's existing tokens: banning
 * (`ban_duration` on the admin API) only writes `banned_until`; it does not
 * revoke sessions. Every route behind `requireAuthentication` (GET/PUT
 * /user, /logout, ...) then answers 403 `user_banned` "User is banned" while
 * the ban lasts, the refresh grant answers 400 `user_banned` "Invalid Refresh
 * Token: User Banned", and the password grant 400 `user_banned` "User is
 * banned". Tokens work again once the ban ends or is lifted with "none".
 *
 * @module
 */
import type { AuthContext } from "./context.ts";
import { ADMIN_ROLES, AUD_HEADER, DEFAULT_AUD } from "./context.ts";
import { ApiError, badRequest, forbidden } from "./errors.ts";
import { canonicalUuid, isUuid } from "./http.ts";
import { type AccessTokenClaims, JwtError, verifyAccessToken } from "./jwt.ts";
import {
  findSession,
  findUserById,
  msOf,
  NIL_UUID,
  type SessionRow,
  type UserRow,
} from "./store.ts";
import { isBanned } from "./tokens.ts";

/** What a verified bearer token resolved to. */
export interface Principal {
  /** The raw token. */
  token: string;
  /** Its verified claims. */
  claims: AccessTokenClaims;
  /** The user named by `sub`. */
  user: UserRow;
  /** The session named by `session_id`, `null` when the token has none. */
  session: SessionRow | null;
}

/** The bearer token of a request (`extractBearerToken`). */
export function bearerToken(req: Request): string {
  const match = /^bearer (\S+)$/i.exec(req.headers.get("authorization") ?? "");
  if (!match) {
    throw new ApiError(
      401,
      "no_authorization",
      "This endpoint requires a valid Bearer token",
    );
  }
  return match[1];
}

/** Verifies a token and maps failures to 403 `bad_jwt` (`parseJWTClaims`). */
export async function parseClaims(
  ctx: AuthContext,
  token: string,
): Promise<AccessTokenClaims> {
  try {
    return await verifyAccessToken(token, {
      jwtSecret: ctx.jwtSecret,
      publicJwks: ctx.publicJwks,
      now: ctx.now,
    });
  } catch (err) {
    if (!(err instanceof JwtError)) throw err;
    throw forbidden(
      "bad_jwt",
      `invalid JWT: unable to parse or verify signature, ${err.message}`,
    );
  }
}

/**
 * Loads the user of `sub` and the session of `session_id`
 * (`maybeLoadUserOrSession`).
 */
export async function loadUserAndSession(
  ctx: AuthContext,
  claims: AccessTokenClaims,
): Promise<{ user: UserRow; session: SessionRow | null }> {
  const sub = typeof claims.sub === "string" ? claims.sub : "";
  if (sub === "") {
    throw forbidden("bad_jwt", "invalid claim: missing sub claim");
  }
  if (!isUuid(sub)) {
    throw badRequest("bad_jwt", "invalid claim: sub claim must be a UUID");
  }
  const user = await findUserById(ctx.sql, canonicalUuid(sub));
  if (!user) {
    throw forbidden(
      "user_not_found",
      "User from sub claim in JWT does not exist",
    );
  }
  let session: SessionRow | null = null;
  const sid = typeof claims.session_id === "string" ? claims.session_id : "";
  if (sid !== "" && sid !== NIL_UUID) {
    if (!isUuid(sid)) {
      throw forbidden(
        "bad_jwt",
        "invalid claim: session_id claim must be a UUID",
      );
    }
    session = await findSession(ctx.sql, canonicalUuid(sid));
    if (!session) {
      throw forbidden(
        "session_not_found",
        "Session from session_id claim in JWT does not exist",
      );
    }
  }
  return { user, session };
}

/** `requireAuthentication`: a valid token of an existing, unbanned user. */
export async function authenticate(
  ctx: AuthContext,
  req: Request,
): Promise<Principal> {
  const token = bearerToken(req);
  const claims = await parseClaims(ctx, token);
  const { user, session } = await loadUserAndSession(ctx, claims);
  if (isBanned(user, ctx.now())) {
    throw forbidden("user_banned", "User is banned");
  }
  return { token, claims, user, session };
}

/**
 * `requireAdminCredentials`: a valid token whose role is an admin role; a
 * token tied to a session must still have a live session.
 */
export async function requireAdmin(
  ctx: AuthContext,
  req: Request,
): Promise<AccessTokenClaims> {
  const claims = await parseClaims(ctx, bearerToken(req));
  const sid = typeof claims.session_id === "string" ? claims.session_id : "";
  if (sid !== "" && sid !== NIL_UUID) {
    const { session } = await loadUserAndSession(ctx, claims);
    if (session?.not_after && ctx.now() > msOf(session.not_after)) {
      throw forbidden("session_expired", "Session is no longer valid");
    }
  }
  if (typeof claims.role !== "string" || !ADMIN_ROLES.includes(claims.role)) {
    throw forbidden("not_admin", "User not allowed");
  }
  return claims;
}

/**
 * The audience a request works in (`requestAud`): the X-JWT-AUD header, else
 * the token's first audience unless an admin role holds it, else the default.
 */
export function requestAud(
  req: Request,
  claims: AccessTokenClaims | null,
): string {
  const header = req.headers.get(AUD_HEADER);
  if (header) return header;
  if (claims && !ADMIN_ROLES.includes(String(claims.role ?? ""))) {
    const first = firstAud(claims);
    if (first) return first;
  }
  return DEFAULT_AUD;
}

/** The first entry of the `aud` claim, `""` when there is none. */
export function firstAud(claims: AccessTokenClaims): string {
  const aud = claims.aud;
  if (typeof aud === "string") return aud;
  return Array.isArray(aud) && aud.length ? aud[0] : "";
}
