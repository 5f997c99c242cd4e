/**
 * Who reads, at the cost of a ping: an asymmetric access token verified
 * locally against the cached JWKS (as presence-ping's fast path does,
 * `_shared/jwt_local.ts`), then proven in one statement that also finds the
 * caller's row: the session still exists and is unexpired, the user is
 * neither banned nor deleted, and the email matched is the one
 * `auth.users` holds now. No call to Auth on the hot path.
 *
 * Auth still decides whenever the fast path cannot: `PRESENCE_VERIFY=auth`,
 * an HS256 token or an unknown key id, a session the statement does not
 * prove (Auth then says why: signed out, banned, deleted), an auth schema
 * this role cannot read, and an email listed in `ADMIN_EMAILS` (whose proof
 * of ownership is judged on Auth's own answer).
 *
 * @module
 */
import postgres from "postgres";
import { authenticate, type Identity } from "../_shared/auth.ts";
import { type OptionalColumns, withColumns } from "../_shared/columns.ts";
import type { Sql } from "../_shared/db.ts";
import type { FunctionEnv } from "../_shared/env.ts";
import { type SessionClaims, verifyAsymmetric } from "../_shared/jwt_local.ts";
import { errorText, logEvent } from "../_shared/log.ts";
import {
  findUsuario,
  MATCH_LEVELS,
  matchCandidate,
  type MatchedRow,
  matchRules,
} from "../_shared/match_user.ts";

/** The reader and its row (`null` when it has none). */
export interface Caller {
  readonly identity: Identity;
  readonly row: MatchedRow | null;
}

/**
 * Authenticates the bearer token and finds the caller's `usuarios` row.
 *
 * @example
 * ```ts
 * const { identity, row } = await readingCaller(sql, bearerToken(req), ctx.env);
 * ```
 */
export async function readingCaller(
  sql: Sql,
  token: string,
  env: FunctionEnv,
): Promise<Caller> {
  const claims = env.presenceVerify === "local"
    ? await verifyAsymmetric(token, env)
    : null;
  const proven = claims ? await _proven(sql, claims, env) : null;
  if (
    proven && !(proven.identity.email !== null &&
      env.adminEmails.has(proven.identity.email))
  ) {
    return proven;
  }
  const identity = await authenticate(token, env);
  const row = await withColumns(
    sql,
    (columns) => findUsuario(sql, identity, columns, matchRules(env)),
  );
  return { identity, row };
}

// Errors that say the auth schema is not readable by this role or not as
// expected (the same set as presence-ping's fast path): Auth decides.
const _SCHEMA_ERRORS = new Set(["42501", "42P01", "42703", "42883", "3F000"]);
let _schemaErrorLogged = false;

async function _proven(
  sql: Sql,
  claims: SessionClaims,
  env: FunctionEnv,
): Promise<Caller | null> {
  try {
    return await withColumns(
      sql,
      (columns) => _statement(sql, claims, env, columns),
    );
  } catch (cause) {
    if (
      !(cause instanceof postgres.PostgresError) ||
      !_SCHEMA_ERRORS.has(cause.code)
    ) throw cause;
    if (!_schemaErrorLogged) {
      _schemaErrorLogged = true;
      logEvent("warn", "Fast path cannot read the auth schema; asking Auth", {
        fn: "presence",
        sqlstate: cause.code,
        cause: errorText(cause),
      });
    }
    return null;
  }
}

async function _statement(
  sql: Sql,
  claims: SessionClaims,
  env: FunctionEnv,
  columns: OptionalColumns,
): Promise<Caller | null> {
  const keys = {
    id: sql`${claims.sub}::uuid`,
    email: sql`(select email from guard)`,
  };
  const rows = await sql<
    {
      email: string | null;
      confirmed: boolean;
      id: string | null;
      rol: string | null;
      level: number | null;
    }[]
  >`
    with guard as (
      select lower(au.email) as email,
             au.email_confirmed_at is not null as confirmed
      from auth.sessions s
      join auth.users au on au.id = s.user_id
      where s.id = ${claims.sessionId}::uuid
        and s.user_id = ${claims.sub}::uuid
        and au.deleted_at is null
        and (au.banned_until is null or au.banned_until <= now())
        and (s.not_after is null or s.not_after > now())
    ),
    c as (${matchCandidate(sql, keys, columns, matchRules(env))})
    select g.email, g.confirmed, u.id, u.rol, c.level
    from guard g
    left join c on true
    left join public.usuarios u on u.id = c.id
  `;
  const r = rows[0];
  if (!r) return null;
  return {
    identity: { id: claims.sub, email: r.email, emailConfirmed: r.confirmed },
    row: r.id === null ? null : {
      id: Number(r.id),
      rol: r.rol,
      level: MATCH_LEVELS[r.level! - 1],
    },
  };
}
