/**
 * Sessions, access tokens and the refresh-token grant, following Supabase
 * Auth's token service (internal/tokens/service.go) with legacy 12-character
 * refresh tokens (refresh token algorithm version 0/1, the default).
 *
 * @module
 */
import type { AuthContext } from "./context.ts";
import { REFRESH_TOKEN_REUSE_INTERVAL } from "./context.ts";
import { ApiError, badRequest } from "./errors.ts";
import type { AccessTokenClaims } from "./jwt.ts";
import { signEs256 } from "./jwt.ts";
import { sortedKeys, userJson } from "./present.ts";
import {
  type Db,
  findActiveRefreshToken,
  findRefreshToken,
  findSession,
  findUserById,
  insertRefreshToken,
  insertSession,
  iso,
  msOf,
  revokeRefreshToken,
  revokeSessionRefreshTokens,
  type SessionRow,
  touchSession,
  updateUser,
  type UserRow,
} from "./store.ts";
import { isLegacyRefreshToken } from "./passwords.ts";
import type { WeakPasswordError } from "./errors.ts";

/** The body of a successful sign-in, sign-up or refresh. */
export interface TokenResponse {
  access_token: string;
  token_type: "bearer";
  expires_in: number;
  expires_at: number;
  refresh_token: string;
  user: Record<string, unknown>;
  weak_password?: { message: string; reasons: string[] };
}

/** A token response and the `sb-auth-*` headers Supabase Auth adds to it. */
export interface IssuedTokens {
  body: TokenResponse;
  headers: Record<string, string>;
}

/**
 * Signs an access token for `user` in `session` with exactly the claims
 * Supabase Auth puts in one, in its order.
 */
export async function generateAccessToken(
  ctx: AuthContext,
  user: UserRow,
  session: SessionRow,
  db: Db = ctx.sql,
): Promise<{ token: string; expiresAt: number }> {
  const iat = Math.floor(ctx.now() / 1000);
  const exp = iat + ctx.jwtExpiry;
  // The session's AMR claims (password, or otp for a mailed link or code),
  // each stamped with its time; a session older than the table's first
  // use began with a password sign-in at its creation.
  const claimed = await db<{ method: string; at: number }[]>`
    select authentication_method as method,
      floor(extract(epoch from updated_at))::float8 as at
    from auth.mfa_amr_claims where session_id = ${session.id}::uuid
    order by updated_at`;
  const createdAt = session.created_at ? msOf(session.created_at) : ctx.now();
  const amr = claimed.length
    ? claimed.map((c) => ({ method: c.method, timestamp: Number(c.at) }))
    : [{ method: "password", timestamp: Math.floor(createdAt / 1000) }];
  const claims: AccessTokenClaims = {
    iss: ctx.issuer,
    sub: user.id,
    aud: user.aud ?? "",
    exp,
    iat,
    email: user.email ?? "",
    phone: user.phone ?? "",
    app_metadata: sortedKeys(user.raw_app_meta_data) as Record<
      string,
      unknown
    >,
    user_metadata: sortedKeys(user.raw_user_meta_data) as Record<
      string,
      unknown
    >,
    role: user.role ?? "",
    aal: session.aal ?? "aal1",
    amr,
    session_id: session.id,
    is_anonymous: user.is_anonymous ?? false,
  };
  const token = await signEs256(
    claims,
    ctx.signingKey.privateJwk,
    ctx.signingKey.kid,
  );
  return { token, expiresAt: exp };
}

/**
 * How a session was authenticated, as its `amr` claim names it
 * (`models.AuthenticationMethod`): a password, a link or code (`otp`), or
 * the flow a PKCE code was exchanged for.
 */
export type SessionMethod =
  | "password"
  | "otp"
  | "email/signup"
  | "recovery"
  | "magiclink"
  | "email_change";

/**
 * Starts a session for `user` (password grant or sign-up): a session row, a
 * first refresh token, `last_sign_in_at`, and a signed access token. Run it
 * inside the caller's transaction.
 */
export async function issueSession(
  ctx: AuthContext,
  tx: Db,
  userId: string,
  client: { userAgent: string | null; ip: string | null },
  weakPassword?: WeakPasswordError,
  method: SessionMethod = "password",
): Promise<IssuedTokens> {
  const now = ctx.now();
  const sessionId = await insertSession(tx, {
    userId,
    userAgent: client.userAgent,
    ip: client.ip,
    now,
  });
  await tx`
    insert into auth.mfa_amr_claims
      (id, session_id, authentication_method, created_at, updated_at)
    values (gen_random_uuid(), ${sessionId}::uuid, ${method}::text,
      ${iso(now)}::timestamptz, ${iso(now)}::timestamptz)`;
  const refresh = await insertRefreshToken(tx, {
    userId,
    sessionId,
    parent: null,
    now,
  });
  await updateUser(
    tx,
    userId,
    { last_sign_in_at: new Date(now).toISOString() },
    now,
  );
  const user = (await findUserById(tx, userId))!;
  const session = (await findSession(tx, sessionId))!;
  const { token, expiresAt } = await generateAccessToken(
    ctx,
    user,
    session,
    tx,
  );
  const body = _tokenBody(ctx, token, expiresAt, refresh.token, user);
  if (weakPassword) {
    body.weak_password = {
      message: weakPassword.message,
      reasons: weakPassword.reasons,
    };
  }
  return {
    body,
    headers: {
      "sb-auth-user-id": userId,
      "sb-auth-session-id": sessionId,
      "sb-auth-refresh-token-prefix": refresh.token.slice(0, 5),
    },
  };
}

