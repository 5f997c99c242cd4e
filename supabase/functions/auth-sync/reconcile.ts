/**
 * auth-sync `reconcile`: settles the intents that dead calls left open,
 * and reports the linked rows whose `correo` differs from their account's
 * email (docs/api.md "auth-sync").
 *
 * @module
 */
import { type OptionalColumns, withColumns } from "../_shared/columns.ts";
import { asDbBusy, type Sql } from "../_shared/db.ts";
import { noteOnRequest } from "../_shared/log.ts";
import { settleOrphans } from "./intent.ts";
import { releaseLease, tryLease } from "./lease.ts";
import { MAX_SYNC_LIMIT, type ReconcileRequest } from "./schema.ts";

/**
 * An open intent, settled (or, on a dry run or when its row was busy, found
 * open).
 */
export interface SettledView {
  readonly intent_id: string;
  readonly target_id: number;
  /**
   * How it was settled (intent.ts), or `open` on a dry run or when its row
   * was busy (locked by another transaction past the lock wait: a later
   * call settles it).
   */
  readonly outcome: string;
}

/** A linked row whose `correo` is not its account's email. */
export interface Mismatch {
  readonly id: number;
  readonly correo: string | null;
  readonly auth_user_id: string;
  /** The account's email, lower-cased; `null` when the account is gone. */
  readonly account_email: string | null;
}

/** The 200 body of a reconcile, less `ok`. */
export interface ReconcileResult {
  readonly settled: SettledView[];
  readonly mismatches: Mismatch[];
  /** `after_id` of the next page of rows, or `null` after the last. */
  readonly next_after_id: number | null;
}

/**
 * Runs a `reconcile` request:
 *
 * - the open intents whose call's lease has lapsed, oldest first and up to
 *   {@linkcode MAX_SYNC_LIMIT} a call, are settled under the row's lease,
 *   taken without waiting (a row another update holds is left for later;
 *   one the app's own transaction holds past the lock wait is reported
 *   `open`, and the others are settled all the same);
 *   `dry_run` lists them with outcome `open` instead. Paging does not apply
 *   to them: a call after them all finds none left;
 * - among up to `limit` linked rows after `after_id`, in id order, those
 *   whose lower-cased `correo` is not their account's email are listed.
 *   Without the `auth_user_id` column no row is linked, and none is listed.
 *
 * @example
 * ```ts
 * const report = await reconcile(sql, { action: "reconcile", limit: 100, dry_run: true });
 * ```
 */
export function reconcile(
  sql: Sql,
  input: ReconcileRequest,
): Promise<ReconcileResult> {
  return withColumns(sql, async (columns) => ({
    settled: await _settleOpen(sql, columns, input),
    ...await _mismatches(sql, columns, input),
  }));
}

async function _settleOpen(
  sql: Sql,
  columns: OptionalColumns,
  input: ReconcileRequest,
): Promise<SettledView[]> {
  const open = await sql<{ id: string; target_id: string }[]>`
    select i.id::text, i.target_id
    from public.auth_sync_intents i
    where i.settled_at is null
      and not exists (
        select 1 from public.auth_sync_leases l
        where l.target_id = i.target_id and l.expires_at > now()
      )
    order by i.created_at
    limit ${MAX_SYNC_LIMIT}
  `;
  // An intent listed as it is, not settled: on a dry run, or its row busy.
  const asOpen = (i: (typeof open)[number]): SettledView => ({
    intent_id: i.id,
    target_id: Number(i.target_id),
    outcome: "open",
  });
  if (input.dry_run) return open.map(asOpen);
  const settled: SettledView[] = [];
  const busy: number[] = [];
  for (const targetId of new Set(open.map((i) => Number(i.target_id)))) {
    const lease = await tryLease(sql, targetId);
    if (!lease) continue;
    try {
      settled.push(...await settleOrphans(sql, lease, columns));
    } catch (error) {
      // A row the app holds locked past the lock wait (a batch job), or a
      // statement that ran out of time, is left for a later call and
      // reported open, so that one busy row does not keep every other
      // intent open and the report from being made. Its intents are
      // settled one by one under the lease, and the first write to the
      // row is what waits: none of them was settled. Anything else (the
      // database gone) fails the call.
      if (!asDbBusy(error)) throw error;
      busy.push(targetId);
      settled.push(
        ...open.filter((i) => Number(i.target_id) === targetId).map(asOpen),
      );
    } finally {
      await releaseLease(sql, lease);
    }
  }
  if (busy.length > 0) noteOnRequest({ targets_busy: busy }, "warn");
  return settled;
}

async function _mismatches(
  sql: Sql,
  columns: OptionalColumns,
  input: ReconcileRequest,
): Promise<Omit<ReconcileResult, "settled">> {
  if (!columns.authUserId) return { mismatches: [], next_after_id: null };
  // One page of linked rows (one more, to know whether another follows),
  // each with its account's email.
  const rows = await sql<
    {
      id: string;
      correo: string | null;
      auth_user_id: string;
      account_email: string | null;
    }[]
  >`
    select u.id, u.correo, u.auth_user_id::text,
           (select lower(a.email) from auth.users a
            where a.id = u.auth_user_id and a.deleted_at is null)
             as account_email
    from public.usuarios u
    where u.auth_user_id is not null and u.id > ${input.after_id ?? 0}
    order by u.id
    limit ${input.limit + 1}
  `;
  const page = rows.slice(0, input.limit);
  return {
    mismatches: page
      .filter((r) => (r.correo?.toLowerCase() ?? null) !== r.account_email)
      .map((r) => ({ ...r, id: Number(r.id) })),
    next_after_id: rows.length > input.limit
      ? Number(page[page.length - 1].id)
      : null,
  };
}
