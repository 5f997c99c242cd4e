/**
 * The database as a hosted project uses it (docs/reliability.md, "Database
 * timeouts"; docs/adoption.md, "Online-safe migrations"):
 *
 * - a migration build that failed and left an INVALID index is rebuilt,
 *   never taken for done (PGlite, or PostgreSQL with TEST_DATABASE_URL);
 * - on PostgreSQL only (PGlite is one single-user session: a lock held in
 *   one connection stops every other, so neither a lock wait nor a
 *   concurrent build can arise): a row locked elsewhere fails that user's
 *   ping with 503 db_timeout while other users' pings are served; and pings
 *   keep landing while the migrations and the upgrade run on a 1 M-row
 *   legacy table.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { bootstrapDatabase } from "../../local/db/bootstrap.ts";
import { pushMigrations } from "../../local/migrate.ts";
import { createTestDatabase } from "../../local/testing/database.ts";
import { e2eTest } from "../support/e2e.ts";
import { invoke } from "../support/invoke.ts";
import { LEGACY_USUARIOS } from "../support/legacy.ts";
import { startTestStack } from "../support/stack.ts";

const UPGRADE_PATH = new URL(
  "../../supabase/upgrades/add_optional_columns.sql",
  import.meta.url,
).pathname;

async function withLegacyDatabase(
  rows: number,
  fn: (url: string, sql: postgres.Sql) => Promise<void>,
): Promise<void> {
  const db = await createTestDatabase();
  const sql = postgres(db.url, { max: 2, prepare: false, onnotice: () => {} });
  try {
    await bootstrapDatabase(db.url);
    await sql.unsafe(LEGACY_USUARIOS);
    await sql`
      insert into public.usuarios (correo, nombre_usuario, presence_state)
      select 'user' || g || '@legacy.test', 'user' || g, 'offline'
      from generate_series(1, ${rows}) g`;
    await fn(db.url, sql);
  } finally {
    await sql.end();
    await db.close();
  }
}

/** Single-key indexes of usuarios: name, valid, key. */
async function lookupIndexes(sql: postgres.Sql) {
  const rows = await sql<{ name: string; valid: boolean; key: string }[]>`
    select c.relname::text as name, i.indisvalid as valid,
           pg_get_indexdef(i.indexrelid, 1, true) as key
    from pg_index i join pg_class c on c.oid = i.indexrelid
    where i.indrelid = 'public.usuarios'::regclass and not i.indisprimary
    order by 1`;
  return rows.map((r) => ({ ...r }));
}

e2eTest(
  "migrations: an INVALID index left by a failed build is dropped and built again, never reused",
  async () => {
    await withLegacyDatabase(1000, async (url, sql) => {
      // Two failed builds (a unique index on repeated values fails late, and
      // leaves the index INVALID): one under the name the migrations give,
      // one under the name Postgres picks for their unnamed build.
      await sql`update public.usuarios set correo = 'same@legacy.test',
                nombre_usuario = 'same' where id in (1, 2)`;
      for (
        const statement of [
          "create unique index concurrently usuarios_correo_lower_idx on public.usuarios (lower(correo))",
          "create unique index concurrently usuarios_lower_idx on public.usuarios (lower(nombre_usuario))",
        ]
      ) {
        await assert.rejects(
          sql.unsafe(statement),
          (e: postgres.PostgresError) => e.code === "23505",
        );
      }
      assert.deepEqual(
        (await lookupIndexes(sql)).map((i) => [i.name, i.valid]),
        [["usuarios_correo_lower_idx", false], ["usuarios_lower_idx", false]],
      );
      await pushMigrations(url, { includeSeed: false });
      assert.deepEqual(await lookupIndexes(sql), [
        {
          name: "usuarios_correo_lower_idx",
          valid: true,
          key: "lower(correo::text)",
        },
        {
          name: "usuarios_nombre_usuario_lower_idx",
          valid: true,
          key: "lower(nombre_usuario::text)",
        },
        {
          name: "usuarios_ultimo_acceso_idx",
          valid: true,
          key: "ultimo_acceso",
        },
      ]);
    });
  },
);

