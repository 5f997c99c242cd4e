/**
 * Which optional `usuarios` columns this deployment has.
 *
 * `auth_user_id` and `last_manual_logout_at` may be absent in older
 * deployments (spec section 2). The answer is cached per isolate and pool,
 * and dropped when a statement fails with `undefined_column`, so a column
 * removed while the function runs is noticed on the next request.
 *
 * @module
 */
import { isUndefinedColumn, remember, type Sql } from "./db.ts";

/** Presence of the optional columns, and how `ultimo_acceso` is typed. */
export interface OptionalColumns {
  readonly authUserId: boolean;
  readonly lastManualLogoutAt: boolean;
  /**
   * `ultimo_acceso` is `timestamp without time zone` (older deployments):
   * it then holds UTC wall-clock time, written and read through
   * `at time zone 'UTC'` so that neither the session's `TimeZone` nor the
   * function's own time zone shifts it.
   */
  readonly ultimoAccesoWithoutTimeZone?: boolean;
}

// Kept per pool, not per request: each request's `sql` is its own bounded
// view of the pool, and an information_schema query per request would cost
// more than the read it serves. In the pool's memory (db.ts `remember`),
// which the handler's deps own.
const _COLUMNS = Symbol("optional columns");

interface _Known {
  current: Promise<OptionalColumns> | null;
}

/**
 * The optional columns of `public.usuarios`, looked up once per pool.
 *
 * @example
 * ```ts
 * const { authUserId } = await optionalColumns(sql);
 * ```
 */
export function optionalColumns(sql: Sql): Promise<OptionalColumns> {
  const known = _known(sql);
  if (!known.current) {
    const lookup = _lookup(sql);
    known.current = lookup;
    lookup.catch(() => {
      if (known.current === lookup) known.current = null;
    });
  }
  return known.current;
}

/** Forgets what is known of the columns, so the next call looks again. */
export function forgetColumns(sql: Sql): void {
  _known(sql).current = null;
}

const _known = (sql: Sql) =>
  remember<_Known>(sql, _COLUMNS, () => ({ current: null }));

/**
 * Runs `work` with the current columns; when it fails with
 * `undefined_column` (a column was dropped since they were looked up), looks
 * them up again and runs it once more.
 */
export async function withColumns<T>(
  sql: Sql,
  work: (columns: OptionalColumns) => Promise<T>,
): Promise<T> {
  try {
    return await work(await optionalColumns(sql));
  } catch (error) {
    if (!isUndefinedColumn(error)) throw error;
    forgetColumns(sql);
    return await work(await optionalColumns(sql));
  }
}

async function _lookup(sql: Sql): Promise<OptionalColumns> {
  const rows = await sql<{ column_name: string; data_type: string }[]>`
    select column_name::text, data_type::text
    from information_schema.columns
    where table_schema = 'public'
      and table_name = 'usuarios'
      and column_name in ('auth_user_id', 'last_manual_logout_at', 'ultimo_acceso')
  `;
  const types = new Map(rows.map((r) => [r.column_name, r.data_type]));
  return {
    authUserId: types.has("auth_user_id"),
    lastManualLogoutAt: types.has("last_manual_logout_at"),
    ultimoAccesoWithoutTimeZone:
      types.get("ultimo_acceso") === "timestamp without time zone",
  };
}
