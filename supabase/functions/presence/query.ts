/**
 * The statement behind the `presence` function: who is online by the
 * database clock, one page at a time or what changed since a cursor.
 *
 * A changes-since call reads the change log `presence.changes` (migration
 * `20261124020000_create_presence_changes.sql`): triggers on `usuarios`
 * stamp every written row id with the top-level transaction id of its last
 * write, whoever wrote it. A cursor carries the snapshot S of the answer
 * that issued it; what committed since is what S could not see: a txid at
 * or above `xmax(S)`, or one of `xip(S)` (open when S was taken). Both are
 * index lookups. Moves made by the clock alone (`online` → `away` →
 * `offline`) are ranges of the `ultimo_acceso` index between the cursor's
 * time and now. Everything is one statement, so one snapshot: the rows read
 * and the snapshot put into the next cursor agree.
 *
 * A `timestamp without time zone` column holds UTC (presence-ping writes it
 * so): every bound is converted to UTC wall time before it is compared, and
 * every value read back is taken as UTC, whatever the session's `TimeZone`.
 *
 * @module
 */
import type { OptionalColumns } from "../_shared/columns.ts";
import { abandoned, pgArray, remember, type Sql } from "../_shared/db.ts";
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
  /** Only ids above this one ({@linkcode FIRST_PAGE}: every id). */
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
  /** Ids the cursor's view holds that no longer exist (changes-since only). */
  readonly removed: number[];
  /** The last id listed when more remain, else `null`. */
  readonly nextAfterId: number | null;
  /**
   * The cursor cannot be continued (it is older than
   * {@linkcode CURSOR_MAX_AGE_S}; the table was truncated; the database is
   * on another timeline than the cursor's, after a point-in-time restore or
   * a failover; or its transaction ids are behind the cursor's: another
   * cluster, a restore), or more changed since than
   * {@linkcode CHANGES_BOUND_PAGES} pages: the caller answers a full read
   * instead.
   */
  readonly reset: boolean;
  /**
   * Whether the change log is whole ({@linkcode CHANGE_LOG_TRIGGERS}, no
   * table inheriting `usuarios`). While it is not, every changes-since
   * read is answered in full (`reset`), and so is the next one after it is
   * mended.
   */
  readonly changeLogWhole: boolean;
  /**
   * Whether a change-log trigger is enabled for origin sessions only: the
   * log is whole for ordinary writes, but writes in replica mode (a
   * logical-replication subscription, a data-only dump run through psql)
   * are not logged.
   */
  readonly changeLogOriginOnly: boolean;
  /** What the next changes-since call needs. */
  readonly cursor: CursorState;
}

/**
 * The `afterId` of a first page: below every id a JSON number holds
 * exactly, so that a legacy table's ids of 0 and below are listed too (and
 * the {@linkcode WHOLE_TABLE} key, below it, never is).
 */
export const FIRST_PAGE = Number.MIN_SAFE_INTEGER;

/**
 * The `presence.changes` key that stands for the whole table: written by a
 * `TRUNCATE` of `usuarios`, after which every watcher starts over.
 */
export const WHOLE_TABLE = "-9223372036854775808";

/**
 * Pages' worth of changed ids a changes-since read follows at least. Every
 * page of a changes-since read gathers what changed before it picks its
 * page, so following `k` changed ids costs about `k² / limit` rows in all,
 * where a full read of the table's `n` rows costs `n`: past `√(n × limit)`
 * changed ids (the table's size as `pg_class.reltuples` estimates it), or
 * `CHANGES_BOUND_PAGES × limit` if that is more, the answer is a full read
 * flagged `resync` instead (a bulk write, a backfill, "everyone offline").
 * A bound of pages alone made every poll of a large, busy table a full read
 * (1,000,000 rows, 5,001 changes at `limit` 500: 2,001 pages per watcher,
 * where following them was 11).
 */
export const CHANGES_BOUND_PAGES = 10;

/**
 * How old a cursor may be, in seconds, by the database clock (the one that
 * issued it): older ones get a full read flagged `resync`. Within this age
 * a changes-since answer scans at most this much of the `ultimo_acceso`
 * index. Judged in the statement, not by the function's clock, which may
 * be minutes off the database's.
 */
