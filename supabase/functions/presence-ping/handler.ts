/**
 * `presence-ping`: the signed-in user sets their own presence.
 *
 * @module
 */
import { z } from "zod";
import { authenticate, bearerToken, type Identity } from "../_shared/auth.ts";
import { type OptionalColumns, withColumns } from "../_shared/columns.ts";
import postgres from "postgres";
import { database, publicDbError, type Sql } from "../_shared/db.ts";
import { denoEnv, type EnvSource } from "../_shared/env.ts";
import { HttpError, json } from "../_shared/errors.ts";
import {
  createFunction,
  readBodyText,
  type RequestContext,
} from "../_shared/http.ts";
import { errorText, logEvent } from "../_shared/log.ts";
import { type SessionClaims, verifyAsymmetric } from "../_shared/jwt_local.ts";
import {
  type Fragment,
  identityKeys,
  matchCandidate,
  type MatchKeys,
  type MatchRules,
  matchRules,
  notLinkedElsewhere,
} from "../_shared/match_user.ts";
import {
  type PresenceResult,
  presenceResult,
  type PresenceResultRow,
  type PresenceState,
  recordPing,
  recordPingAvailable,
} from "./record_ping.ts";

export type {
  PresenceResult,
  PresenceRow,
  PresenceState,
} from "./record_ping.ts";

// A state is trimmed and lower-cased; anything else, or a non-string, is
// "online" (spec 4, rule 3).
const _State = z.unknown().transform((value): PresenceState => {
  const text = typeof value === "string" ? value.trim().toLowerCase() : "";
  return text === "offline" ? "offline" : "online";
});

const _Body = z.object({ state: z.unknown() });

/**
 * The effective state: the body's `state` when the body is a JSON object
 * that has one (not `null`), else the query's, else `online`.
 *
 * @example
 * ```ts
 * effectiveState('{"state":"offline"}', "online"); // "offline"
 * effectiveState("not json", "OFFLINE "); // "offline"
 * ```
 */
export function effectiveState(
  bodyText: string,
  queryState: string | null,
): PresenceState {
  const body = _Body.safeParse(_parseOrUndefined(bodyText));
  const raw = body.success && body.data.state != null
    ? body.data.state
    : queryState;
  return _State.parse(raw);
}

/** Options of {@linkcode updatePresence}. */
export interface UpdateOptions {
  /** How identities are matched to rows. */
  readonly rules: MatchRules;
  /** Skip the write when this state was stored less than this many seconds ago (0: never). */
  readonly minWriteIntervalS?: number;
}

/**
 * Finds the identity Auth described and sets its presence, in one
 * statement; the time is the database's clock truncated to milliseconds, so
 * what is stored is what is returned. `offline` also sets
 * `last_manual_logout_at` where that column exists. Through the database
 * function `presence.record_ping`, or, where it does not exist, an inline
 * statement with the same rules.
 */
export async function updatePresence(
  sql: Sql,
  identity: Identity,
  state: PresenceState,
  options: UpdateOptions,
): Promise<PresenceResult> {
  const viaFunction = recordPingAvailable()
    ? await recordPing(
      sql,
      {
        userId: identity.id,
        sessionId: null,
        email: identity.email,
      },
      state,
      _settings(options),
    )
    : null;
  if (viaFunction) return viaFunction;
  return await withColumns(
    sql,
    (columns) =>
      _update(sql, identityKeys(sql, identity), null, state, columns, options),
  );
}

/**
 * The fast path's statement: like {@linkcode updatePresence}, for a token
 * verified locally, and only if `auth.sessions` still has its session and
 * `auth.users` its user, not banned and not deleted. The email it matches
 * with is read from `auth.users` in the same statement, as Auth would
 * report it now.
 */
export async function updatePresenceForSession(
  sql: Sql,
  claims: SessionClaims,
  state: PresenceState,
  options: UpdateOptions,
): Promise<PresenceResult> {
  const viaFunction = recordPingAvailable()
    ? await recordPing(
      sql,
      {
        userId: claims.sub,
        sessionId: claims.sessionId,
        email: null,
      },
      state,
      _settings(options),
    )
    : null;
  return viaFunction ??
    await inlinePresenceForSession(sql, claims, state, options);
}

