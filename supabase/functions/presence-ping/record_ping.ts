/**
 * presence-ping's call of the database function `presence.record_ping`
 * (migration `20261123000100_create_presence_record_ping.sql`), which holds
 * the matching rules and the update, so that a ping is one short statement
 * whose inner plans Postgres caches per connection.
 *
 * The fast path's call goes in one round trip: postgres.js with
 * `prepare: false` sends a statement with parameters as Parse/Describe/Flush
 * and waits for the parameter types before Bind/Execute/Sync, whatever types
 * it is given; a statement without parameters goes as one
 * Parse/Describe/Bind/Execute/Sync flight. The fast path's values are
 * therefore written into the statement text, and only values proven safe
 * are: two UUIDs, one of the two states, validated domain names, an integer
 * (see {@linkcode recordPingText}). The slow path's email comes from Auth,
 * is not spliced, and goes as a parameter.
 *
 * Where the function does not exist (the migrations not applied), the ping
 * fails with a 500 that names the migration: there is no second
 * implementation of its rules.
 *
 * @module
 */
import { isUndefinedColumn, pgArray, type Sql } from "../_shared/db.ts";
import {
  callingDbFunction,
  domainsLiteral,
  ONE_FLIGHT,
  uuidLiteral,
} from "../_shared/db_function.ts";

/** A presence state. */
export type PresenceState = "online" | "offline";

/** The updated presence of one row, as the response carries it. */
export interface PresenceRow {
  readonly id: number;
  /**
   * As stored: `null` only where the app's own trigger left none (or a
   * time no `Date` holds, `infinity`).
   */
  readonly ultimo_acceso: string | null;
  readonly presence_state: PresenceState;
}

/** What the update found. */
export interface PresenceResult {
  /** `false` when the session check of the fast path failed. */
  readonly sessionOk: boolean;
  /** The updated row, or `null` when no row matches. */
  readonly row: PresenceRow | null;
}

/** Who pings, as the function takes it. */
export interface PingCaller {
  /** The identity's id (a UUID). */
  readonly userId: string;
  /**
   * The verified token's session (a UUID): the function proves it live and
   * reads the email from `auth.users`. `null` when Auth described the
   * identity and `email` is what it said.
   */
  readonly sessionId: string | null;
  /**
   * The email Auth reported, only when Auth has confirmed it
   * (`matchableEmail`, `_shared/match_user.ts`; slow path only).
   */
  readonly email: string | null;
}

/** The settings the function applies. */
export interface PingSettings {
  /** Lower-cased domains for the username strategy, `*` for all. */
  readonly usernameDomains: ReadonlySet<string>;
  /** `PRESENCE_MIN_WRITE_INTERVAL_S` (0: every ping writes). */
  readonly minWriteIntervalS: number;
}

const _COLUMNS = "session_ok, id, ultimo_acceso, presence_state";

/**
 * The fast path's statement as text with its values written in. Each value
 * is checked here, where it is spliced, whatever its caller proved before:
 * UUIDs, a state of the two, domains of letters, digits, `-` and `.` (or
 * `*`), an integer. Anything else throws, and nothing is sent.
 *
 * @example
 * ```ts
 * recordPingText(sub, sessionId, "online", new Set(), 0);
 * // "select ... from presence.record_ping('…'::uuid, '…'::uuid, null, 'online', '{}'::text[], 0)"
 * ```
 */
export function recordPingText(
  userId: string,
  sessionId: string,
  state: PresenceState,
  settings: PingSettings,
): string {
  const user = uuidLiteral(userId);
  const session = uuidLiteral(sessionId);
  if (state !== "online" && state !== "offline") {
    throw new TypeError("not a state");
  }
  const list = domainsLiteral(settings.usernameDomains);
  const interval = settings.minWriteIntervalS;
  if (!Number.isSafeInteger(interval) || interval < 0) {
    throw new TypeError("not an interval");
  }
  return `select ${_COLUMNS} from presence.record_ping(${user}, ${session}, null, '${state}', ${list}, ${interval})`;
}

/**
 * Calls `presence.record_ping`. Where the function itself is missing or not
 * executable (the migrations not applied), a 500 `migration_missing` that
 * names the migration to apply. Errors raised inside the function (an
 * unreadable auth schema, a failing update) are thrown as they are. A
 * column dropped between the function's catalog check and its statement
 * fails once with `undefined_column`; the call is then repeated.
 */
export async function recordPing(
  sql: Sql,
  caller: PingCaller,
  state: PresenceState,
  settings: PingSettings,
): Promise<PresenceResult> {
  const run = () => _call(sql, caller, state, settings);
  const rows = await callingDbFunction("presence.record_ping", async () => {
    try {
      return await run();
    } catch (error) {
      if (!isUndefinedColumn(error)) throw error;
      return await run();
    }
  });
  return presenceResult(rows[0]);
}

/** A result row of `presence.record_ping`. */
export interface PresenceResultRow {
  session_ok: boolean;
  id: string | null;
  ultimo_acceso: Date | null;
  presence_state: PresenceState | null;
}
type _Row = PresenceResultRow;

function _call(
  sql: Sql,
  caller: PingCaller,
  state: PresenceState,
  settings: PingSettings,
): Promise<_Row[]> {
  if (caller.sessionId !== null) {
    return sql.unsafe<_Row[]>(
      recordPingText(caller.userId, caller.sessionId, state, settings),
      [],
      ONE_FLIGHT,
    );
  }
  return sql<_Row[]>`
    select session_ok, id, ultimo_acceso, presence_state
    from presence.record_ping(${caller.userId}::uuid, null, ${caller.email}::text,
      ${state}, ${pgArray(settings.usernameDomains)}::text[],
      ${settings.minWriteIntervalS}::int)
  `;
}

/** A result row, as the handler answers it. */
export function presenceResult(row: PresenceResultRow): PresenceResult {
  return {
    sessionOk: row.session_ok,
    row: row.id === null ? null : {
      id: Number(row.id),
      ultimo_acceso: _iso(row.ultimo_acceso),
      presence_state: row.presence_state!,
    },
  };
}

// The write stands whatever the app's own BEFORE trigger made of the time
// (a privacy rule that stores none): the answer says what is stored rather
// than failing a ping whose write committed.
function _iso(time: Date | null): string | null {
  return time === null || Number.isNaN(time.getTime())
    ? null
    : time.toISOString();
}