export const CURSOR_MAX_AGE_S = 3600;

/**
 * Reads one page of users, or of the users that changed since
 * `options.since`: one statement, one round trip.
 */
export async function readPresence(
  sql: Sql,
  columns: OptionalColumns,
  options: ReadOptions,
): Promise<ReadResult> {
  const rows = await sql<_Row[]>`${presenceStatement(sql, columns, options)}`;
  return _result(rows, options);
}

// Reads in flight, per pool (not per request: each request's `sql` is its
// own bounded view of the pool): by everything but the cursor, then the
// cursor (null for a full read), whether the request that started it was
// abandoned, and the pending answer. A shared statement is bounded by the
// request that started it (see readShared for when that one goes). In the
// pool's memory (db.ts `remember`), which the handler's deps own.
const _IN_FLIGHT = Symbol("shared reads");

type _InFlight = Map<string, {
  since: CursorState | null;
  abandoned: () => boolean;
  read: Promise<ReadResult>;
}[]>;

/**
 * {@linkcode readPresence}, shared by the watchers of this isolate: a
 * first page asked while another one runs whose answer covers it (the same
 * columns and thresholds, and a cursor no newer than this one's, see
 * {@linkcode covers}) gets that statement's answer instead of paying for
 * its own, unless that answer's snapshot is older than this caller's
 * cursor or it is a reset answered to another cursor. Later pages are read
 * for each caller alone. Such an answer may list users that did not change
 * since this caller's cursor (harmless: the view applies them again) and
 * never misses one; its cursor is the shared statement's snapshot, so the watchers that
 * shared a poll hold the same cursor afterwards and keep sharing.
 */
export function readShared(
  sql: Sql,
  columns: OptionalColumns,
  options: ReadOptions,
): Promise<ReadResult> {
  // A later page is never shared: the caller keeps its first page's cursor,
  // and a statement whose snapshot is older than that page's would hand it
  // rows from before writes the next changes-since call does not list
  // again. (A first page is judged against the caller's cursor, below.)
  if (options.afterId !== FIRST_PAGE) {
    return readPresence(sql, columns, options);
  }
  const pending = remember<_InFlight>(sql, _IN_FLIGHT, () => new Map());
  const key = JSON.stringify([columns, { ...options, since: null }]);
  const running = pending.get(key) ?? [];
  const shared = running.find((r) =>
    options.since === null
      ? r.since === null
      : r.since !== null && covers(r.since, options.since)
  );
  if (shared) {
    // The request that started the statement was abandoned (a tab closed
    // mid-poll) and its statement cancelled: this caller still waits, and
    // asks again (sharing with the others it left) instead of answering
    // 503 for someone else's disconnect. A statement that ran out of time
    // is not run again: its sharers answer 503 with it, so a slow database
    // does not get one more statement per watcher.
    return shared.read.then(
      (result) =>
        _answers(result, shared.since, options.since)
          ? result
          : readPresence(sql, columns, options),
      (error) => {
        if (!shared.abandoned()) throw error;
        return readShared(sql, columns, options);
      },
    );
  }
  const entry = {
    since: options.since,
    abandoned: () => abandoned(sql),
    read: readPresence(sql, columns, options).finally(() => {
      const list = pending.get(key)!;
      list.splice(list.indexOf(entry), 1);
      if (list.length === 0) pending.delete(key);
    }),
  };
  running.push(entry);
  pending.set(key, running);
  return entry.read;
}

// Whether `result`, the answer to a read from cursor `asked`, answers a
// caller whose cursor is `since`. Not when the statement took its snapshot
// before the caller's cursor was issued (by another statement, the answer
// on the way meanwhile): it would take the caller's view back. Rare (the
// shared statement must outlast a whole other read). Nor a reset, unless
// to the same cursor: a reset belongs to its cursor (too old, from before
// a truncate, too much changed since), and a caller with a newer one
// would read the whole table for nothing. Otherwise: a read of its own.
function _answers(
  result: ReadResult,
  asked: CursorState | null,
  since: CursorState | null,
): boolean {
  if (since === null) return true;
  if (result.reset) {
    return asked !== null && asked.time === since.time &&
      asked.snapshot === since.snapshot && asked.timeline === since.timeline &&
      asked.changeLog === since.changeLog;
  }
  return covers(since, result.cursor);
}