/**
 * The fast path's work as one inline statement (a large CTE, planned on
 * every ping): what {@linkcode updatePresenceForSession} runs where the
 * database function is missing. Exported for the benchmark, which replays
 * it as the cheapest form of the same work on the database.
 */
export async function inlinePresenceForSession(
  sql: Sql,
  claims: SessionClaims,
  state: PresenceState,
  options: UpdateOptions,
): Promise<PresenceResult> {
  const guard = sql`
    select lower(au.email) as email
    from auth.sessions s
    join auth.users au on au.id = s.user_id
    where s.id = ${claims.sessionId}::uuid
      and s.user_id = ${claims.sub}::uuid
      and au.deleted_at is null
      and (au.banned_until is null or au.banned_until <= now())
      and (s.not_after is null or s.not_after > now())
  `;
  const keys = {
    id: sql`${claims.sub}::uuid`,
    email: sql`(select email from guard)`,
  };
  return await withColumns(
    sql,
    (columns) => _update(sql, keys, guard, state, columns, options),
  );
}

/** Serves one presence ping (method and environment already checked). */
export async function presencePing(
  req: Request,
  ctx: RequestContext,
): Promise<Response> {
  const token = bearerToken(req);
  const claims = ctx.env.presenceVerify === "local" && fastPathAvailable()
    ? await verifyAsymmetric(token, ctx.env)
    : null;
  let identity = claims ? null : await authenticate(token, ctx.env);
  let bodyText: string;
  try {
    bodyText = await readBodyText(req);
  } catch (error) {
    // The token outranks the body (the check order of docs/api.md "Errors"): a revoked
    // session must still answer 401 here.
    if (claims) await authenticate(token, ctx.env);
    throw error;
  }
  const state = effectiveState(
    bodyText,
    new URL(req.url).searchParams.get("state"),
  );
  const sql = database(ctx.env, req.signal);
  const options: UpdateOptions = {
    rules: matchRules(ctx.env),
    minWriteIntervalS: ctx.env.presenceMinWriteIntervalS,
  };
  let result = identity
    ? await _guarded(updatePresence(sql, identity, state, options))
    : await _fastPath(sql, claims!, state, options);
  if (!result?.sessionOk) {
    // Auth says why (signed out, banned, deleted), exactly as on the slow
    // path; should it still accept the token, the slow path goes on. The
    // same when the fast path could not read the auth schema.
    identity = await authenticate(token, ctx.env);
    result = await _guarded(updatePresence(sql, identity, state, options));
  }
  if (!result.row) throw new HttpError("user_not_found");
  return json({ ok: true, user: result.row });
}

/**
 * The handler `Deno.serve` takes. `env` defaults to the process environment;
 * the local gateway and tests pass their own.
 */
export function createPresencePing(
  env: EnvSource = denoEnv,
): (req: Request) => Promise<Response> {
  return createFunction("presence-ping", env, presencePing);
}

function _settings(options: UpdateOptions) {
  return {
    usernameDomains: options.rules.usernameDomains,
    minWriteIntervalS: options.minWriteIntervalS ?? 0,
  };
}

async function _guarded(
  pending: Promise<PresenceResult>,
): Promise<PresenceResult> {
  try {
    return await pending;
  } catch (cause) {
    throw new HttpError("presence_update_failed", {
      extra: { error: publicDbError(cause) },
      cause,
    });
  }
}

// Errors of the fast path's read of auth.sessions and auth.users that say
// the schema is not as expected or not readable by this role (a changed
// Auth schema, revoked grants), rather than that the database is down.
const _SCHEMA_ERRORS = new Set(["42501", "42P01", "42703", "42883", "3F000"]);

