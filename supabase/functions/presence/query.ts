/**
 * The statements behind the `presence` function: who is online by the
 * database clock, one page at a time or what changed since a cursor.
 *
 * Each call is one round trip carrying two statements, pipelined on one
 * connection: the first reads the start of the oldest open transaction
 * (`pg_stat_activity`), the second reads `usuarios` with a snapshot taken
 * after it. A ping stores its transaction's start as `ultimo_acceso`, so
 * every ping the second statement cannot see has `ultimo_acceso` at or
 * after that horizon, which the next changes-since call looks back to.
 *
 * @module
 */
import type { OptionalColumns } from "../_shared/columns.ts";
import type { Sql } from "../_shared/db.ts";
import type { Fragment } from "../_shared/match_user.ts";
import type { CursorState } from "./cursor.ts";
import { maskUsername } from "./mask.ts";
import type { Status } from "./schema.ts";

/** One user as the answer lists it. */
export interface PresenceUser {
  readonly id: number;
  readonly nombre_usuario: string | null;
  readonly presence_state: string | null;
  /** ISO 8601 with milliseconds and `Z`, or `null` for a row never seen. */
  readonly ultimo_acceso: string | null;
  readonly status: Status;
  /** Administrators only. */
  readonly correo?: string | null;
  /** Administrators only, where the column exists. */
  readonly auth_user_id?: string | null;
  /** Administrators only. */
  readonly rol?: string | null;
}

/** What to read. */
export interface ReadOptions {
  /** Only these row ids. */
  readonly ids?: readonly number[];
  /** Only these computed statuses (full reads). */
  readonly status?: readonly Status[];
  /** Only ids above this one. */
  readonly afterId: number;
  readonly limit: number;
  /** Only what changed since this cursor; `null` for a full read. */
  readonly since: CursorState | null;
  /** Whether to include `correo`, `auth_user_id` and `rol`. */
  readonly admin: boolean;
  readonly awayS: number;
  readonly offlineS: number;
}

/** An answer, before its cursor is sealed. */
export interface ReadResult {
  /** `now()` of the statement that computed every status. */
  readonly serverTime: Date;
  readonly users: PresenceUser[];
  /** The last id listed when more remain, else `null`. */
  readonly nextAfterId: number | null;
  /** What the next changes-since call needs. */
  readonly cursor: CursorState;
}

// A horizon never reaches further back than this: a transaction open longer
// is not a ping (one statement of milliseconds), and an idle session left
// in a transaction must not make every poll scan an hour of pings.
const _MAX_LOOKBACK_S = 3600;

// Margin below the horizon, for a transaction that took its start time
// just before the horizon was read but had not published it yet.
const _HORIZON_SLACK_S = 1;

/**
 * Reads one page of users, or of the users whose status or `ultimo_acceso`
 * changed since `options.since`.
 */
export async function readPresence(
  sql: Sql,
  columns: OptionalColumns,
  options: ReadOptions,
): Promise<ReadResult> {
  const conn = await sql.reserve();
  try {
    // Sent back to back on one connection, run in this order: the horizon
    // is read before the snapshot of the second statement is taken.
    const [horizon, rows] = await Promise.all([
      conn<{ h: string }[]>`
        select (extract(epoch from greatest(
                  least(now(), min(a.xact_start)),
                  now() - make_interval(secs => ${_MAX_LOOKBACK_S}::int)
                ) - make_interval(secs => ${_HORIZON_SLACK_S}::int))
                * 1000000)::bigint::text as h
        from pg_stat_activity a
        where a.backend_type in ('client backend', 'standalone backend')
          and a.datname = current_database()
      `,
      conn<_Row[]>`${presenceStatement(conn, columns, options)}`,
    ]);
    return _result(horizon[0].h, rows, options);
  } finally {
    conn.release();
  }
}

interface _Row {
  t: Date;
  t_us: string;
  snap: string;
  id: string | null;
  nombre_usuario: string | null;
  presence_state: string | null;
  ultimo_acceso: Date | null;
  status: Status | null;
  correo?: string | null;
  auth_user_id?: string | null;
  rol?: string | null;
}

/** The computed status of `u` at `now()`, as SQL. */
export function statusSql(
  sql: Sql,
  awayS: number,
  offlineS: number,
): Fragment {
  return sql`case
    when u.presence_state = 'online'
     and u.ultimo_acceso > now() - make_interval(secs => ${awayS}::int)
      then 'online'
    when u.presence_state = 'online'
     and u.ultimo_acceso > now() - make_interval(secs => ${offlineS}::int)
      then 'away'
    else 'offline' end`;
}

/**
 * The statement that reads `usuarios` (the second of a call), for
 * {@linkcode readPresence} and for `EXPLAIN` in the benchmark.
 */