/**
 * Whether a changes-since answer from cursor `a` lists everything one from
 * cursor `b` would (same thresholds assumed): every transaction `b` could
 * not see, `a` could not see either (`xmax(a) <= xmax(b)`, and each of
 * `xip(b)` below `xmax(a)` is in `xip(a)`), `a`'s clock window starts no
 * later than `b`'s, both are of one timeline and of one change log, and
 * `b` was not issued while the log was not whole.
 *
 * @example
 * ```ts
 * covers({ ...s, snapshot: "10:12:10" }, { ...s, snapshot: "11:14:11,12" }); // false: 11 is seen by the first
 * ```
 */
export function covers(a: CursorState, b: CursorState): boolean {
  // Snapshots of two timelines (a restore between them) compare nothing.
  if (a.timeline !== b.timeline) return false;
  // Nor answers under two change logs (triggers made again between them),
  // and a cursor issued while the log was not whole is owed a full read
  // that an answer to another cursor would not give.
  if (a.changeLog !== b.changeLog || b.changeLog === "") return false;
  if (a.time > b.time) return false;
  const sa = _snapshot(a.snapshot), sb = _snapshot(b.snapshot);
  if (sa.xmax > sb.xmax) return false;
  return sb.xip.every((x) => x >= sa.xmax || sa.xip.includes(x));
}

function _snapshot(text: string): { xmax: bigint; xip: bigint[] } {
  const [, xmax, xip] = text.split(":");
  return {
    xmax: BigInt(xmax),
    xip: xip ? xip.split(",").map((x) => BigInt(x)) : [],
  };
}

interface _Row {
  t: Date;
  t_us: string;
  snap: string;
  timeline: string | null;
  log: string;
  reset: boolean;
  id: string | null;
  gone: boolean | null;
  nombre_usuario: string | null;
  presence_state: string | null;
  /** Milliseconds since the epoch, as `numeric` text (`Infinity` too). */
  ultimo_acceso: string | null;
  status: Status | null;
  correo?: string | null;
  auth_user_id?: string | null;
  rol?: string | null;
}

/**
 * A `timestamptz` expression as a bound for `u.ultimo_acceso`: as is for a
 * `timestamptz` column, UTC wall time for a naive one (which holds UTC), so
 * that the comparison neither depends on `TimeZone` nor hides the index.
 */
function _bound(sql: Sql, columns: OptionalColumns, t: Fragment): Fragment {
  return columns.ultimoAccesoWithoutTimeZone
    ? sql`((${t}) at time zone 'UTC')`
    : t;
}

// The moment `secs` seconds before `now()`, comparable with ultimo_acceso:
// the one threshold every status rule and index range is written with.
function _ago(sql: Sql, columns: OptionalColumns, secs: number): Fragment {
  return _bound(sql, columns, sql`now() - make_interval(secs => ${secs}::int)`);
}

/**
 * How far ahead of the database clock a stored `ultimo_acceso` may be and
 * still be a ping's, in seconds: the bound `presence.record_ping` applies
 * (migration `20261124060000_bound_presence_record_ping_future.sql`, "more
 * than a minute ahead"), which the read applies too. A time further ahead
 * was written by something else (the app's own `now()` into a naive column
 * east of UTC, a fast browser clock) and is no evidence of presence.
 * `tests/e2e/presence_test.ts` holds the two to the same boundary.
 */
export const AHEAD_S = 60;

/**
 * The computed status of `u` at `now()`, as SQL: the one home of the rule
 * (online within `awayS`, away within `offlineS`, else offline; a time
 * more than {@linkcode AHEAD_S} ahead is offline), which every read uses;
 * the filters below only add index ranges implied by it.
 */
export function statusSql(
  sql: Sql,
  columns: OptionalColumns,
  awayS: number,
  offlineS: number,
): Fragment {
  const ago = (secs: number) => _ago(sql, columns, secs);
  return sql`case
    when u.presence_state = 'online'
         and u.ultimo_acceso <= ${ago(-AHEAD_S)}
         and u.ultimo_acceso > ${ago(awayS)}
      then 'online'
    when u.presence_state = 'online'
         and u.ultimo_acceso <= ${ago(-AHEAD_S)}
         and u.ultimo_acceso > ${ago(offlineS)}
      then 'away'
    else 'offline' end`;
}

