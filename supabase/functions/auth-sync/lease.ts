/**
 * One auth-sync update at a time per `usuarios` row, across every running
 * instance of the function, through `public.auth_sync_leases`.
 *
 * An update reads the row, calls Supabase Auth, then writes the row. A
 * `select ... for update` cannot span the Auth call: the transaction would
 * pin a (pooler) connection for up to the provider timeout, and on the local
 * single-session PGlite the Auth stand-in's own writes would queue behind it
 * for ever. So the row is leased in a statement of its own, and the final
 * write takes the real row lock in a short transaction.
 *
 * @module
 */
import type postgres from "postgres";
import type { Sql } from "../_shared/db.ts";
import { HttpError } from "../_shared/errors.ts";
import { errorText, logEvent } from "../_shared/log.ts";

/**
 * Seconds a lease lasts if its holder never releases it (a crashed isolate):
 * renewed to this before each Auth call ({@linkcode renewLease}), so much
 * longer than one call (five seconds) plus the database work, and short
 * enough not to block a row for long. An intent its dead holder left open is
 * settled once the lease has lapsed.
 */
export const LEASE_TTL_S = 60;

/** How long a call waits for another update of the same row to finish. */
export const LEASE_WAIT_MS = 15_000;

/** A lease held by one call. */
export interface Lease {
  readonly targetId: number;
  /** Random id of the holding call. */
  readonly holder: string;
}

/**
 * Settings of a write transaction under a lease: no statement and no lock
 * wait may outlast the lease, so that a write that waited too long fails
 * instead of landing after another call took the row over. `set local`
 * lasts for the transaction only, which also holds through Supabase's
 * transaction pooler (a session-level `set` or a startup parameter would
 * not).
 */
export const WRITE_STATEMENT_TIMEOUT_MS = 10_000;
/** See {@linkcode WRITE_STATEMENT_TIMEOUT_MS}. */
export const WRITE_LOCK_TIMEOUT_MS = 5_000;

/**
 * Bounds the transaction `tx` with {@linkcode WRITE_STATEMENT_TIMEOUT_MS}
 * and {@linkcode WRITE_LOCK_TIMEOUT_MS}. Call first in the transaction.
 */
export async function boundTransaction(tx: postgres.ISql): Promise<void> {
  await tx`select set_config('statement_timeout', ${
    String(WRITE_STATEMENT_TIMEOUT_MS)
  }, true),
                  set_config('lock_timeout', ${
    String(WRITE_LOCK_TIMEOUT_MS)
  }, true)`;
}

/**
 * Throws unless `lease` is still held, and keeps it from being taken over
 * until `tx` ends (the lease row is locked). Call in the write transaction,
 * after its row locks, just before it writes: a lease that lapsed while
 * the call waited (for Auth, for a lock) may have been taken by another
 * update of the same row.
 */
export async function assertLeaseHeld(
  tx: postgres.ISql,
  lease: Lease,
): Promise<void> {
  const rows = await tx`
    select 1 from public.auth_sync_leases
    where target_id = ${lease.targetId} and holder = ${lease.holder}::uuid
      and expires_at > now()
    for update
  `;
  // Another update may hold the row now: the caller undoes its provider
  // change and answers as for a busy row.
  if (rows.length === 0) {
    throw new HttpError("target_busy", { headers: { "Retry-After": "1" } });
  }
}

/**
 * Seconds a lease must still have before Auth may be called under it:
 * longer than one Auth call can take (the 5 s provider timeout) with room
 * to spare, so that no Auth call is still under way when the lease lapses.
 */
export const LEASE_MARGIN_S = 15;

/**
 * Renews `lease` for {@linkcode LEASE_TTL_S} if it still has
 * {@linkcode LEASE_MARGIN_S} left, or throws 409 `target_busy`: call right
 * before each Auth call, so that nothing calls Auth once the lease may
 * have lapsed (and another update may hold the row).
 */
export async function renewLease(sql: Sql, lease: Lease): Promise<void> {
  const rows = await sql`
    update public.auth_sync_leases
    set expires_at = now() + make_interval(secs => ${LEASE_TTL_S})
    where target_id = ${lease.targetId} and holder = ${lease.holder}::uuid
      and expires_at > now() + make_interval(secs => ${LEASE_MARGIN_S})
    returning 1
  `;
  if (rows.length === 0) {
    throw new HttpError("target_busy", { headers: { "Retry-After": "1" } });
  }
}

/**
 * Takes the lease of row `targetId` if it is free or lapsed, without
 * waiting: `null` when a live update holds it.
 */
export async function tryLease(
  sql: Sql,
  targetId: number,
): Promise<Lease | null> {
  const holder = crypto.randomUUID();
  return (await _tryAcquire(sql, targetId, holder))
    ? { targetId, holder }
    : null;
}

/** Gives `lease` back (it lapses by itself if this fails). */
export async function releaseLease(sql: Sql, lease: Lease): Promise<void> {
  await _release(sql, lease.targetId, lease.holder);
}

/**
 * Runs `work` while holding the lease of row `targetId`, waiting up to
 * {@linkcode LEASE_WAIT_MS} by the clock `now` for a running update of the
 * same row to finish; after that, 409 `target_busy` with `Retry-After`.
 *
 * @example
 * ```ts
 * const user = await withLease(sql, 42, deps.now, (lease) => applyUpdate(sql, lease));
 * ```
 */
export async function withLease<T>(
  sql: Sql,
  targetId: number,
  now: () => number,
  work: (lease: Lease) => Promise<T>,
): Promise<T> {
  const holder = crypto.randomUUID();
  const deadline = now() + LEASE_WAIT_MS;
  let pause = 20;
  while (!(await _tryAcquire(sql, targetId, holder))) {
    if (now() >= deadline) {
      throw new HttpError("target_busy", { headers: { "Retry-After": "1" } });
    }
    // Jittered, growing pauses: waiters do not poll in lock step.
    await new Promise((r) => setTimeout(r, pause * (0.5 + Math.random())));
    pause = Math.min(pause * 2, 250);
  }
  try {
    return await work({ targetId, holder });
  } finally {
    await _release(sql, targetId, holder);
  }
}

async function _tryAcquire(
  sql: Sql,
  targetId: number,
  holder: string,
): Promise<boolean> {
  // Takes a free row, or one whose lease has lapsed; a live lease held by
  // someone else leaves the statement without a row.
  const rows = await sql`
    insert into public.auth_sync_leases as l (target_id, holder, expires_at)
    values (${targetId}, ${holder}::uuid,
            now() + make_interval(secs => ${LEASE_TTL_S}))
    on conflict (target_id) do update
      set holder = excluded.holder, expires_at = excluded.expires_at
      where l.expires_at < now()
    returning l.target_id
  `;
  return rows.length === 1;
}

async function _release(
  sql: Sql,
  targetId: number,
  holder: string,
): Promise<void> {
  try {
    await sql`
      delete from public.auth_sync_leases
      where target_id = ${targetId} and holder = ${holder}::uuid
    `;
  } catch (error) {
    // The lease lapses by itself after LEASE_TTL_S.
    logEvent("warn", "Lease not released", {
      fn: "auth-sync",
      target_id: targetId,
      cause: errorText(error),
    });
  }
}