e2eTest(
  "migrations: an owner's index on lower(correo) in another collation (COLLATE \"C\", for prefix searches) is kept, and the migrations' own beside it serves the lookups",
  async () => {
    await withLegacyDatabase(1000, async (url, sql) => {
      await sql`create index usuarios_correo_c_idx
                on public.usuarios (lower(correo) collate "C")`;
      await pushMigrations(url, { includeSeed: false });
      const names = (await lookupIndexes(sql)).filter((i) =>
        i.key.startsWith("lower(correo")
      ).map((i) => [i.name, i.valid]);
      assert.deepEqual(names, [
        ["usuarios_correo_c_idx", true],
        ["usuarios_correo_lower_idx", true],
      ]);
      const plan = await sql.begin(async (tx) => {
        await tx`set local enable_seqscan = off`;
        return await tx`explain select id from public.usuarios
                        where lower(correo) = 'user7@legacy.test'`;
      });
      assert.match(
        plan.map((r) => r["QUERY PLAN"]).join("\n"),
        /usuarios_correo_lower_idx/,
      );
    });
  },
);

if (Deno.env.get("TEST_DATABASE_URL")) {
  e2eTest(
    "presence-ping: a row locked elsewhere fails that user's pings with 503 db_timeout and Retry-After, while other users' pings are served",
    async () => {
      const stack = await startTestStack({ functionEnv: { DB_POOL_MAX: "2" } });
      try {
        const locked = await stack.createUser({ row: { auth_user_id: true } });
        const other = await stack.createUser({ row: { auth_user_id: true } });
        const holder = await stack.sql.reserve();
        try {
          // An open transaction in the SQL editor, say.
          await holder`begin`;
          await holder`select 1 from public.usuarios where id = ${locked.rowId}
                       for update`;
          // As many pings of the locked user as the pool has connections,
          // with the other user's among them.
          const [mine, theirs] = await Promise.all([
            Promise.all(
              [1, 2].map(() => invoke(locked.client, "presence-ping")),
            ),
            Promise.all(
              [1, 2, 3, 4, 5, 6].map(() =>
                invoke(other.client, "presence-ping")
              ),
            ),
          ]);
          for (const res of mine) {
            assert.equal(res.status, 503, JSON.stringify(res.body));
            assert.equal(res.headers.get("retry-after"), "1");
            assert.equal(res.body.code, "db_timeout");
            assert.equal(
              res.body.message,
              "La base de datos no respondió a tiempo",
            );
            // The lock timeout, or, for a ping that first queued for one of
            // the pool's connections, its statement timeout.
            assert.match(
              res.body.error,
              /^(lock not available \(SQLSTATE 55P03\)|statement timeout \(SQLSTATE 57014\))$/,
            );
          }
          for (const res of theirs) {
            assert.equal(res.status, 200, JSON.stringify(res.body));
            assert.equal(res.body.user.id, other.rowId);
          }
        } finally {
          await holder`rollback`;
          holder.release();
        }
        const after = await invoke(locked.client, "presence-ping");
        assert.equal(after.status, 200, JSON.stringify(after.body));
        assert.equal(after.body.user.id, locked.rowId);
      } finally {
        await stack.close();
      }
    },
  );

  e2eTest(
    "migrations: while an autovacuum of usuarios runs, supabase db push and presence.run_ddl outwait it (Postgres cancels it for them) instead of failing",
    async () => {
      const OWNER = `table_owner_${crypto.randomUUID().slice(0, 8)}`;
      await withLegacyDatabase(50_000, async (url, sql) => {
        // An autovacuum that would run for minutes: every page costs its
        // limit, then a 100 ms sleep; started within a second of dead rows.
        await sql`alter system set autovacuum_naptime = 1`;
        await sql`select pg_reload_conf()`;
        await sql`alter table public.usuarios set (
          autovacuum_vacuum_threshold = 0, autovacuum_vacuum_scale_factor = 0,
          autovacuum_vacuum_cost_delay = 100, autovacuum_vacuum_cost_limit = 1)`;
        const vacuuming = async () => {
          for (let i = 0; i < 600; i++) {
            const rows = await sql`
              select 1 from pg_stat_activity
              where backend_type = 'autovacuum worker'
                and datname = current_database()
                and query like '%public.usuarios%'`;
            if (rows.length) return;
            await new Promise((r) => setTimeout(r, 100));
          }
          assert.fail("no autovacuum of usuarios started in 60 s");
        };
        await sql.unsafe(`create role ${OWNER} nologin nosuperuser`);
        try {
          await sql`update public.usuarios set nombre_usuario = nombre_usuario
                    where id % 2 = 0`;
          await vacuuming();
          await pushMigrations(url, { includeSeed: false });
          // As the table's owner without pg_read_all_stats, as a project's
          // postgres may be: other roles' backends are hidden from it.
          await sql.unsafe(`
            alter table public.usuarios owner to ${OWNER};
            grant usage on schema presence to ${OWNER};
            grant execute on function presence.run_ddl(text) to ${OWNER}`);
          await vacuuming(); // started again: its dead rows are still there
          await sql.begin(async (tx) => {
            await tx.unsafe(`set local role ${OWNER}`);
            await tx`select presence.run_ddl(
              'alter table public.usuarios add column av_probe integer')`;
          });
          const [probe] = await sql`
            select count(*)::int as n from pg_attribute
            where attrelid = 'public.usuarios'::regclass
              and attname = 'av_probe'`;
          assert.equal(probe.n, 1);
        } finally {
          await sql`alter table public.usuarios reset (
            autovacuum_vacuum_threshold, autovacuum_vacuum_scale_factor,
            autovacuum_vacuum_cost_delay, autovacuum_vacuum_cost_limit)`;
          await sql.unsafe(`
            alter table public.usuarios owner to current_user;
            drop owned by ${OWNER};
            drop role ${OWNER}`);
          await sql`alter system reset autovacuum_naptime`;
          await sql`select pg_reload_conf()`;
        }
      });
    },
  );

  e2eTest(
    "migrations: pings keep landing while supabase db push and the upgrade run on a 1 M-row legacy table",
    async () => {
      await withLegacyDatabase(1_000_000, async (url, sql) => {
        await sql`analyze public.usuarios`;
        const pinger = postgres(url, { max: 1, prepare: false });
        const landed: number[] = [];
        let running = true;
        // The app's own writes, and what a ping does on a legacy table:
        // match by email, set the time and state. A write blocked by a
        // migration's lock waits here, and the gap shows it.
        const pings = (async () => {
          let n = 0;
          while (running) {
            n = (n % 1000) + 1;
            await pinger`
              update public.usuarios set ultimo_acceso = now(),
                presence_state = 'online'
              where id = ${n}`;
            landed.push(performance.now());
            await new Promise((r) => setTimeout(r, 20));
          }
        })();
        const phases: Record<string, number> = {};
        const timed = async (name: string, fn: () => Promise<unknown>) => {
          const t0 = performance.now();
          await fn();
          phases[name] = performance.now() - t0;
          return [t0, performance.now()] as const;
        };
        let from = 0, to = 0;
        try {
          const [a] = await timed(
            "supabase db push",
            () => pushMigrations(url, { includeSeed: false }),
          );
          const [, b] = await timed("upgrade", async () => {
            const { code, stderr } = await new Deno.Command("psql", {
              args: [
                url,
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-f",
                UPGRADE_PATH,
              ],
              env: { PGSSLMODE: "disable" },
              stdout: "null",
              stderr: "piped",
            }).output();
            assert.equal(code, 0, new TextDecoder().decode(stderr));
          });
          from = a;
          to = b;
        } finally {
          running = false;
          await pings;
          await pinger.end();
        }
        const during = landed.filter((t) => t >= from && t <= to);
        const marks = [from, ...during, to];
        const gaps = marks.slice(1).map((t, i) => t - marks[i]);
        const maxGap = Math.max(...gaps);
        console.log(
          `1 M rows: ${
            Object.entries(phases).map(([k, v]) => `${k} ${Math.round(v)} ms`)
              .join(", ")
          }; ${during.length} pings landed during them, longest gap ${
            Math.round(maxGap)
          } ms`,
        );
        // Never blocked for the whole run: pings landed all along it, and
        // no wait took a large part of it.
        assert.ok(during.length >= 10, `${during.length} pings landed`);
        assert.ok(maxGap < (to - from) / 2, `longest gap ${maxGap} ms`);
        const found = await lookupIndexes(sql);
        assert.deepEqual(found.map((i) => [i.name, i.valid]), [
          ["usuarios_auth_user_id_key", true],
          ["usuarios_correo_lower_idx", true],
          ["usuarios_nombre_usuario_lower_idx", true],
          ["usuarios_ultimo_acceso_idx", true],
        ]);
        const [{ notNull, checks }] = await sql`
          select a.attnotnull as "notNull",
                 (select count(*)::int from pg_constraint
                  where conrelid = 'public.usuarios'::regclass
                    and contype = 'c' and convalidated) as checks
          from pg_attribute a
          where a.attrelid = 'public.usuarios'::regclass
            and a.attname = 'presence_state'`;
        assert.equal(notNull, true);
        assert.equal(checks, 1);
      });
    },
  );
}