/**
 * The statement that reads `usuarios`, for {@linkcode readPresence} and for
 * `EXPLAIN` in tests and the benchmark.
 */
export function presenceStatement(
  sql: Sql,
  columns: OptionalColumns,
  o: ReadOptions,
): Fragment {
  const status = statusSql(sql, columns, o.awayS, o.offlineS);
  const adminColumns = o.admin
    ? sql`, u.correo, u.rol ${
      columns.authUserId ? sql`, u.auth_user_id` : sql``
    }`
    : sql``;
  // As milliseconds since the epoch (see _instant), which no TimeZone
  // setting changes.
  const ultimo = sql`floor(extract(epoch from ${
    columns.ultimoAccesoWithoutTimeZone
      ? sql`(u.ultimo_acceso at time zone 'UTC')`
      : sql`u.ultimo_acceso`
  }) * 1000)`;
  const ids = (column: Fragment) =>
    o.ids ? sql`and ${column} = any(${pgArray(o.ids)}::bigint[])` : sql``;
  // What the answer says of the database (its clock, snapshot, timeline
  // and change log): one row, computed once per statement, not per listed
  // user.
  const here = sql`here as materialized (
      select now() as t,
             (extract(epoch from now()) * 1000000)::bigint::text as t_us,
             pg_current_snapshot()::text as snap,
             ${_timeline(sql)} as timeline,
             ${_changeLog(sql)} as log
    )`;
  if (!o.since) {
    return sql`
      with ${here},
      page as (
        select u.id, false as gone, u.nombre_usuario, u.presence_state,
               ${ultimo} as ultimo_acceso, ${status} as status ${adminColumns}
        from public.usuarios u
        where u.id > ${o.afterId}::bigint ${ids(sql`u.id`)}
          ${_statusFilter(sql, columns, status, o)}
        order by u.id
        limit ${o.limit + 1}::int
      )
      select here.*, false as reset, page.*
      from here left join page on true
      order by page.id
    `;
  }
  const c = o.since;
  const s = sql`${c.snapshot}::pg_snapshot`;
  const since = sql`(c.txid >= pg_snapshot_xmax(${s})
    or c.txid = any(array(select pg_snapshot_xip(${s}))))`;
  // Rows stored online whose age crossed a threshold between the cursor's
  // time and now: ranges of the ultimo_acceso index, one per threshold (a
  // time ahead of the clock that came within AHEAD_S of it is the third).
  const cursorTime = sql`(timestamptz 'epoch' + ${
    String(c.time)
  }::bigint * interval '1 microsecond')`;
  const crossed = (secs: number) => {
    const back = sql`make_interval(secs => ${secs}::int)`;
    return sql`(u.ultimo_acceso > ${
      _bound(sql, columns, sql`${cursorTime} - ${back}`)
    } and u.ultimo_acceso <= ${_bound(sql, columns, sql`now() - ${back}`)})`;
  };
  // A cursor from another timeline (a restore, a failover) cannot be
  // continued; one issued before timelines were kept is not asked. Nor
  // one issued under other change-log triggers (dropped and made again, a
  // table swapped for a copy: a write between them was never logged), or
  // while the log was not whole; one issued before it was kept is not
  // asked either.
  const otherTimeline = c.timeline
    ? sql`or ${c.timeline}::text is distinct from here.timeline`
    : sql``;
  const otherLog = c.changeLog !== undefined
    ? sql`or ${c.changeLog}::text is distinct from here.log`
    : sql``;
  // Each branch stops one row past the bound: if any reaches it, more than
  // the bound changed, whatever the others hold.
  const least = o.limit * CHANGES_BOUND_PAGES;
  return sql`
    -- The bound (CHANGES_BOUND_PAGES); reltuples is -1 before the first
    -- ANALYZE. A cursor older than CURSOR_MAX_AGE_S cannot be continued:
    -- its bound is -1, so that no branch reads a row and the answer is a
    -- reset.
    with ${here},
    bound as materialized (
      select case
               when ${cursorTime} < now()
                      - make_interval(secs => ${CURSOR_MAX_AGE_S}::int)
                 then -1
               else greatest(${least}::int, floor(sqrt(
                      greatest(pc.reltuples, 0)::float8 * ${o.limit}::int)))
             end::int as n
      from pg_catalog.pg_class pc
      where pc.oid = 'public.usuarios'::pg_catalog.regclass
    ),
    -- Materialised: a few rows, each branch through its own index, rather
    -- than an ordered walk of the whole log that stops at the page's end.
    changed as materialized (
      (select c.user_id as id from presence.changes c
       where c.txid >= pg_snapshot_xmax(${s})
       limit (select n + 1 from bound))
      union
      (select c.user_id from presence.changes c
       where c.txid = any(array(select pg_snapshot_xip(${s})))
       limit (select n + 1 from bound))
      union
      (select u.id from public.usuarios u
       where u.presence_state = 'online'
         and (${crossed(o.awayS)} or ${crossed(o.offlineS)}
              or ${crossed(-AHEAD_S)})
       limit (select n + 1 from bound))
    ),
    -- The page's ids first: the planner then knows it joins a handful of
    -- ids and looks each up by primary key.
    ids as materialized (
      select ch.id from changed ch
      where ch.id > ${o.afterId}::bigint ${ids(sql`ch.id`)}
      order by ch.id
      limit ${o.limit + 1}::int
    ),
    -- One primary-key lookup per id (a subquery with LIMIT is never
    -- flattened into a join that could scan the table).
    page as (
      select ch.id, u.id is null as gone, u.nombre_usuario, u.presence_state,
             u.ultimo_acceso, u.status ${adminColumns}
      from ids ch left join lateral (
        select u.id, u.nombre_usuario, u.presence_state,
               ${ultimo} as ultimo_acceso, ${status} as status ${adminColumns}
        from public.usuarios u where u.id = ch.id
        limit 1
      ) u on true
    ),
    -- Whether the cursor can be continued: once, beside what the answer
    -- says of the database.
    head as (
      select here.*,
             ((select n from bound) < 0
              or here.log = ''
              ${otherTimeline}
              ${otherLog}
              or pg_snapshot_xmax(here.snap::pg_snapshot)
                   < pg_snapshot_xmax(${s})
              or exists (select 1 from presence.changes c
                         where c.user_id = ${WHOLE_TABLE}::bigint and ${since})
              or (select count(*) from changed) > (select n from bound))
               as reset
      from here
    )
    select head.*, page.*
    from head left join page on true
    order by page.id
  `;
}

