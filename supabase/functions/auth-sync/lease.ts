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
import type { Sql } from "../_shared/db.ts";
import { HttpError } from "../_shared/errors.ts";
import { errorText, logEvent } from "../_shared/log.ts";

/**
 * Seconds a lease lasts if its holder never releases it (a crashed isolate):
 * longer than the Auth calls an update makes (at most two of five seconds
 * each, plus the database work), short enough not to block a row for long.
 */
export const LEASE_TTL_S = 60;

/** How long a call waits for another update of the same row to finish. */
export const LEASE_WAIT_MS = 15_000;

/**
 * Runs `work` while holding the lease of row `targetId`, waiting up to
 * {@linkcode LEASE_WAIT_MS} for a running update of the same row to finish;
 * after that, 409 `target_busy` with `Retry-After`.
 *
 * @example
 * ```ts
 * const user = await withLease(sql, 42, () => applyUpdate(sql, 42));
 * ```
 */
export async function withLease<T>(
  sql: Sql,
  targetId: number,
  work: () => Promise<T>,
): Promise<T> {
  const holder = crypto.randomUUID();
  const deadline = Date.now() + LEASE_WAIT_MS;
  let pause = 20;
  while (!(await _tryAcquire(sql, targetId, holder))) {
    if (Date.now() >= deadline) {
      throw new HttpError("target_busy", { headers: { "Retry-After": "1" } });
    }
    // Jittered, growing pauses: waiters do not poll in lock step.
    await new Promise((r) => setTimeout(r, pause * (0.5 + Math.random())));
    pause = Math.min(pause * 2, 250);
  }
  try {
    return await work();
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
