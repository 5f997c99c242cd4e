/**
 * auth-sync `sync`: links `usuarios` rows to their Supabase Auth accounts
 * and reports each row. Creates no accounts and changes none.
 *
 * Per row, in this order:
 *
 * - linked (`auth_user_id`) to an account that exists: `in_sync`, unless the
 *   account of its `correo` is another one: `conflict`;
 * - no `correo`: `no_email`;
 * - a `correo` that is not an address Supabase Auth accepts as it stands
 *   (spaces around it, common in legacy data, or its format; the rule of
 *   auth-sync's request emails, `isRequestEmail`): `invalid_email`, the row
 *   to fix (no account can have it);
 * - no account has the `correo`: `no_identity`;
 * - that account is not proven to own the address (neither confirmed by
 *   mail nor stamped by an operator, nor given that address by auth-sync:
 *   {@linkcode linkableAddress}): `unverified`, and
 *   nothing is linked: whoever signed up first with a row's address would
 *   otherwise be handed the row;
 * - that account is linked to another row: `conflict`;
 * - otherwise `linked`: `auth_user_id` is set (unless `dry_run`), replacing
 *   a link to an account that no longer exists.
 *
 * Where the deployment has no `auth_user_id` column rows are matched by
 * email only, so a row whose `correo` has an account is `in_sync`.
 *
 * Each link is one statement that changes one row, re-checks what was read
 * (a row changed meanwhile is reported `conflict`) and writes its audit row.
 *
 * @module
 */
import postgres from "postgres";
import { type OptionalColumns, withColumns } from "../_shared/columns.ts";
import { pgArray, publicDbError, type Sql } from "../_shared/db.ts";
import { asMigrationMissing } from "../_shared/db_function.ts";
import { linkableAddress } from "../_shared/email_proof.ts";
import { HttpError } from "../_shared/errors.ts";
import { findAccounts, linkedRows, normalizeEmail } from "./accounts.ts";
import type { CallDeps } from "./provider.ts";
import { type Actor, auditFailure } from "./audit.ts";
import { isRequestEmail, type SyncRequest } from "./schema.ts";

/** What sync found (and did) for a row. */
export type SyncStatus =
  | "linked"
  | "in_sync"
  | "no_identity"
  | "conflict"
  | "no_email"
  | "invalid_email"
  | "unverified";

/** One row's result. */
export interface SyncRowResult {
  readonly id: number;
  readonly status: SyncStatus;
  /**
   * The existing account the row is linked to after the call (or would be,
   * with `dry_run`); `null` when none.
   */
  readonly auth_user_id: string | null;
}

/** The 200 body of a sync, less `ok`. */
export interface SyncResult {
  readonly results: SyncRowResult[];
  readonly summary: Record<SyncStatus, number>;
  /** Pass as `after_id` for the next page; `null` when there is none. */
  readonly next_after_id: number | null;
}

/**
 * Runs a `sync` request for the administrator `actor`.
 *
 * @example
 * ```ts
 * const page = await syncUsuarios(sql, callDeps(env, deps), actor, { action: "sync", limit: 100, dry_run: true });
 * ```
 */
export async function syncUsuarios(
  sql: Sql,
  call: CallDeps,
  actor: Actor,
  input: SyncRequest,
): Promise<SyncResult> {
  try {
    return await withColumns(
      sql,
      (columns) => _sync(sql, call, actor, input, columns),
    );
  } catch (error) {
    if (error instanceof HttpError) throw error;
    const missing = asMigrationMissing(error);
    if (missing) throw missing;
    if (!input.dry_run) {
      await auditFailure(sql, {
        actor,
        action: "sync",
        targetId: null,
        fields: ["auth_user_id"],
        outcome: "failed",
        detail: "sync_failed",
      });
    }
    throw new HttpError("sync_failed", {
      extra: { error: publicDbError(error) },
      cause: error,
    });
  }
}

interface _Row {
  id: number;
  email: string | null;
  auth_user_id: string | null;
}