/**
 * The change-log triggers on `public.usuarios` (migrations
 * `20261124020000_create_presence_changes.sql` and
 * `20261125020000_log_replicated_usuarios_writes.sql`): a changes-since
 * answer is sound only while all of them stand and are enabled. The
 * migrations enable them `ALWAYS`; enabled for origin sessions only
 * (`ENABLE TRIGGER ALL` after a `DISABLE`, as `pg_restore
 * --disable-triggers` leaves them) they still log every ordinary write,
 * and are counted: only replica-mode writers (a subscription) then go
 * unlogged, which the read's line says and docs/api.md says how to mend,
 * rather than every watcher of a restored project reading in full at
 * every poll. How each is enabled is part of the log's signature, so that
 * the switch (the writes a restore made while they were disabled) costs
 * every watcher one full read.
 */
export const CHANGE_LOG_TRIGGERS: readonly string[] = [
  "usuarios_log_insert",
  "usuarios_log_update",
  "usuarios_log_delete",
  "usuarios_log_truncate",
  "usuarios_log_replica_rows",
];

// Which change-log triggers stand on usuarios now (each one's oid, which
// dropping and making it again changes, and how it is enabled: A always, O
// origin sessions only), or '' when the log is not whole:
// one of CHANGE_LOG_TRIGGERS missing or disabled (dropped by a schema
// tool, usuarios swapped for a copy, which LIKE ... INCLUDING ALL makes
// without them, DISABLE TRIGGER), or a table
// inherits usuarios (inheritance, partitions): the read lists its rows,
// but a statement that names the child fires none of usuarios' statement
// triggers. Two catalog lookups by index.
function _changeLog(sql: Sql): Fragment {
  return sql`(
    select case
             when count(*) = ${CHANGE_LOG_TRIGGERS.length}::int
                  and not exists (
                    select 1 from pg_catalog.pg_inherits i
                    where i.inhparent = 'public.usuarios'::pg_catalog.regclass)
               then string_agg(t.oid::text || t.tgenabled::text, ','
                               order by t.oid)
             else ''
           end
    from pg_catalog.pg_trigger t
    where t.tgrelid = 'public.usuarios'::pg_catalog.regclass
      and t.tgname = any(${pgArray(CHANGE_LOG_TRIGGERS)}::text[])
      and t.tgenabled in ('A', 'O'))`;
}