// How long the fast path stays off in this isolate after such an error, so
// that pings do not each pay for a failing statement before asking Auth.
const _FAST_PATH_PAUSE_MS = 60_000;
let _fastPathOffUntil = 0;
const _fastPathErrorsLogged = new Set<string>();

/** Whether the fast path is on in this isolate (off for a while after a schema error). */
export function fastPathAvailable(now = Date.now()): boolean {
  return now >= _fastPathOffUntil;
}

// The fast path's statement; null when the auth schema could not be read,
// and the caller asks Auth instead. Logged once per isolate and SQLSTATE.
async function _fastPath(
  sql: Sql,
  claims: SessionClaims,
  state: PresenceState,
  options: UpdateOptions,
): Promise<PresenceResult | null> {
  try {
    return await updatePresenceForSession(sql, claims, state, options);
  } catch (cause) {
    if (
      !(cause instanceof postgres.PostgresError) ||
      !_SCHEMA_ERRORS.has(cause.code)
    ) {
      throw new HttpError("presence_update_failed", {
        extra: { error: publicDbError(cause) },
        cause,
      });
    }
    _fastPathOffUntil = Date.now() + _FAST_PATH_PAUSE_MS;
    if (!_fastPathErrorsLogged.has(cause.code)) {
      _fastPathErrorsLogged.add(cause.code);
      logEvent("warn", "Fast path cannot read the auth schema; asking Auth", {
        fn: "presence-ping",
        sqlstate: cause.code,
        cause: errorText(cause),
      });
    }
    return null;
  }
}

async function _update(
  sql: Sql,
  keys: MatchKeys,
  guard: Fragment | null,
  state: PresenceState,
  columns: OptionalColumns,
  options: UpdateOptions,
): Promise<PresenceResult> {
  const now = sql`date_trunc('milliseconds', now())`;
  // A `timestamp without time zone` column holds UTC wall-clock time: the
  // session's TimeZone must not decide what is stored, nor the function's
  // time zone what is returned (postgres.js reads such a value as local).
  const naive = columns.ultimoAccesoWithoutTimeZone ?? false;
  const nowStored = naive ? sql`(${now} at time zone 'UTC')` : now;
  const stored = naive
    ? sql`(u.ultimo_acceso at time zone 'UTC')`
    : sql`u.ultimo_acceso`;
  const logout = state === "offline" && columns.lastManualLogoutAt
    ? sql`, last_manual_logout_at = ${now}`
    : sql``;
  const interval = options.minWriteIntervalS ?? 0;
  // With the optional setting, a repeat of the stored state within the
  // interval is read instead of written.
  // coalesce: a null stored state or time is never fresh (an unknown
  // would skip the write and answer with no time).
  const fresh = interval > 0
    ? sql`and not coalesce(u.presence_state = ${state}
           and ${stored} > now() - make_interval(secs => ${interval}), false)`
    : sql``;
  const kept = interval > 0
    ? sql`union all
          select u.id, ${stored}, u.presence_state
          from public.usuarios u join c on u.id = c.id
          where not exists (select 1 from upd)`
    : sql``;
  const rows = await sql<PresenceResultRow[]>`
    with ${guard ? sql`guard as (${guard}),` : sql``}
    c as (${matchCandidate(sql, keys, columns, options.rules)}),
    upd as (
      update public.usuarios u
      set ultimo_acceso = ${nowStored},
          presence_state = ${state}
          ${logout}
      from c
      where u.id = c.id
        ${notLinkedElsewhere(sql, keys, columns)}
        ${guard ? sql`and exists (select 1 from guard)` : sql``}
        ${fresh}
      returning u.id, ${stored} as ultimo_acceso, u.presence_state
    ),
    res as (
      select id, ultimo_acceso, presence_state from upd
      ${kept}
    )
    select ${
    guard ? sql`exists (select 1 from guard)` : sql`true`
  } as session_ok,
           res.id, res.ultimo_acceso, res.presence_state
    from (values (1)) one left join res on true
  `;
  return presenceResult(rows[0]);
}

function _parseOrUndefined(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
