/**
 * Intents (`public.auth_sync_intents`): an update says what it is about to
 * do at Supabase Auth before it calls Auth, and settles that once the
 * `usuarios` row follows or the change is undone. A call that dies in
 * between (a worker killed on a platform limit, a lost COMMIT answer that
 * left nobody to read it back) leaves its intent open, and the next holder
 * of the row's lease settles it from what Auth holds ({@linkcode
 * settleOrphans}): the row follows an account that holds what the intent
 * set, and nothing else is touched. Settling reads Auth through the
 * database and writes only the row, so it never calls Auth.
 *
 * @module
 */
import type postgres from "postgres";
import { isTransient, pgArray, type Sql } from "../_shared/db.ts";
import { errorText, logEvent } from "../_shared/log.ts";
import { findAccounts, findCreatedAccount } from "./accounts.ts";
import { type AuditActor, type Field, writeAudit } from "./audit.ts";
import type { Lease } from "./lease.ts";
import type { ProviderField } from "./provider.ts";

/** How an intent ended. */
export type IntentOutcome =
  /** The row was written to follow Auth. */
  | "applied"
  /** Auth's change was set back (or the created account deleted). */
  | "undone"
  /** Auth did not apply the change. */
  | "unchanged"
  /** The account holds neither the old nor the new email: another change won. */
  | "superseded"
  /** Only a password was sent, which cannot be read back. */
  | "unknown"
  /** Auth changed and could not be set back. */
  | "left_changed";

/** The `usuarios` columns an update writes once Auth has changed. */
export interface RowSet {
  correo?: string;
  nombre_usuario?: string;
  auth_user_id?: string;
}

/** An intent as written before Auth is called. */
export interface Intent {
  readonly id: string;
  readonly targetId: number;
  readonly kind: "update" | "create";
  /** The changed account (`update`). */
  readonly accountId: string | null;
  /** The request id a created account carries (`create`). */
  readonly createdBy: string | null;
  readonly fields: readonly ProviderField[];
  readonly oldEmail: string | null;
  readonly newEmail: string | null;
  readonly rowSet: RowSet;
  /**
   * The row's values of `rowSet`'s columns before the call (`null` for an
   * empty column); `null` on an intent written before they were recorded.
   */
  readonly rowBefore: RowBefore | null;
  readonly actor: AuditActor;
}

/** A row's values of some {@linkcode RowSet} columns. */
export type RowBefore = { [K in keyof RowSet]?: string | null };

/**
 * Writes `intent` in a statement of its own, committed before Auth is
 * called, under the call's lease.
 *
 * @example
 * ```ts
 * await recordIntent(sql, lease, { id: crypto.randomUUID(), targetId: 42, kind: "update", ... });
 * ```
 */
export async function recordIntent(
  sql: Sql,
  lease: Lease,
  intent: Intent,
): Promise<void> {
  await sql`
    insert into public.auth_sync_intents
      (id, target_id, holder, kind, account_id, created_by, fields,
       old_email, new_email, row_set, row_before, actor_kind,
       actor_auth_user_id, actor_email, actor_key)
    values (${intent.id}::uuid, ${intent.targetId}, ${lease.holder}::uuid,
            ${intent.kind}, ${intent.accountId}::uuid, ${intent.createdBy},
            ${pgArray(intent.fields)}::text[], ${intent.oldEmail},
            ${intent.newEmail}, ${
    sql.json(intent.rowSet as postgres.JSONValue)
  }, ${intent.rowBefore && sql.json(intent.rowBefore as postgres.JSONValue)},
            ${intent.actor.kind}, ${intent.actor.id}::uuid,
            ${intent.actor.email}, ${intent.actor.keyName})
  `;
}

/**
 * Settles the intent `id` with `outcome` for the lease holder `by`, unless
 * it is settled already. Pass the transaction that writes the row, so that
 * the intent is settled exactly when the row is written. True when this
 * call settled it.
 */
export async function settleIntent(
  sql: postgres.ISql,
  id: string,
  outcome: IntentOutcome,
  by: Lease,
): Promise<boolean> {
  const rows = await sql`
    update public.auth_sync_intents
    set settled_at = now(), outcome = ${outcome},
        settled_by = ${by.holder}::uuid
    where id = ${id}::uuid and settled_at is null
    returning 1
  `;
  return rows.length === 1;
}

