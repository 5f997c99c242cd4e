/**
 * The statement presence-ping sent before `presence.record_ping` existed:
 * the fast path's work (session proof, matching, update) as one inline CTE,
 * built from `_shared/match_user.ts`. The product no longer sends it; the
 * benchmark replays it with named prepared statements as the cheapest form
 * of the same work on the database (one of its two database ceilings).
 *
 * @module
 */
import {
  type OptionalColumns,
  withColumns,
} from "../supabase/functions/_shared/columns.ts";
import type { Sql } from "../supabase/functions/_shared/db.ts";
import type { SessionClaims } from "../supabase/functions/_shared/jwt_local.ts";
import {
  type Fragment,
  matchCandidate,
  type MatchKeys,
  type MatchRules,
  notLinkedElsewhere,
} from "../supabase/functions/_shared/match_user.ts";
import {
  type PresenceResult,
  presenceResult,
  type PresenceResultRow,
  type PresenceState,
} from "../supabase/functions/presence-ping/record_ping.ts";

/** Options of {@linkcode inlinePresenceForSession}. */
export interface UpdateOptions {
  /** How identities are matched to rows. */
  readonly rules: MatchRules;
  /** Skip the write when this state was stored less than this many seconds ago (0: never). */
  readonly minWriteIntervalS?: number;
}

/**
 * The fast path's work as one inline statement (a large CTE): the session
 * proof, the matching and the update, as `presence.record_ping` does them.
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
