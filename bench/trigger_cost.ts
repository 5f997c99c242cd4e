/**
 * `deno run -A bench/trigger_cost.ts [--rounds=N] [--database-url=URL]`:
 * what the change-log triggers (which presence's changes-since reads need,
 * migration `20261124020000_create_presence_changes.sql`) cost a write of
 * `usuarios`, without HTTP in the way: on a fresh database with the
 * project's `usuarios`, its `ultimo_acceso` index and 100,000 rows, pgbench
 * runs the ping's `SET` (prepared, 4 clients, 40,000 updates of 1,000 users)
 * after a checkpoint, alternately with the update trigger disabled and
 * enabled, and prints updates/s and WAL bytes per update.
 *
 * @module
 */
import { parseArgs } from "node:util";
import postgres from "postgres";
import { PROJECT_DIR } from "../local/migrate.ts";
import { createTestDatabase } from "../local/testing/database.ts";
import { ensurePostgres } from "../tests/support/postgres.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: { rounds: { type: "string" }, "database-url": { type: "string" } },
});
const rounds = Number(values.rounds ?? 2);
if (values["database-url"]) {
  Deno.env.set("TEST_DATABASE_URL", values["database-url"]);
}
const pg = await ensurePostgres();
if (pg.url === null) throw new Error(`No PostgreSQL: ${pg.reason}`);
Deno.env.set("TEST_DATABASE_URL", pg.url);
const db = await createTestDatabase();
const sql = postgres(db.url, { max: 1, prepare: false, onnotice: () => {} });
const script = await Deno.makeTempFile({ suffix: ".sql" });
try {
  for (
    const file of [
      "20261122080000_create_usuarios.sql",
      "20261123000000_create_usuarios_ultimo_acceso_idx.sql",
      "20261124020000_create_presence_changes.sql",
    ]
  ) {
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
    from generate_series(1, 100000) g`;
  await sql`vacuum analyze public.usuarios`;
  await Deno.writeTextFile(
    script,
    `\\set n random(1, 1000)
update public.usuarios
set ultimo_acceso = date_trunc('milliseconds', now()), presence_state = 'online'
where id = :n;
`,
  );
  const clients = 4, perClient = 10_000, updates = clients * perClient;
  console.log(
    `usuarios: 100,000 rows; ${updates} updates per pass (pgbench -M prepared -c ${clients})`,
  );
  console.log("trigger  updates/s  WAL B/update");
  for (let r = 0; r < rounds; r++) {
    for (const logged of [false, true]) {
      await sql.unsafe(
        `alter table public.usuarios ${
          logged ? "enable always" : "disable"
        } trigger usuarios_log_update`,
      );
      await sql`checkpoint`;
      const [{ lsn }] = await sql`select pg_current_wal_lsn()::text as lsn`;
      const out = await new Deno.Command("pgbench", {
        args: [
          "-n",
          "-M",
          "prepared",
          "-c",
          String(clients),
          "-j",
          "2",
          "-t",
          String(perClient),
          "-f",
          script,
          db.url,
        ],
        stdout: "piped",
        stderr: "piped",
      }).output();
      const text = new TextDecoder().decode(out.stdout);
      const tps = Number(/tps = ([\d.]+)/.exec(text)?.[1] ?? NaN);
      // Counters reach pg_stat_user_tables when the backends report them.
      await new Promise((r) => setTimeout(r, 1500));
      const [s] = await sql`
        select pg_wal_lsn_diff(pg_current_wal_lsn(), ${lsn}::pg_lsn)::float8
                 / ${updates} as wal`;
      console.log(
        `${logged ? "yes" : "no "}      ${tps.toFixed(0).padStart(9)}  ${
          Number(s.wal).toFixed(0).padStart(12)
        }`,
      );
    }
  }
} finally {
  await Deno.remove(script).catch(() => {});
  await sql.end();
  await db.close();
}