async function _sync(
  sql: Sql,
  call: CallDeps,
  actor: Actor,
  input: SyncRequest,
  columns: OptionalColumns,
): Promise<SyncResult> {
  const page = await _readPage(sql, input, columns);
  const rows = page.slice(0, input.limit);
  const { byId, byEmail } = await findAccounts(sql, {
    ids: rows.flatMap((r) => r.auth_user_id ? [r.auth_user_id] : []),
    emails: rows.flatMap((r) => r.email ? [r.email] : []),
  });
  // Account id to the row linked to it, kept current as this batch links.
  const owners = columns.authUserId
    ? await linkedRows(sql, [...byEmail.values()].map((a) => a.id))
    : new Map<string, number>();
  const results: SyncRowResult[] = [];
  for (const row of rows) {
    const linked = row.auth_user_id ? byId.get(row.auth_user_id) : undefined;
    const mine = row.email ? byEmail.get(row.email) : undefined;
    let result: SyncRowResult;
    if (linked) {
      result = mine && mine.id !== linked.id
        ? { id: row.id, status: "conflict", auth_user_id: linked.id }
        : { id: row.id, status: "in_sync", auth_user_id: linked.id };
    } else if (!row.email) {
      result = { id: row.id, status: "no_email", auth_user_id: null };
    } else if (!isRequestEmail(row.email)) {
      result = { id: row.id, status: "invalid_email", auth_user_id: null };
    } else if (!mine) {
      result = { id: row.id, status: "no_identity", auth_user_id: null };
    } else if (!(await linkableAddress(mine, call.autoconfirm))) {
      result = { id: row.id, status: "unverified", auth_user_id: null };
    } else if (!columns.authUserId) {
      result = { id: row.id, status: "in_sync", auth_user_id: mine.id };
    } else if ((owners.get(mine.id) ?? row.id) !== row.id) {
      result = { id: row.id, status: "conflict", auth_user_id: null };
    } else if (
      input.dry_run || await _link(sql, actor, row, mine.id)
    ) {
      owners.set(mine.id, row.id);
      result = { id: row.id, status: "linked", auth_user_id: mine.id };
    } else {
      result = { id: row.id, status: "conflict", auth_user_id: null };
    }
    results.push(result);
  }
  const summary: Record<SyncStatus, number> = {
    linked: 0,
    in_sync: 0,
    no_identity: 0,
    conflict: 0,
    no_email: 0,
    invalid_email: 0,
    unverified: 0,
  };
  for (const r of results) summary[r.status]++;
  return {
    results,
    summary,
    next_after_id: page.length > input.limit ? rows[rows.length - 1].id : null,
  };
}

// One row more than asked for, to tell whether another page follows.
async function _readPage(
  sql: Sql,
  input: SyncRequest,
  columns: OptionalColumns,
): Promise<_Row[]> {
  const authUserId = columns.authUserId
    ? sql`u.auth_user_id::text`
    : sql`null::text`;
  const byIds = input.ids
    ? sql`and u.id = any(${pgArray(input.ids)}::bigint[])`
    : sql``;
  const after = input.after_id !== undefined
    ? sql`and u.id > ${input.after_id}`
    : sql``;
  const rows = await sql<
    { id: string; correo: string | null; auth_user_id: string | null }[]
  >`
    select u.id, u.correo, ${authUserId} as auth_user_id
    from public.usuarios u
    where true ${byIds} ${after}
    order by u.id
    limit ${input.limit + 1}
  `;
  return rows.map((r) => ({
    id: Number(r.id),
    email: normalizeEmail(r.correo),
    auth_user_id: r.auth_user_id,
  }));
}

// Links one row, if it is still as read, with its audit row, in one
// statement. False when the row changed meanwhile or another row took the
// account first (the unique index on auth_user_id).
async function _link(
  sql: Sql,
  actor: Actor,
  row: _Row,
  accountId: string,
): Promise<boolean> {
  try {
    const done = await sql`
      with linked as (
        update public.usuarios u
        set auth_user_id = ${accountId}::uuid
        where u.id = ${row.id}
          and u.auth_user_id is not distinct from ${row.auth_user_id}::uuid
          and lower(u.correo) = ${row.email}::text
        returning u.id
      )
      insert into public.auth_sync_audit
        (actor_auth_user_id, actor_email, actor_kind, actor_key, action,
         target_id, fields, outcome)
      select ${actor.id}::uuid, ${actor.email}, ${actor.kind}, ${actor.keyName},
             'sync', linked.id, array['auth_user_id'], 'ok'
      from linked
      returning target_id
    `;
    return done.length === 1;
  } catch (error) {
    if (error instanceof postgres.PostgresError && error.code === "23505") {
      return false;
    }
    throw error;
  }
}
