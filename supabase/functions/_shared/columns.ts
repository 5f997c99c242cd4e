/**
 * Which optional `usuarios` columns this deployment has.
 *
 * `auth_user_id` and `last_manual_logout_at` may be absent in older
 * deployments (spec section 2). The answer is cached per isolate and pool,
 * and dropped when a statement fails with `undefined_column`, so a column
 * removed while the function runs is noticed on the next request.
 *
 * An adopted table may have `auth_user_id` without an index, which the
 * migrations cannot add (a concurrent build cannot be conditional on the
 * column). Each lookup that finds one logs {@linkcode UNINDEXED_AUTH_USER_ID}
 * as a warning, so a hosted project sees it in its function logs; the
 * Supabase CLI does not show a migration's notices.
 *
 * @module
 */
import { isUndefinedColumn, remember, type Sql } from "./db.ts";
import { logEvent } from "./log.ts";

/** Presence of the optional columns, and how `ultimo_acceso` is typed. */
export interface OptionalColumns {
  readonly authUserId: boolean;
  /**
   * `false`: no valid index leads with `auth_user_id`, so every match by it
   * reads the whole table. True (as {@linkcode readColumns} says) when an
   * index serves it or the column is absent.
   */
  readonly authUserIdIndexed?: boolean;
  readonly lastManualLogoutAt: boolean;
  /**
   * `ultimo_acceso` is `timestamp without time zone` (older deployments):
   * it then holds UTC wall-clock time, written and read through
   * `at time zone 'UTC'` so that neither the session's `TimeZone` nor the
   * function's own time zone shifts it.
   */
  readonly ultimoAccesoWithoutTimeZone?: boolean;
}

/** What a table with an unindexed `auth_user_id` is told (functions' logs, `npm start`). */
export const UNINDEXED_AUTH_USER_ID =
  "public.usuarios: auth_user_id has no index, so finding a caller's row by it reads the whole table; supabase/upgrades/add_optional_columns.sql adds one (docs/adoption.md)";

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
    const lookup = readColumns(sql).then((columns) => {
      if (columns.authUserIdIndexed === false) {
        logEvent("warn", UNINDEXED_AUTH_USER_ID);
      }
      return columns;
    });
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

/** Reads the optional columns of `public.usuarios` now, in one statement. */
export async function readColumns(sql: Sql): Promise<OptionalColumns> {
  const rows = await sql<
    { column_name: string; data_type: string; indexed: boolean }[]
  >`
    select c.column_name::text, c.data_type::text,
      exists (
        select 1 from pg_index i
        join pg_attribute a on a.attrelid = i.indrelid
          and a.attnum = i.indkey[0]
        where i.indrelid = to_regclass('public.usuarios')
          and a.attname = c.column_name and i.indisvalid
      ) as indexed
    from information_schema.columns c
    where c.table_schema = 'public'
      and c.table_name = 'usuarios'
      and c.column_name in ('auth_user_id', 'last_manual_logout_at', 'ultimo_acceso')
  `;
  const byName = new Map(rows.map((r) => [r.column_name, r]));
  const authUserId = byName.get("auth_user_id");
  return {
    authUserId: authUserId !== undefined,
    authUserIdIndexed: authUserId?.indexed ?? true,
    lastManualLogoutAt: byName.has("last_manual_logout_at"),
    ultimoAccesoWithoutTimeZone:
      byName.get("ultimo_acceso")?.data_type === "timestamp without time zone",
  };
}
