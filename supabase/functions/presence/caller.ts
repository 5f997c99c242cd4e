/**
 * Who reads, at the cost of a ping: an asymmetric access token verified
 * locally against the cached JWKS (as presence-ping's fast path does,
 * `_shared/jwt_local.ts`), then proven by the database function
 * `presence.reader`, one short statement that also finds the caller's row
 * by the same rules as a ping (`presence.match_usuario`): the session still exists and is unexpired, the user is
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
import { isListedAdminEmail } from "../_shared/admin.ts";
import type { Identity } from "../_shared/auth.ts";
import {
  domainsLiteral,
  isAuthSchemaError,
  ONE_FLIGHT,
  uuidLiteral,
} from "../_shared/db_function.ts";
import type { FunctionDeps } from "../_shared/deps.ts";
import type { Sql } from "../_shared/db.ts";
import type { FunctionEnv } from "../_shared/env.ts";
import type { SessionClaims } from "../_shared/jwt_local.ts";
import { errorText, logEvent } from "../_shared/log.ts";
import {
  findUsuario,
  MATCH_LEVELS,
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
 * const { identity, row } = await readingCaller(sql, bearerToken(req), ctx.env, deps);
 * ```
 */
export async function readingCaller(
  sql: Sql,
  token: string,
  env: FunctionEnv,
  deps: ReaderDeps,
): Promise<Caller> {
  const claims = env.presenceVerify === "local"
    ? await deps.verifyLocally(token, env)
    : null;
  const proven = claims ? await _proven(sql, claims, env, deps) : null;
  if (proven && !isListedAdminEmail(proven.identity.email, env.adminEmails)) {
    return proven;
  }
  const identity = await deps.authenticate(token, env);
  const row = await findUsuario(sql, identity, matchRules(env));
  return { identity, row };
}

/** What {@linkcode readingCaller} works with, from its handler. */
export interface ReaderDeps
  extends Pick<FunctionDeps, "authenticate" | "verifyLocally"> {
  /**
   * The handler's own record of the SQLSTATEs already logged as "cannot
   * read the auth schema" (logged once per handler and SQLSTATE).
   */
  readonly schemaErrorsLogged: Set<string>;
}

async function _proven(
  sql: Sql,
  claims: SessionClaims,
  env: FunctionEnv,
  deps: ReaderDeps,
): Promise<Caller | null> {
  try {
    return await _statement(sql, claims, env);
  } catch (cause) {
    if (!isAuthSchemaError(cause)) throw cause;
    if (!deps.schemaErrorsLogged.has(cause.code)) {
      deps.schemaErrorsLogged.add(cause.code);
      logEvent("warn", "Fast path cannot read the auth schema; asking Auth", {
        fn: "presence",
        sqlstate: cause.code,
        cause: errorText(cause),
      });
    }
    return null;
  }
}

/**
 * The call of `presence.reader` as text (migration
 * `20261124020100_order_presence_record_ping.sql`). Throws, sending
 * nothing, on a value that is not a UUID or a domain name.
 */
export function readerText(
  claims: SessionClaims,
  usernameDomains: ReadonlySet<string>,
): string {
  // Each value checked where it is spliced: the call then goes as one
  // Parse/Bind/Execute flight, as presence-ping's does.
  return `select session_ok, email, email_confirmed, id, rol, level from presence.reader(${
    uuidLiteral(claims.sub)
  }, ${uuidLiteral(claims.sessionId)}, ${domainsLiteral(usernameDomains)})`;
}

async function _statement(
  sql: Sql,
  claims: SessionClaims,
  env: FunctionEnv,
): Promise<Caller | null> {
  const [r] = await sql.unsafe<
    {
      session_ok: boolean;
      email: string | null;
      email_confirmed: boolean | null;
      id: string | null;
      rol: string | null;
      level: number | null;
    }[]
  >(readerText(claims, env.usernameMatchDomains), [], ONE_FLIGHT);
  if (!r?.session_ok) return null;
  return {
    identity: {
      id: claims.sub,
      email: r.email,
      emailConfirmed: r.email_confirmed === true,
      // Not read here either: proof of an address is judged on Auth's answer.
      confirmedAfterMail: false,
      // Not read here: an ADMIN_EMAILS address (the only reader whose
      // app_metadata matters) is sent to Auth above.
      appMetadata: {},
    },
    row: r.id === null ? null : {
      id: Number(r.id),
      rol: r.rol,
      level: MATCH_LEVELS[r.level! - 1],
    },
  };
}