/**
 * The refresh_token grant. Rotation as Supabase Auth does it: the presented
 * token is revoked and a child issued; presenting a revoked token again is
 * allowed while it is the parent of the session's active token (the client
 * lost the answer) or within the reuse interval since it was revoked, and
 * otherwise revokes every token of the session and answers 400
 * `refresh_token_already_used`.
 */
export async function refreshTokenGrant(
  ctx: AuthContext,
  refreshToken: string,
  client: { userAgent: string | null; ip: string | null },
): Promise<IssuedTokens> {
  if (refreshToken.length !== 12 || !isLegacyRefreshToken(refreshToken)) {
    // The stand-in never issues the newer signed (v2) tokens, so any other
    // shape fails to parse exactly as a forged v2 token would.
    throw badRequest("validation_failed", "Refresh token is not valid");
  }
  const notFound = () =>
    badRequest(
      "refresh_token_not_found",
      "Invalid Refresh Token: Refresh Token Not Found",
    );

  const found = await findRefreshToken(ctx.sql, refreshToken);
  if (!found) throw notFound();
  const owner = await findUserById(ctx.sql, found.user_id);
  if (!owner) throw notFound();
  if (isBanned(owner, ctx.now())) {
    throw badRequest("user_banned", "Invalid Refresh Token: User Banned");
  }
  const session = found.session_id
    ? await findSession(ctx.sql, found.session_id)
    : null;
  if (!session) {
    await ctx
      .sql`delete from auth.refresh_tokens where id = ${found.id}::bigint`;
    throw badRequest(
      "session_not_found",
      "Invalid Refresh Token: No Valid Session Found",
    );
  }
  if (session.not_after && ctx.now() > msOf(session.not_after)) {
    throw badRequest(
      "session_expired",
      "Invalid Refresh Token: Session Expired",
    );
  }

  // Reuse detection must commit its revocations and still fail, so the
  // transaction returns the error instead of throwing it.
  const outcome = await ctx.sql.begin(
    async (tx): Promise<IssuedTokens | ApiError> => {
      // The user, then the session, then its token: the order of a
      // password change or a user's deletion (the user's row, then its
      // sessions, whose deletion cascades to their tokens) and of a
      // sign-out (session, tokens). Any other order deadlocked with them on
      // PostgreSQL (two tabs: one signs out or changes the password while
      // the other refreshes). A token never changes session or user.
      await tx`select 1 from auth.users where id = ${found.user_id}::uuid
               for no key update`;
      const locked = await findSession(tx, session.id, true);
      if (!locked) {
        return badRequest(
          "session_not_found",
          "Invalid Refresh Token: No Valid Session Found",
        );
      }
      const token = await findRefreshToken(tx, refreshToken, true);
      if (!token) return notFound();
      const now = ctx.now();
      let issued: string | null = null;
      const headers: Record<string, string> = {
        "sb-auth-user-id": token.user_id,
        "sb-auth-session-id": locked.id,
      };
      if (token.revoked) {
        const active = await findActiveRefreshToken(tx, locked.id);
        if (active && active.parent === token.token) {
          issued = active.token;
        } else {
          const reuseUntil = (token.updated_at ? msOf(token.updated_at) : 0) +
            REFRESH_TOKEN_REUSE_INTERVAL * 1000;
          if (now > reuseUntil) {
            await revokeSessionRefreshTokens(tx, locked.id, now);
            return badRequest(
              "refresh_token_already_used",
              "Invalid Refresh Token: Already Used",
            );
          }
        }
      }
      if (issued === null) {
        await revokeRefreshToken(tx, token.id, now);
        const child = await insertRefreshToken(tx, {
          userId: token.user_id,
          sessionId: locked.id,
          parent: token.token,
          now,
        });
        // GrantRefreshTokenSwap re-saves last_sign_in_at, which bumps
        // updated_at even though the value is unchanged.
        await updateUser(tx, token.user_id, {}, now);
        issued = child.token;
        headers["sb-auth-refresh-token-reuse"] = "false";
      }
      headers["sb-auth-refresh-token-prefix"] = issued.slice(0, 5);
      const user = await findUserById(tx, token.user_id);
      if (!user) return notFound();
      const { token: access, expiresAt } = await generateAccessToken(
        ctx,
        user,
        locked,
        tx,
      );
      await touchSession(tx, locked.id, { ...client, now });
      return {
        body: _tokenBody(ctx, access, expiresAt, issued, user),
        headers,
      };
    },
  );
  if (outcome instanceof ApiError) throw outcome;
  return outcome as IssuedTokens;
}

/** Whether `banned_until` is still in the future (`User.IsBanned`). */
export function isBanned(user: UserRow, nowMs: number): boolean {
  return !!user.banned_until && nowMs < msOf(user.banned_until);
}

function _tokenBody(
  ctx: AuthContext,
  token: string,
  expiresAt: number,
  refreshToken: string,
  user: UserRow,
): TokenResponse {
  return {
    access_token: token,
    token_type: "bearer",
    expires_in: expiresAt - Math.floor(ctx.now() / 1000),
    expires_at: expiresAt,
    refresh_token: refreshToken,
    user: userJson(user),
  };
}
