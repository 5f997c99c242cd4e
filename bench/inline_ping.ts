/**
 * The statement presence-ping sent before `presence.record_ping` existed:
 * the fast path's work (session proof, matching, update) as one inline CTE,
 * with the matching rules as SQL fragments (what `presence.match_usuario`
 * now holds). The product no longer sends it; the
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
import type {
  Fragment,
  MatchRules,
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

/**
 * The identity as SQL expressions: `id` (uuid) and `email` (lower-cased
 * text, may be null). Parameters for an identity Auth described, or
 * sub-selects when the statement reads them from `auth.users` itself.
 */
interface MatchKeys {
  readonly id: Fragment;
  readonly email: Fragment;
}

/**
 * A query selecting `(id, level)` of the one row matched, `level` being the
 * 1-based rank in {@linkcode MATCH_LEVELS}. Each branch is an index lookup
 * (`auth_user_id` unique, `lower(correo)`, `lower(nombre_usuario)`).
 */
function matchCandidate(
  sql: Sql,
  keys: MatchKeys,
  columns: OptionalColumns,
  rules: MatchRules,
): Fragment {
  const unlinked = notLinkedElsewhere(sql, keys, columns);
  const byId = columns.authUserId
    ? sql`select u.id, 1 as level from public.usuarios u
          where u.auth_user_id = ${keys.id}
          union all`
    : sql``;
  return sql`
    select c.id, c.level from (
      ${byId}
      select u.id, 2 as level from public.usuarios u
        where lower(u.correo) = ${keys.email} ${unlinked}
      union all
      select u.id, 3 as level from public.usuarios u
        where lower(u.nombre_usuario) = ${keys.email} ${unlinked}
      ${_byLocalPart(sql, keys, rules, unlinked)}
    ) c
    order by c.level, c.id
    limit 1
  `;
}

// The fourth strategy, where the rules allow it for the identity's domain.
function _byLocalPart(
  sql: Sql,
  keys: MatchKeys,
  rules: MatchRules,
  unlinked: Fragment,
): Fragment {
  const domains = [...rules.usernameDomains];
  if (domains.length === 0) return sql``;
  const domainAllowed = rules.usernameDomains.has("*")
    ? sql``
    : sql`and substring(${keys.email} from '@([^@]*)$') = any(${domains}::text[])`;
  // The part before the last @; null when there is none or it is empty.
  const local = sql`substring(${keys.email} from '^(.+)@[^@]*$')`;
  return sql`
    union all
    select u.id, 4 as level from public.usuarios u
      where lower(u.nombre_usuario) = ${local} ${unlinked} ${domainAllowed}`;
}

/**
 * `and (u.auth_user_id is null or u.auth_user_id = <identity>)` where the
 * column exists: a row linked to another identity is never matched by email
 * or username. Applies to a table aliased `u`.
 */
function notLinkedElsewhere(
  sql: Sql,
  keys: MatchKeys,
  columns: OptionalColumns,
): Fragment {
  return columns.authUserId
    ? sql`and (u.auth_user_id is null or u.auth_user_id = ${keys.id})`
    : sql``;
}
