/**
 * What the read side costs presence-ping's update, without HTTP in the way:
 * the `ultimo_acceso` index (`index`) and the change-log trigger
 * (`trigger`, migration `20261124020000_create_presence_changes.sql`). On a
 * fresh database with the project's `usuarios` and 100,000 rows, pgbench
 * runs the ping's `SET` (prepared, 4 clients, 40,000 updates of 1,000 users)
 * after a checkpoint, alternately without and with the part, and reports
 * updates/s, WAL bytes per update and the share of HOT updates.
 * {@linkcode measureBulkCost} times the app's own bulk updates before and
 * after the product.
 *
 * @module
 */
import postgres from "postgres";
import { bootstrapDatabase } from "../local/db/bootstrap.ts";
import { PROJECT_DIR, pushMigrations } from "../local/migrate.ts";
import { createTestDatabase } from "../local/testing/database.ts";
import { LEGACY_USUARIOS } from "../tests/support/legacy.ts";
import { runPgbench } from "./pgbench.ts";

/** The table's rows and pgbench's clients and updates per client. */
export const WRITE_COST = { rows: 100_000, clients: 4, perClient: 10_000 };

/** The part of the read side whose write cost is measured. */
export type WritePart = "index" | "trigger";

/** One pgbench pass. */
export interface WriteCostRow {
  part: WritePart;
  enabled: boolean;
  updatesPerS: number;
  walBytesPerUpdate: number;
  hotPercent: number | null;
}

// The trigger pass needs the index's migration too: a deployment with the
// change log has both, so only the trigger varies.
const _MIGRATIONS: Record<WritePart, string[]> = {
  index: ["20261122080000_create_usuarios.sql"],
  trigger: [
    "20261122080000_create_usuarios.sql",
    "20261123000000_create_usuarios_ultimo_acceso_idx.sql",
    "20261124020000_create_presence_changes.sql",
  ],
};

const _TOGGLE: Record<WritePart, (on: boolean) => string> = {
  index: (on) =>
    on
      ? "create index if not exists usuarios_ultimo_acceso_idx on public.usuarios (ultimo_acceso)"
      : "drop index if exists public.usuarios_ultimo_acceso_idx",
  trigger: (on) =>
    `alter table public.usuarios ${
      on ? "enable always" : "disable"
    } trigger usuarios_log_update`,
};

/**
 * Measures `part` off and on, `rounds` times each, on a fresh database of
 * the cluster in TEST_DATABASE_URL (dropped at the end, and by `cleanups`
 * if the run is stopped first).
 */
export async function measureWriteCost(
  part: WritePart,
  rounds: number,
  cleanups: (() => Promise<unknown>)[],
): Promise<WriteCostRow[]> {
  const db = await createTestDatabase();
  cleanups.push(() => db.close());
  const sql = postgres(db.url, { max: 1, prepare: false, onnotice: () => {} });
  const rows: WriteCostRow[] = [];
  try {
    await bootstrapDatabase(db.url); // the roles the migrations grant to
    for (const file of _MIGRATIONS[part]) {
      await sql.unsafe(
        await Deno.readTextFile(`${PROJECT_DIR}supabase/migrations/${file}`),
      );
    }
    await sql`
      insert into public.usuarios (correo, nombre_usuario, auth_user_id,
                                   ultimo_acceso, presence_state)
      select 'f' || g || '@bench.test', 'f' || g, gen_random_uuid(),
             now() - random() * interval '1 day',
             case when random() < 0.3 then 'online' else 'offline' end
      from generate_series(1, ${WRITE_COST.rows}::int) g`;
    await sql`vacuum analyze public.usuarios`;
    const script = `\\set n random(1, 1000)
update public.usuarios
set ultimo_acceso = date_trunc('milliseconds', now()), presence_state = 'online'
where id = :n;
`;
    const { clients, perClient } = WRITE_COST;
    for (let r = 0; r < rounds; r++) {
      for (const enabled of [false, true]) {
        await sql.unsafe(_TOGGLE[part](enabled));
        await sql`select pg_stat_reset_single_table_counters('public.usuarios'::regclass)`;
        await sql`checkpoint`;
        const [{ lsn }] = await sql`select pg_current_wal_lsn()::text as lsn`;
        const run = await runPgbench(db.url, script, {
          c: clients,
          protocol: "prepared",
          transactions: perClient,
        });
        // Counters reach pg_stat_user_tables when the backends report them.
        await new Promise((r) => setTimeout(r, 1500));
        const [s] = await sql`
          select pg_wal_lsn_diff(pg_current_wal_lsn(), ${lsn}::pg_lsn)::float8
                   / ${clients * perClient} as wal,
                 100.0 * n_tup_hot_upd / nullif(n_tup_upd, 0) as hot
          from pg_stat_user_tables where relid = 'public.usuarios'::regclass`;
        rows.push({
          part,
          enabled,
          updatesPerS: run.rps,
          walBytesPerUpdate: Number(s.wal),
          hotPercent: s.hot === null ? null : Number(s.hot),
        });
      }
    }
    return rows;
  } finally {
    await sql.end();
    await db.close();
  }
}