/** How an intent was settled, and by which lease holder. */
export interface IntentState {
  readonly outcome: IntentOutcome;
  readonly settledBy: string;
}

/**
 * How the intent `id` ended, `null` while it is open: read back after a
 * write whose COMMIT answer was lost, it says whether the COMMIT landed
 * (settled `applied` by the writing call's own lease holder) or another
 * call settled it meanwhile.
 */
export async function intentState(
  sql: Sql,
  id: string,
): Promise<IntentState | null> {
  const [row] = await sql<
    { outcome: IntentOutcome | null; settled_by: string | null }[]
  >`
    select outcome, settled_by::text from public.auth_sync_intents
    where id = ${id}::uuid
  `;
  return row?.outcome && row.settled_by
    ? { outcome: row.outcome, settledBy: row.settled_by }
    : null;
}

/** One settled intent, as the reconcile report lists it. */
export interface Settled {
  readonly intent_id: string;
  readonly target_id: number;
  readonly outcome: IntentOutcome;
}

/**
 * Settles the open intents of row `targetId` that calls other than the
 * lease's holder left behind (their lease lapsed, so they are presumed
 * dead). Call while holding the lease. For each, Auth is read back through
 * the database:
 *
 * - a created account carrying the intent's request id, or an account that
 *   holds the intent's new email: the row is written as the call meant to
 *   (`applied`), with the audit row of the call's actor;
 * - an account that still holds its old email, or no created account:
 *   `unchanged`;
 * - an account holding neither: `superseded`, the row is left alone;
 * - only a password was sent: `unknown`, audited as a partial failure;
 * - the row cannot follow (another row took the email meanwhile):
 *   `left_changed`, audited as a partial failure, listed by reconcile;
 * - the row could not be written for now (a lock the app holds, a timeout,
 *   a lost connection: {@linkcode isTransient}): the error is thrown and
 *   the intent stays open for the next update or reconcile.
 *
 * @example
 * ```ts
 * const settled = await settleOrphans(sql, lease, { authUserId: true });
 * ```
 */
export async function settleOrphans(
  sql: Sql,
  lease: Lease,
  columns: { authUserId: boolean },
): Promise<Settled[]> {
  const open = await sql<_IntentRow[]>`
    select id::text, target_id, kind, account_id::text, created_by,
           to_json(fields) as fields, old_email, new_email, row_set,
           row_before, actor_kind, actor_auth_user_id::text, actor_email,
           actor_key
    from public.auth_sync_intents
    where target_id = ${lease.targetId} and settled_at is null
      and holder <> ${lease.holder}::uuid
    order by created_at
  `;
  const settled: Settled[] = [];
  for (const row of open) {
    const intent = _intent(row);
    const outcome = await _settleOne(sql, lease, intent, columns);
    settled.push({ intent_id: intent.id, target_id: intent.targetId, outcome });
    logEvent("warn", "Open intent settled", {
      fn: "auth-sync",
      intent_id: intent.id,
      target_id: intent.targetId,
      outcome,
    });
  }
  return settled;
}

interface _IntentRow {
  id: string;
  target_id: string;
  kind: "update" | "create";
  account_id: string | null;
  created_by: string | null;
  fields: ProviderField[];
  old_email: string | null;
  new_email: string | null;
  row_set: RowSet;
  row_before: RowBefore | null;
  actor_kind: AuditActor["kind"];
  actor_auth_user_id: string | null;
  actor_email: string | null;
  actor_key: string | null;
}

function _intent(row: _IntentRow): Intent {
  return {
    id: row.id,
    targetId: Number(row.target_id),
    kind: row.kind,
    accountId: row.account_id,
    createdBy: row.created_by,
    fields: row.fields,
    oldEmail: row.old_email,
    newEmail: row.new_email,
    rowSet: row.row_set,
    rowBefore: row.row_before,
    actor: {
      kind: row.actor_kind,
      id: row.actor_auth_user_id,
      email: row.actor_email,
      keyName: row.actor_key,
    },
  };
}