// The database's timeline (eight hex digits of the current WAL file's
// name), or null on a server in recovery, where the WAL functions fail. A
// point-in-time restore or a failover starts a new one, and hands out again
// the transaction ids of what it discarded: a cursor from another timeline
// cannot be continued, though its ids may already be behind the database's.
function _timeline(sql: Sql): Fragment {
  return sql`case when pg_catalog.pg_is_in_recovery() then null
    else substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()),
                1, 8) end`;
}

// Full reads: the status filter, plus, when offline users are not wanted,
// a range on ultimo_acceso the index can serve.
function _statusFilter(
  sql: Sql,
  columns: OptionalColumns,
  status: Fragment,
  o: ReadOptions,
) {
  if (!o.status) return sql``;
  const wanted = sql`and ${status} = any(${pgArray(o.status)}::text[])`;
  if (o.status.includes("offline")) return wanted;
  return sql`and u.presence_state = 'online'
    and u.ultimo_acceso > ${_ago(sql, columns, o.offlineS)}
    ${wanted}`;
}

// A stored time, read as milliseconds since the epoch, as ISO 8601, or
// null: also for what PostgreSQL holds and no client could read
// (`infinity`, `-infinity`, a BC date): legacy sentinels ("never signed
// in"), or an app's own write, must not fail every read of their page. The
// status was computed in SQL from the stored value (`-infinity` is
// offline). Not the `timestamptz` itself: PostgreSQL writes it in the
// session's TimeZone, whose offsets before about 1900 (local mean time,
// `-00:14:44` in Europe/Madrid) have seconds, which postgres.js cannot
// parse, so a legacy `1900-01-01` would read null outside UTC only.
function _instant(ms: string | null): string | null {
  if (ms === null) return null;
  const time = new Date(Number(ms));
  return Number.isNaN(time.getTime()) || time.getUTCFullYear() < 1
    ? null
    : time.toISOString();
}

function _result(rows: _Row[], o: ReadOptions): ReadResult {
  const head = rows[0];
  const found = rows.filter((r) => r.id !== null);
  const more = found.length > o.limit;
  const page = more ? found.slice(0, o.limit) : found;
  const users: PresenceUser[] = [];
  const removed: number[] = [];
  for (const r of page) {
    if (r.gone) {
      removed.push(Number(r.id));
      continue;
    }
    const item: PresenceUser = {
      id: Number(r.id),
      nombre_usuario: o.admin
        ? r.nombre_usuario
        : maskUsername(r.nombre_usuario),
      presence_state: r.presence_state,
      ultimo_acceso: _instant(r.ultimo_acceso),
      status: r.status!,
    };
    if (!o.admin) {
      users.push(item);
      continue;
    }
    // auth_user_id only where the column exists (it was selected then).
    users.push(
      "auth_user_id" in r
        ? {
          ...item,
          correo: r.correo ?? null,
          auth_user_id: r.auth_user_id ?? null,
          rol: r.rol ?? null,
        }
        : { ...item, correo: r.correo ?? null, rol: r.rol ?? null },
    );
  }
  return {
    serverTime: head.t,
    users,
    removed,
    nextAfterId: more ? Number(page.at(-1)!.id) : null,
    reset: head.reset,
    changeLogWhole: head.log !== "",
    changeLogOriginOnly: head.log.includes("O"),
    cursor: {
      time: BigInt(head.t_us),
      snapshot: head.snap,
      awayS: o.awayS,
      offlineS: o.offlineS,
      ...(head.timeline === null ? {} : { timeline: head.timeline }),
      changeLog: head.log,
    },
  };
}