export function presenceStatement(
  sql: Sql,
  columns: OptionalColumns,
  o: ReadOptions,
): Fragment {
  const status = statusSql(sql, o.awayS, o.offlineS);
  const adminColumns = o.admin
    ? sql`, u.correo, u.rol ${
      columns.authUserId ? sql`, u.auth_user_id` : sql``
    }`
    : sql``;
  const ids = o.ids
    ? sql`and u.id = any(${`{${o.ids.join(",")}}`}::bigint[])`
    : sql``;
  const filter = o.since ? _changedSince(sql, o.since, o) : _statusFilter(
    sql,
    status,
    o,
  );
  return sql`
    with page as (
      select u.id, u.nombre_usuario, u.presence_state, u.ultimo_acceso,
             ${status} as status ${adminColumns}
      from public.usuarios u
      where u.id > ${o.afterId}::bigint ${ids} ${filter}
      order by u.id
      limit ${o.limit + 1}::int
    )
    select now() as t,
           (extract(epoch from now()) * 1000000)::bigint::text as t_us,
           pg_current_snapshot()::text as snap,
           page.*
    from (values (1)) one left join page on true
    order by page.id
  `;
}

// Full reads: the status filter, plus, when offline users are not wanted,
// a range on ultimo_acceso the index can serve.
function _statusFilter(sql: Sql, status: Fragment, o: ReadOptions) {
  if (!o.status) return sql``;
  const wanted = sql`and ${status} = any(${`{${o.status.join(",")}}`}::text[])`;
  if (o.status.includes("offline")) return wanted;
  return sql`and u.presence_state = 'online'
    and u.ultimo_acceso > now() - make_interval(secs => ${o.offlineS}::int)
    ${wanted}`;
}

// Changes since a cursor: rows written by a transaction the cursor's
// snapshot could not see (they lie at or after its horizon), and rows stored
// online whose age crossed a threshold between the cursor's time and now.
// Three ranges of the ultimo_acceso index.
function _changedSince(sql: Sql, c: CursorState, o: ReadOptions) {
  const at = (micros: bigint) =>
    sql`(timestamptz 'epoch' + ${
      String(micros)
    }::bigint * interval '1 microsecond')`;
  const crossed = (secs: number) =>
    sql`(u.ultimo_acceso > ${at(c.time)} - make_interval(secs => ${secs}::int)
         and u.ultimo_acceso <= now() - make_interval(secs => ${secs}::int))`;
  // The row version's 32-bit xmin widened to the xid8 it stands for: the
  // one at most 2^32 below the current snapshot's xmax. Frozen or special
  // xids (below 3) count as old, hence seen.
  const xmin8 = sql`greatest(
    pg_snapshot_xmax(pg_current_snapshot())::text::bigint
    - ((pg_snapshot_xmax(pg_current_snapshot())::text::bigint % 4294967296)
       - u.xmin::text::bigint + 4294967296) % 4294967296,
    3)::text::xid8`;
  return sql`and (
    (u.ultimo_acceso >= date_trunc('milliseconds', ${at(c.horizon)})
     and not pg_visible_in_snapshot(${xmin8}, ${c.snapshot}::pg_snapshot))
    or (u.presence_state = 'online'
        and (${crossed(o.awayS)} or ${crossed(o.offlineS)}))
  )`;
}

function _result(horizon: string, rows: _Row[], o: ReadOptions): ReadResult {
  const head = rows[0];
  const found = rows.filter((r) => r.id !== null);
  const more = found.length > o.limit;
  const page = more ? found.slice(0, o.limit) : found;
  const users = page.map((r): PresenceUser => {
    const item: PresenceUser = {
      id: Number(r.id),
      nombre_usuario: o.admin
        ? r.nombre_usuario
        : maskUsername(r.nombre_usuario),
      presence_state: r.presence_state,
      ultimo_acceso: r.ultimo_acceso ? r.ultimo_acceso.toISOString() : null,
      status: r.status!,
    };
    if (!o.admin) return item;
    // auth_user_id only where the column exists (it was selected then).
    return "auth_user_id" in r
      ? {
        ...item,
        correo: r.correo ?? null,
        auth_user_id: r.auth_user_id ?? null,
        rol: r.rol ?? null,
      }
      : { ...item, correo: r.correo ?? null, rol: r.rol ?? null };
  });
  return {
    serverTime: head.t,
    users,
    nextAfterId: more ? users.at(-1)!.id : null,
    cursor: {
      time: BigInt(head.t_us),
      horizon: BigInt(horizon),
      snapshot: head.snap,
      awayS: o.awayS,
      offlineS: o.offlineS,
    },
  };
}