async function _settleOne(
  sql: Sql,
  lease: Lease,
  intent: Intent,
  columns: { authUserId: boolean },
): Promise<IntentOutcome> {
  let outcome: IntentOutcome;
  let rowSet: RowSet | null = null;
  if (intent.kind === "create") {
    const created = intent.newEmail && intent.createdBy
      ? await findCreatedAccount(sql, intent.newEmail, intent.createdBy)
      : null;
    outcome = created ? "applied" : "unchanged";
    if (created) {
      rowSet = {
        ...intent.rowSet,
        ...(columns.authUserId ? { auth_user_id: created } : {}),
      };
    }
  } else if (intent.fields.includes("email") && intent.accountId) {
    const now = (await findAccounts(sql, { ids: [intent.accountId] })).byId
      .get(intent.accountId);
    if (now && now.email === intent.newEmail) {
      outcome = "applied";
      rowSet = intent.rowSet;
    } else if (now && now.email === intent.oldEmail) outcome = "unchanged";
    else outcome = "superseded";
  } else {
    outcome = "unknown";
  }
  const fields: Field[] = [...intent.fields];
  for (const column of ["nombre_usuario", "auth_user_id"] as const) {
    if (intent.rowSet[column] !== undefined) fields.push(column);
  }
  try {
    await _record(sql, lease, intent, outcome, rowSet, fields);
    return outcome;
  } catch (error) {
    // A lock held by the app, a timeout or a lost connection says nothing
    // of the row: the intent stays open for the next update or reconcile.
    if (!rowSet || isTransient(error)) throw error;
    // The row cannot follow (e.g. another row took that email meanwhile):
    // Auth keeps the change, the audit says so, and reconcile's report
    // lists the row. The intent must not stay open, or every later update
    // of the row would fail the same way.
    logEvent("warn", "Row not written when settling an intent", {
      fn: "auth-sync",
      intent_id: intent.id,
      cause: errorText(error),
    });
    await _record(sql, lease, intent, "left_changed", null, fields);
    return "left_changed";
  }
}

// Writes the row (when `rowSet`), settles the intent and writes its audit
// row, in one transaction.
async function _record(
  sql: Sql,
  lease: Lease,
  intent: Intent,
  outcome: IntentOutcome,
  rowSet: RowSet | null,
  fields: Field[],
): Promise<void> {
  await sql.begin(async (tx) => {
    const write = rowSet && await _unchangedSince(tx, intent, rowSet);
    if (write && Object.keys(write).length > 0) {
      await tx`
        update public.usuarios u set ${tx(write as Record<string, string>)}
        where u.id = ${intent.targetId}
      `;
    }
    // The audit names the row's columns this settling wrote, not those kept.
    const audited = write
      ? fields.filter((f) => !(f in rowSet!) || f in write)
      : fields;
    if (!(await settleIntent(tx, intent.id, outcome, lease))) return;
    await writeAudit(tx, {
      actor: intent.actor,
      action: "update",
      targetId: intent.targetId,
      fields: audited,
      outcome: outcome === "applied"
        ? "ok"
        : outcome === "unknown" || outcome === "left_changed"
        ? "partial_failure"
        : "failed",
      detail: `settled_${outcome}`,
    });
  });
}

// The part of `rowSet` whose columns still hold what they held before the
// dead call (`intent.rowBefore`; a created account's link only on a row
// still unlinked), read under the row's lock: a column someone wrote since
// keeps the newer value, and the skipped columns are logged. An intent
// from before `row_before` was recorded is written whole, as then.
async function _unchangedSince(
  tx: postgres.TransactionSql,
  intent: Intent,
  rowSet: RowSet,
): Promise<RowSet> {
  if (!intent.rowBefore) return rowSet;
  const columns = Object.keys(rowSet) as (keyof RowSet)[];
  const [now] = await tx<Record<string, string | null>[]>`
    select ${tx(columns)}
    from public.usuarios where id = ${intent.targetId} for update
  `;
  if (!now) return {};
  const write: RowSet = {};
  const kept: string[] = [];
  for (const column of columns) {
    const before = intent.rowBefore[column] ?? null;
    const current = now[column] === null ? null : String(now[column]);
    if (current === before) write[column] = rowSet[column];
    else kept.push(column);
  }
  if (kept.length > 0) {
    logEvent("warn", "Columns written since the intent kept", {
      fn: "auth-sync",
      intent_id: intent.id,
      target_id: intent.targetId,
      columns: kept.join(","),
    });
  }
  return write;
}