/** One bulk update of a third of the rows; `tempMiB`: its temporary files. */
export interface BulkCostRow {
  table: "before" | "product" | "triggers dropped";
  column: "presence_state" | "ultimo_acceso";
  msPer1000Rows: number;
  hotPercent: number;
  tempMiB: number;
}

/**
 * The app's bulk update of a third of `count` rows in one statement (a
 * nightly reset, a backfill), of a column no product index covers and of
 * one that one covers, `rounds` times each after a vacuum, on a fresh
 * database: on the table before the product (tests/support/legacy.ts,
 * fillfactor 60 for the free space HOT needs), after `supabase db push` (the
 * three lookup indexes, the change-log triggers), then with the triggers
 * dropped (disabled, those with transition tables still fill them).
 */
export async function measureBulkCost(
  rounds: number,
  cleanups: (() => Promise<unknown>)[],
  count = WRITE_COST.rows,
): Promise<BulkCostRow[]> {
  const db = await createTestDatabase();
  cleanups.push(() => db.close());
  const sql = postgres(db.url, { max: 1, prepare: false, onnotice: () => {} });
  const stats = async () => {
    await sql`select pg_stat_force_next_flush()`; // flushed as it goes idle
    return (await sql`
      select n_tup_upd::float8 as upd, n_tup_hot_upd::float8 as hot,
             (select temp_bytes from pg_stat_database
              where datname = current_database())::float8 as temp
      from pg_stat_user_tables where relid = 'public.usuarios'::regclass`)[0];
  };
  const rows: BulkCostRow[] = [];
  const pass = async (table: BulkCostRow["table"]) => {
    for (let r = 0; r < rounds; r++) {
      for (const column of ["presence_state", "ultimo_acceso"] as const) {
        await sql`vacuum analyze public.usuarios`;
        const [a, t0] = [await stats(), performance.now()];
        const bulk = await sql.unsafe(
          `update public.usuarios set ${column} = ${
            column === "ultimo_acceso"
              ? "now()"
              : "case presence_state when 'online' then 'offline' else 'online' end"
          } where id % 3 = 0`,
        );
        const [ms, b] = [performance.now() - t0, await stats()];
        rows.push({
          table,
          column,
          msPer1000Rows: 1000 * ms / bulk.count,
          hotPercent: 100 * (b.hot - a.hot) / (b.upd - a.upd),
          tempMiB: (b.temp - a.temp) / 2 ** 20,
        });
      }
    }
  };
  try {
    await bootstrapDatabase(db.url);
    await sql.unsafe(
      `${LEGACY_USUARIOS} alter table public.usuarios set (fillfactor = 60)`,
    );
    await sql`
      insert into public.usuarios (correo, nombre_usuario, rol, ultimo_acceso,
                                   presence_state)
      select 'f' || g || '@bench.test', 'f' || g, 'usuario',
             now() - random() * interval '1 day', 'offline'
      from generate_series(1, ${count}::int) g`;
    await pass("before");
    await pushMigrations(db.url, { includeSeed: false });
    await pass("product");
    await sql.unsafe(`do $$ declare t name; begin
      for t in select tgname from pg_trigger where not tgisinternal
                 and tgrelid = 'public.usuarios'::regclass
      loop execute format('drop trigger %I on public.usuarios', t); end loop;
    end $$`);
    await pass("triggers dropped");
    return rows;
  } finally {
    await sql.end();
    await db.close();
  }
}
