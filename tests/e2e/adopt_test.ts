/**
 * Adopting an existing project (docs/adoption.md):
 * each legacy shape of `public.usuarios` is created first, in a fresh
 * database (PGlite, or PostgreSQL with TEST_DATABASE_URL) whose session
 * time zone is not UTC, then the stack is started on it with `databaseUrl`
 * as `npm start -- --database-url` does. The migrations must leave every
 * column, row and the RLS setting as they were and write no fixture; the
 * functions, driven through supabase-js, must work on the shape; a second
 * start applies nothing; the upgrade script names the rows that stop it,
 * then keeps the schema's promises.
 */
import assert from "node:assert/strict";
import { createClient, type SupabaseClient } from "@supabase/supabase-js";
import postgres from "postgres";
import { generateSigningKey, type SigningKey } from "../../local/auth/mod.ts";
import { bootstrapDatabase } from "../../local/db/bootstrap.ts";
import { pushMigrations } from "../../local/migrate.ts";
import { StartError } from "../../local/start_error.ts";
import { type Stack, startStack } from "../../local/stack.ts";
import { UNINDEXED_AUTH_USER_ID } from "../../supabase/functions/_shared/columns.ts";
import {
  createTestDatabase,
  type TestDatabase,
} from "../../local/testing/database.ts";
import { e2eTest } from "../support/e2e.ts";
import { signUpByMail } from "../support/inbox.ts";
import { invoke } from "../support/invoke.ts";
import { logLines, warnings } from "../support/logs.ts";
import { LEGACY_USUARIOS } from "../support/legacy.ts";

const ROOT = new URL("../../", import.meta.url);
const UPGRADE_PATH = new URL(
  "supabase/upgrades/add_optional_columns.sql",
  ROOT,
).pathname;
const REMOVE_PATH = new URL(
  "supabase/upgrades/remove_presence.sql",
  ROOT,
).pathname;
const FIRST_MIGRATION = await Deno.readTextFile(
  new URL("supabase/migrations/20261122080000_create_usuarios.sql", ROOT),
);
const ISO_MS_Z = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
// Not UTC, no daylight saving: a time written or read in the session's
// zone instead of UTC is 5 h 30 min off.
const SESSION_TIME_ZONE = "Asia/Kolkata";
const ADMIN = "boss@legacy.test";

/** A legacy `usuarios` and what adopting it must give. */
interface Shape {
  readonly name: string;
  /** DDL and rows, run before the stack ever sees the database. */
  readonly setup: string;
  /** An email with a row (in another case), its expected row id. */
  readonly user: { email: string; rowId: number };
  /** The plain lookup indexes expected (an adopted table gets no unique one). */
  readonly indexes: readonly string[];
  /** Text the upgrade's error must contain for each blocking row. */
  readonly blocking: readonly string[];
  /** Statement the owner runs to fix the blocking rows. */
  readonly fix: string;
  /** Whether seed.sql fits the upgraded table (its id has a default). */
  readonly seedable: boolean;
  /** Whether the legacy table already has `auth_user_id`. */
  readonly hasAuthUserId: boolean;
}

const SHAPES: readonly Shape[] = [
  {
    name:
      "the issue's shape (serial id, varchar, timestamp, nullable rol and state, duplicates in case)",
    setup: `${LEGACY_USUARIOS}
      insert into public.usuarios (correo, nombre_usuario, rol, ultimo_acceso, presence_state) values
        ('Ana@Legacy.test', 'ana', 'usuario', '2020-01-01 10:00:00', 'online'),
        ('ana@legacy.test', 'ANA', null, null, null),
        ('bruno@legacy.test', 'bruno', 'admin', null, 'away'),
        (null, 'carla', 'usuario', null, 'offline');
    `,
    user: { email: "ana@legacy.test", rowId: 1 },
    indexes: ["usuarios_correo_lower_idx", "usuarios_nombre_usuario_lower_idx"],
    blocking: ["id 2 (null)", "id 3 ('away')"],
    fix:
      `update public.usuarios set presence_state = 'offline' where presence_state is null or presence_state not in ('online', 'offline')`,
    seedable: true,
    hasAuthUserId: false,
  },
  {
    name:
      "integer ids, text, timestamptz, a naive last_manual_logout_at, RLS with the owner's policy",
    setup: `
      create table public.usuarios (
        id integer primary key,
        correo text,
        nombre_usuario text,
        rol text,
        ultimo_acceso timestamptz,
        presence_state text,
        last_manual_logout_at timestamp
      );
      alter table public.usuarios enable row level security;
      create policy usuarios_read on public.usuarios for select to anon using (true);
      insert into public.usuarios values
        (10, 'dora@legacy.test', 'dora', null, null, null, null),
        (20, 'eva@legacy.test', 'eva', 'usuario', now(), 'Offline', null),
        (30, null, 'bruno', 'usuario', null, 'ONLINE', null);
    `,
    user: { email: "DORA@legacy.test", rowId: 10 },
    indexes: [
      "usuarios_correo_lower_idx",
      "usuarios_nombre_usuario_lower_idx",
    ],
    blocking: ["id 20 ('Offline')", "id 30 ('ONLINE')"],
    fix:
      `update public.usuarios set presence_state = lower(presence_state) where presence_state in ('Offline', 'ONLINE')`,
    seedable: false,
    hasAuthUserId: false,
  },
  {
    name:
      "identity ids, auth_user_id without unique and repeated, timestamp(0), usernames repeated in case",
    setup: `
      create table public.usuarios (
        id bigint generated always as identity primary key,
        correo varchar(320),
        nombre_usuario varchar(64),
        auth_user_id uuid,
        rol varchar(20) default 'user',
        ultimo_acceso timestamp(0),
        presence_state varchar(10) default 'offline'
      );
      insert into public.usuarios (correo, nombre_usuario, auth_user_id, rol, presence_state) values
        ('flor@legacy.test', 'flor', null, 'user', 'online'),
        ('gus@legacy.test', 'Gus', '11111111-1111-4111-8111-111111111111', 'user', 'offline'),
        ('gus2@legacy.test', 'gus', '11111111-1111-4111-8111-111111111111', null, 'offline');
    `,
    user: { email: "Flor@Legacy.test", rowId: 1 },
    indexes: [
      "usuarios_correo_lower_idx",
      "usuarios_nombre_usuario_lower_idx",
    ],
    blocking: ["11111111-1111-4111-8111-111111111111 (ids 2, 3)"],
    fix: `update public.usuarios set auth_user_id = null where id = 3`,
    seedable: true,
    hasAuthUserId: true,
  },
];

/** Columns, rows, constraints, RLS and policies of `public.usuarios`. */
async function snapshot(sql: postgres.Sql): Promise<string> {
  // Times as UTC text, whatever zone the session is in.
  return await sql.begin(async (tx) => {
    await tx`set local timezone to 'UTC'`;
    return await _snapshot(tx);
  });
}

async function _snapshot(sql: postgres.TransactionSql): Promise<string> {
  const columns = await sql`
    select column_name, data_type, character_maximum_length, is_nullable,
           column_default
    from information_schema.columns
    where table_schema = 'public' and table_name = 'usuarios'
    order by ordinal_position`;
  const rows = await sql`
    select to_jsonb(u)::text as row from public.usuarios u order by id`;
  const constraints = await sql`
    select conname, pg_get_constraintdef(oid) as def from pg_constraint
    where conrelid = 'public.usuarios'::regclass order by 1`;
  const [rls] = await sql`
    select relrowsecurity, relforcerowsecurity from pg_class
    where oid = 'public.usuarios'::regclass`;
  const policies = await sql`
    select policyname, cmd, roles::text, qual from pg_policies
    where schemaname = 'public' and tablename = 'usuarios' order by 1`;
  return JSON.stringify({ columns, rows, constraints, rls, policies });
}

async function assertSessionTimeZone(sql: postgres.Sql): Promise<void> {
  const [{ TimeZone }] = await sql`show timezone`;
  assert.equal(TimeZone, SESSION_TIME_ZONE);
}

async function indexes(sql: postgres.Sql): Promise<Map<string, boolean>> {
  const rows = await sql<{ name: string; unique: boolean }[]>`
    select c.relname::text as name, i.indisunique as unique
    from pg_index i join pg_class c on c.oid = i.indexrelid
    where i.indrelid = 'public.usuarios'::regclass and not i.indisprimary`;
  return new Map(rows.map((r) => [r.name, r.unique]));
}

/** The stored time, read as UTC wall-clock text whatever the column type. */
async function storedUtc(sql: postgres.Sql, id: number): Promise<string> {
  const [{ naive }] = await sql<{ naive: boolean }[]>`
    select data_type = 'timestamp without time zone' as naive
    from information_schema.columns
    where table_schema = 'public' and table_name = 'usuarios'
      and column_name = 'ultimo_acceso'`;
  const value = naive
    ? sql`u.ultimo_acceso`
    : sql`u.ultimo_acceso at time zone 'UTC'`;
  const [{ text }] = await sql<{ text: string }[]>`
    select to_char(${value}, 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as text
    from public.usuarios u where u.id = ${id}`;
  return text;
}

function client(stack: Stack): SupabaseClient {
  return createClient(stack.apiUrl, stack.anonKey, {
    auth: { persistSession: false, autoRefreshToken: false },
  });
}

/**
 * Signs an identity up and confirms it through the mailed link (the stack
 * confirms by mail, so the account proves its address), and returns a
 * client signed in as it.
 */
async function signedIn(
  stack: Stack,
  email: string,
): Promise<Identity> {
  const password = `pw-${crypto.randomUUID()}`;
  return {
    id: await signUpByMail(client(stack), stack.apiUrl, email, password),
    client: await signIn(stack, email, password),
    email,
    password,
  };
}

/** A client of `stack` signed in with a password. */
async function signIn(
  stack: Stack,
  email: string,
  password: string,
): Promise<SupabaseClient> {
  const user = client(stack);
  const { error } = await user.auth.signInWithPassword({ email, password });
  if (error) throw error;
  return user;
}

interface Identity {
  readonly id: string;
  readonly email: string;
  readonly password: string;
  readonly client: SupabaseClient;
}

async function start(
  db: TestDatabase,
  signingKey: SigningKey,
  options: { seed?: boolean } = {},
): Promise<{ stack: Stack; log: string }> {
  let log = "";
  const stack = await startStack({
    signingKey,
    apiPort: 0,
    dbPort: 0,
    dataDir: null,
    databaseUrl: db.url,
    // The skip-write setting on: its reading of the stored state and time
    // must cope with legacy values (null, a naive timestamp) too.
    functionEnv: { ADMIN_EMAILS: ADMIN, PRESENCE_MIN_WRITE_INTERVAL_S: "60" },
    // Confirmations on, as docs/security.md's Security notes ask of production: an
    // account confirmed through its mailed link then proves its address,
    // and sync may link it.
    emailConfirmations: true,
    seed: options.seed,
    log: (line) => log += `${line}\n`,
  });
  return { stack, log };
}

/**
 * Runs `test` on a fresh database (PGlite, or PostgreSQL with
 * TEST_DATABASE_URL) and one connection to it, then drops both.
 */
async function onFreshDatabase(
  test: (db: TestDatabase, sql: postgres.Sql) => Promise<void>,
  onnotice: (notice: postgres.Notice) => void = () => {},
): Promise<void> {
  const db = await createTestDatabase();
  const sql = postgres(db.url, { max: 1, prepare: false, onnotice });
  try {
    await test(db, sql);
  } finally {
    await sql.end();
    await db.close();
  }
}

/** The upgrade script's failure: psql's `ERROR:` line. */
class UpgradeError extends Error {}

/**
 * Runs the upgrade script as its owner would (`psql -v ON_ERROR_STOP=1 -f`);
 * resolves to its NOTICEs, rejects with an {@linkcode UpgradeError}.
 */
async function applyUpgrade(
  url: string,
  script = UPGRADE_PATH,
): Promise<string[]> {
  const { code, stderr } = await new Deno.Command("psql", {
    args: [url, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", script],
    env: { PGSSLMODE: "disable", PGTZ: "UTC" },
    stdout: "null",
    stderr: "piped",
  }).output();
  const lines = new TextDecoder().decode(stderr).split("\n");
  const error = lines.find((l) => /\bERROR:/.test(l));
  if (code !== 0 || error) {
    throw new UpgradeError(error ?? lines.join("\n"));
  }
  return lines.filter((l) => /\bNOTICE:/.test(l)).map((l) =>
    l.replace(/^.*NOTICE:\s*/, "")
  );
}

e2eTest(
  "remove_presence.sql: takes out the triggers, the presence schema and their history, keeps usuarios and the audit trail, the app writes on, a second run changes nothing, and db push --include-all puts it back",
  async () => {
    await onFreshDatabase(async (db, sql) => {
      await bootstrapDatabase(db.url);
      await sql.unsafe(SHAPES[0].setup);
      await pushMigrations(db.url, { includeSeed: false });
      await sql`insert into public.usuarios (correo) values ('kept@x.test')`;
      await sql`insert into public.auth_sync_audit (action, outcome)
                values ('update', 'ok')`;
      const before = await snapshot(sql);

      const notices = await applyUpgrade(db.url, REMOVE_PATH);
      assert.deepEqual(notices.filter((n) => n.startsWith("dropped")).sort(), [
        "dropped the presence schema (its functions and presence.changes)",
        "dropped the trigger usuarios_log_delete on public.usuarios",
        "dropped the trigger usuarios_log_insert on public.usuarios",
        "dropped the trigger usuarios_log_replica_rows on public.usuarios",
        "dropped the trigger usuarios_log_truncate on public.usuarios",
        "dropped the trigger usuarios_log_update on public.usuarios",
      ]);
      assert.ok(
        notices.includes(
          "kept public.auth_sync_audit (drop table public.auth_sync_audit;)",
        ),
        notices.join("\n"),
      );
      const [state] = await sql`
        select to_regnamespace('presence') is null as schema_gone,
               (select count(*)::int from pg_trigger
                where tgrelid = 'public.usuarios'::regclass
                  and not tgisinternal) as triggers,
               (select count(*)::int from public.auth_sync_audit) as audit,
               (select count(*)::int from supabase_migrations.schema_migrations
                where version = '20261124020000') as history`;
      assert.deepEqual({ ...state }, {
        schema_gone: true,
        triggers: 0,
        audit: 1,
        history: 0,
      });
      assert.equal(await snapshot(sql), before, "usuarios as it was");
      await sql.unsafe(`
        insert into public.usuarios (correo) values ('after@x.test');
        update public.usuarios set rol = 'x';
        delete from public.usuarios where correo = 'after@x.test';`);

      assert.deepEqual(
        (await applyUpgrade(db.url, REMOVE_PATH)).filter((n) =>
          n.startsWith("dropped")
        ),
        [],
      );

      // Every migration that makes something of the presence schema is in
      // the script's list, so none stays recorded once its objects are gone.
      const script = await Deno.readTextFile(REMOVE_PATH);
      for await (
        const f of Deno.readDir(new URL("supabase/migrations/", ROOT))
      ) {
        const text = await Deno.readTextFile(
          new URL(`supabase/migrations/${f.name}`, ROOT),
        );
        const makes =
          /(create|alter)\s+(or\s+replace\s+)?(function|table|schema(\s+if\s+not\s+exists)?)\s+presence\b|create\s+trigger\s+usuarios_log_/i;
        if (makes.test(text.replace(/--.*$/gm, ""))) {
          const version = f.name.slice(0, 14);
          assert.ok(script.includes(`'${version}'`), f.name);
        }
      }

      await pushMigrations(db.url, { includeSeed: false, includeAll: true });
      const [back] = await sql`
        select to_regprocedure('presence.record_ping(uuid,uuid,text,text,text[],integer)')
                 is not null as functions,
               (select count(*)::int from pg_trigger
                where tgrelid = 'public.usuarios'::regclass
                  and not tgisinternal) as triggers`;
      assert.deepEqual({ ...back }, { functions: true, triggers: 5 });
    });
  },
);

e2eTest(
  "adopt: the first migration, run on an existing table, changes nothing, adds no index and says so in a NOTICE",
  async () => {
    const notices: string[] = [];
    await onFreshDatabase(async (_db, sql) => {
      await sql.unsafe(SHAPES[0].setup);
      const before = await snapshot(sql);
      await sql.unsafe(FIRST_MIGRATION);
      assert.ok(
        notices.some((n) =>
          /already exists: adopted as it is/.test(n) &&
          n.includes("built concurrently")
        ),
        notices.join("\n"),
      );
      assert.equal(await snapshot(sql), before);
      assert.deepEqual(Object.fromEntries(await indexes(sql)), {});
    }, (n) => notices.push(n.message));
  },
);

e2eTest(
  "adopt: a table another role owns stops the first migration with whose it is and how to hand it over (supabase_admin's: through Supabase), changing nothing",
  async () => {
    await onFreshDatabase(async (_db, sql) => {
      const tag = crypto.randomUUID().slice(0, 8);
      const owner = `legacy_owner_${tag}`;
      const pusher = `pusher_${tag}`;
      await sql.unsafe(`
        create role ${owner} nologin nosuperuser;
        create role ${pusher} nologin nosuperuser;
        ${SHAPES[0].setup}
        alter table public.usuarios owner to ${owner};`);
      const before = await snapshot(sql);
      try {
        const refused = await sql.begin(async (tx) => {
          await tx.unsafe(`set local role ${pusher}`);
          await tx.unsafe(FIRST_MIGRATION);
        }).then(() => null, (e: unknown) => e as postgres.PostgresError);
        assert.equal(refused?.code, "42501");
        assert.equal(
          refused?.message,
          `public.usuarios belongs to ${owner}, and ${pusher} may not comment, index or add triggers to it`,
        );
        assert.match(
          String(refused?.hint),
          new RegExp(
            `alter table public.usuarios owner to ${pusher}.*supabase_admin.*support`,
          ),
        );
        assert.equal(await snapshot(sql), before);
      } finally {
        await sql.unsafe(`
          drop table public.usuarios;
          drop role ${owner};
          drop role ${pusher};`);
      }
    });
  },
);

e2eTest(
  "adopt: on an empty database the first migration creates the table as before, and running it again changes nothing",
  async () => {
    await onFreshDatabase(async (_db, sql) => {
      await sql.unsafe(FIRST_MIGRATION);
      const columns = await sql`
        select column_name, data_type, is_nullable, column_default,
               is_identity, identity_generation,
               col_description('public.usuarios'::regclass, ordinal_position)
                 is not null as commented
        from information_schema.columns
        where table_schema = 'public' and table_name = 'usuarios'
        order by ordinal_position`;
      const c = (
        name: string,
        type: string,
        nullable: string,
        def: unknown,
      ) => ({
        column_name: name,
        data_type: type,
        is_nullable: nullable,
        column_default: def,
        is_identity: name === "id" ? "YES" : "NO",
        identity_generation: name === "id" ? "BY DEFAULT" : null,
        commented: name !== "id",
      });
      assert.deepEqual(columns.map((r) => ({ ...r })), [
        c("id", "bigint", "NO", null),
        c("correo", "text", "YES", null),
        c("nombre_usuario", "text", "YES", null),
        c("auth_user_id", "uuid", "YES", null),
        c("rol", "text", "NO", "'usuario'::text"),
        c("ultimo_acceso", "timestamp with time zone", "YES", null),
        c("presence_state", "text", "NO", "'offline'::text"),
        c("last_manual_logout_at", "timestamp with time zone", "YES", null),
      ]);
      const constraints = await sql`
        select conname, contype, pg_get_constraintdef(oid) as def
        from pg_constraint
        where conrelid = 'public.usuarios'::regclass and contype <> 'n'
        order by 1`;
      assert.deepEqual(constraints.map((r) => [r.conname, r.contype]), [
        ["usuarios_auth_user_id_key", "u"],
        ["usuarios_pkey", "p"],
        ["usuarios_presence_state_check", "c"],
      ]);
      assert.match(constraints[2].def, /'online'.*'offline'/);
      assert.deepEqual(
        Object.fromEntries(await indexes(sql)),
        {
          usuarios_auth_user_id_key: true,
          usuarios_correo_lower_key: true,
          usuarios_nombre_usuario_lower_key: true,
        },
      );
      const [table] = await sql`
        select relrowsecurity,
               obj_description(oid, 'pg_class') is not null as commented,
               (select count(*)::int from pg_policies
                where schemaname = 'public' and tablename = 'usuarios')
                 as policies
        from pg_class where oid = 'public.usuarios'::regclass`;
      assert.deepEqual({ ...table }, {
        relrowsecurity: true,
        commented: true,
        policies: 0,
      });

      const before = await snapshot(sql);
      const indexesBefore = await indexes(sql);
      await sql.unsafe(FIRST_MIGRATION);
      assert.equal(await snapshot(sql), before);
      assert.deepEqual(await indexes(sql), indexesBefore);
    });
  },
);

e2eTest(
  "adopt: on a table adopted before the key check, a row without an id is not logged and the app's writes of it pass (an insert without an id, a bulk update, a delete)",
  async () => {
    await onFreshDatabase(async (db, sql) => {
      await bootstrapDatabase(db.url);
      await sql.unsafe(`
        create table public.usuarios (
          id integer primary key, correo text, nombre_usuario text, rol text,
          ultimo_acceso timestamptz, presence_state text
        );
        insert into public.usuarios (id, correo) values (1, 'a@x.test');`);
      await pushMigrations(db.url, { includeSeed: false });
      // What such a table was like: its key gone, rows without an id.
      await sql.unsafe(`
        alter table public.usuarios drop constraint usuarios_pkey;
        alter table public.usuarios alter column id drop not null;
        insert into public.usuarios (correo) values ('c@x.test');
        update public.usuarios set presence_state = 'offline';
        delete from public.usuarios where correo = 'c@x.test';`);
      const logged = await sql`select user_id::int as id from presence.changes
                               order by 1`;
      assert.deepEqual(logged.map((r) => r.id), [1]);
    });
  },
);

e2eTest(
  "adopt: a table whose columns the functions cannot use (a uuid id, an id that is not the key; a varchar auth_user_id, text ultimo_acceso, enum presence_state) stops the push before the triggers, naming each column, and the app's writes keep working",
  async () => {
    const cases = [{
      setup: `
        create table public.usuarios (
          id uuid primary key default gen_random_uuid(),
          correo text, nombre_usuario text, rol text,
          ultimo_acceso timestamptz, presence_state text
        );`,
      named: ["id is uuid, not an integer"],
    }, {
      setup: `
        create type public.estado as enum ('online', 'offline', 'away');
        create domain public.iso_time as text;
        create table public.usuarios (
          id serial primary key,
          correo text, nombre_usuario text, rol text,
          auth_user_id varchar(36),
          ultimo_acceso public.iso_time,
          presence_state public.estado
        );`,
      named: [
        "auth_user_id is character varying(36), not uuid",
        "ultimo_acceso is iso_time, not a timestamp",
        "presence_state is estado, not text",
      ],
    }, {
      // A table grown by hand: ids typed in, some missing, one twice.
      setup: `
        create table public.usuarios (
          id integer, correo text, nombre_usuario text, rol text,
          ultimo_acceso timestamptz, presence_state text
        );
        insert into public.usuarios (id, correo) values
          (1, 'a@x.test'), (2, 'b@x.test'), (2, 'b2@x.test'), (null, 'c@x.test');`,
      named: ["id is not the rows' key"],
    }];
    for (const { setup, named } of cases) {
      await onFreshDatabase(async (db, sql) => {
        await bootstrapDatabase(db.url);
        await sql.unsafe(setup);
        const refused = await pushMigrations(db.url, { includeSeed: false })
          .then(() => null, (e: unknown) => e);
        assert.ok(refused instanceof StartError, String(refused));
        assert.match(refused.message, /20261124020000_create_presence_changes/);
        assert.match(refused.message, /cannot be adopted as it is/);
        for (const part of named) {
          assert.ok(refused.message.includes(part), refused.message);
        }
        // Nothing of that file exists, and the app writes as before.
        const [{ changes, triggers }] = await sql`
          select pg_catalog.to_regclass('presence.changes') is not null as changes,
                 (select count(*)::int from pg_catalog.pg_trigger
                  where tgrelid = 'public.usuarios'::regclass
                    and not tgisinternal) as triggers`;
        assert.deepEqual({ changes, triggers }, {
          changes: false,
          triggers: 0,
        });
        await sql.unsafe(`
          insert into public.usuarios (correo, rol) values ('app@x.test', 'user');
          update public.usuarios set rol = 'admin' where correo = 'app@x.test';
          delete from public.usuarios where correo = 'app@x.test';`);
      });
    }
  },
);

for (const shape of SHAPES) {
  let db: TestDatabase;
  let sql: postgres.Sql;
  let stack: Stack | null = null;
  let apiUrl = "";
  let signingKey: SigningKey;
  let before = "";
  let user: Identity;
  let boss: Identity;
  const name = (rule: string) => `adopt, ${shape.name}: ${rule}`;

  e2eTest(
    name(
      "the migrations keep every column, row, constraint and the RLS setting, and write no fixture",
    ),
    async () => {
      db = await createTestDatabase();
      // What a Supabase database already has (roles for the owner's policy).
      await bootstrapDatabase(db.url);
      const setup = postgres(db.url, {
        max: 1,
        prepare: false,
        onnotice: () => {},
      });
      await setup.unsafe(shape.setup);
      if (db.kind === "postgres") {
        const [{ name }] = await setup`select current_database() as name`;
        await setup.unsafe(
          `alter database "${name}" set timezone to '${SESSION_TIME_ZONE}'`,
        );
      } else {
        // PGlite is one session for every connection: set it there.
        await setup.unsafe(`set timezone to '${SESSION_TIME_ZONE}'`);
      }
      await setup.end();
      sql = postgres(db.url, { max: 2, prepare: false, onnotice: () => {} });
      await assertSessionTimeZone(sql);
      before = await snapshot(sql);

      signingKey = await generateSigningKey();
      const started = await start(db, signingKey);
      stack = started.stack;
      apiUrl = stack.apiUrl;
      assert.equal(stack.seeded, false);
      assert.match(started.log, /Applying migration 20261122080000/);
      assert.match(started.log, /local fixture .* was not written/);
      assert.equal(await snapshot(sql), before);
      const [{ fixture }] = await sql`
        select count(*)::int as fixture from public.usuarios
        where correo like '%@example.com'
          or nombre_usuario in ('carla@example.com', 'diego')`;
      assert.equal(fixture, 0);
      const [{ identities }] =
        await sql`select count(*)::int as identities from auth.users`;
      assert.equal(identities, 0);
      const found = await indexes(sql);
      assert.deepEqual(
        [...found.keys()].sort(),
        [...shape.indexes, "usuarios_ultimo_acceso_idx"].sort(),
      );
      for (const [index, unique] of found) assert.equal(unique, false, index);
      for (const index of shape.indexes) {
        assert.match(started.log, new RegExp(`"${index}" is a plain index`));
      }
      // Only a table with an unindexed auth_user_id is told to upgrade.
      assert.equal(
        /auth_user_id has no index/.test(started.log),
        shape.hasAuthUserId,
      );
    },
  );

  e2eTest(
    name(
      "the adopted table still accepts what it accepted: correo '' twice, usernames differing only in case",
    ),
    async () => {
      const [{ next }] = await sql<{ next: number }[]>`
        select coalesce(max(id), 0)::int + 1000 as next from public.usuarios`;
      // Inserted, then rolled back: the tests that follow compare against
      // the rows as adopted.
      const undo = new Error("undo");
      let inserted = 0;
      await sql.begin(async (tx) => {
        const rows = await tx`
          insert into public.usuarios (id, correo, nombre_usuario)
          overriding system value
          values (${next}, '', 'Twin'), (${next + 1}, '', 'tWIN')
          returning id`;
        inserted = rows.length;
        throw undo;
      }).catch((error) => {
        if (error !== undo) throw error;
      });
      assert.equal(inserted, 2);
      const left =
        await sql`select id from public.usuarios where id >= ${next}`;
      assert.equal(left.length, 0);
    },
  );

  e2eTest(
    name(
      "presence-ping matches by correo and answers the numeric id and the stored time as UTC",
    ),
    async () => {
      assert.ok(stack);
      if (db.kind === "pglite") {
        // The one PGlite session's zone is reset by the CLI's connection.
        await sql.unsafe(`set timezone to '${SESSION_TIME_ZONE}'`);
      }
      await assertSessionTimeZone(sql);
      user = await signedIn(stack, shape.user.email.toLowerCase());
      const t0 = Date.now();
      const online = await invoke(user.client, "presence-ping");
      assert.equal(online.status, 200, JSON.stringify(online.body));
      assert.equal(online.body.user.id, shape.user.rowId);
      assert.equal(typeof online.body.user.id, "number");
      assert.equal(online.body.user.presence_state, "online");
      assert.match(online.body.user.ultimo_acceso, ISO_MS_Z);
      assert.equal(
        online.body.user.ultimo_acceso,
        await storedUtc(sql, shape.user.rowId),
      );
      // The instant itself is now, not shifted by the session's zone.
      const at = Date.parse(online.body.user.ultimo_acceso);
      assert.ok(Math.abs(at - t0) < 60_000, `${at - t0} ms off`);

      const offline = await invoke(user.client, "presence-ping", {
        body: { state: "offline" },
      });
      assert.equal(offline.status, 200, JSON.stringify(offline.body));
      assert.equal(offline.body.user.presence_state, "offline");
      assert.equal(
        offline.body.user.ultimo_acceso,
        await storedUtc(sql, shape.user.rowId),
      );
      const [row] = await sql`
        select presence_state from public.usuarios
        where id = ${shape.user.rowId}`;
      assert.equal(row.presence_state, "offline");

      // A repeat within the interval is read, not written: same answer.
      const repeat = await invoke(user.client, "presence-ping", {
        body: { state: "offline" },
      });
      assert.equal(repeat.status, 200, JSON.stringify(repeat.body));
      assert.deepEqual(repeat.body, offline.body);
    },
  );

  e2eTest(
    name(
      "auth-sync reports and updates rows for an ADMIN_EMAILS administrator",
    ),
    async () => {
      assert.ok(stack);
      boss = await signedIn(stack, ADMIN);
      // The functions' first look at the columns (the pings do not look):
      // a hosted project's only sign of an unindexed auth_user_id.
      let sync!: Awaited<ReturnType<typeof invoke>>;
      const lines = await logLines(async () => {
        sync = await invoke(boss.client, "auth-sync", {
          body: { action: "sync", dry_run: true },
        });
      });
      assert.equal(sync.status, 200, JSON.stringify(sync.body));
      assert.deepEqual(
        warnings(lines),
        shape.hasAuthUserId ? [UNINDEXED_AUTH_USER_ID] : [],
      );
      const mine = sync.body.results.find((r: { id: number }) =>
        r.id === shape.user.rowId
      );
      // Without the column the row and the account are in step by email
      // alone; with it, the row would be linked (not written: dry run).
      assert.deepEqual(mine, {
        id: shape.user.rowId,
        status: shape.hasAuthUserId ? "linked" : "in_sync",
        auth_user_id: user.id,
      });
      for (const r of sync.body.results) assert.equal(typeof r.id, "number");
      const [{ rows }] =
        await sql`select count(*)::int as rows from public.usuarios`;
      assert.equal(sync.body.results.length, rows);

      // A username taken in another case is refused; a free one is set.
      // ::int: postgres.js reads a bigint as a string.
      const [other] = await sql<{ id: number }[]>`
        select id::int as id from public.usuarios order by id desc limit 1`;
      const [taken] = await sql<{ nombre_usuario: string }[]>`
        select nombre_usuario from public.usuarios
        where id = ${shape.user.rowId}`;
      const clash = await invoke(boss.client, "auth-sync", {
        body: {
          action: "update",
          id: other.id,
          nombre_usuario: taken.nombre_usuario.toUpperCase(),
        },
      });
      assert.equal(clash.status, 409, JSON.stringify(clash.body));
      assert.equal(clash.body.code, "username_exists");
      const update = await invoke(boss.client, "auth-sync", {
        body: {
          action: "update",
          id: other.id,
          nombre_usuario: "nuevo.nombre",
        },
      });
      assert.equal(update.status, 200, JSON.stringify(update.body));
      assert.equal(update.body.user.id, other.id);
      assert.equal(update.body.user.nombre_usuario, "nuevo.nombre");
      assert.deepEqual(update.body.changed, ["nombre_usuario"]);
      const [stored] = await sql`
        select nombre_usuario from public.usuarios where id = ${other.id}`;
      assert.equal(stored.nombre_usuario, "nuevo.nombre");
    },
  );

  e2eTest(
    name("a second start applies nothing twice and still writes no fixture"),
    async () => {
      assert.ok(stack);
      await stack.close();
      stack = null;
      const between = await snapshot(sql);
      const started = await start(db, signingKey);
      stack = started.stack;
      apiUrl = stack.apiUrl;
      assert.equal(stack.seeded, false);
      assert.match(started.log, /Remote database is up to date/);
      assert.doesNotMatch(started.log, /Applying migration/);
      assert.equal(await snapshot(sql), between);
      const [{ versions }] = await sql`
        select count(*)::int as versions
        from supabase_migrations.schema_migrations`;
      const files = [
        ...Deno.readDirSync(
          new URL("../../supabase/migrations/", import.meta.url),
        ),
      ].filter((f) => f.name.endsWith(".sql")).length;
      assert.equal(versions, files);
    },
  );

  e2eTest(
    name(
      "the upgrade names the rows that stop it and changes nothing, then adds the columns, unique auth_user_id and the state check",
    ),
    async () => {
      const unchanged = await snapshot(sql);
      const refused = await applyUpgrade(db.url).then(
        () => null,
        (error: Error) => error,
      );
      assert.ok(refused instanceof UpgradeError, String(refused));
      assert.match(refused.message, /these rows stop it/);
      for (const text of shape.blocking) {
        assert.ok(refused.message.includes(text), refused.message);
      }
      assert.equal(await snapshot(sql), unchanged);

      await sql.unsafe(shape.fix);
      const notices = await applyUpgrade(db.url);
      assert.ok(
        notices.some((n) =>
          n.includes(
            shape.hasAuthUserId
              ? "auth_user_id is now unique"
              : "added auth_user_id uuid",
          )
        ),
        notices.join("\n"),
      );
      // The plain index kept while auth_user_id repeated is replaced.
      assert.equal(
        (await indexes(sql)).has("usuarios_auth_user_id_idx"),
        false,
      );
      const [{ columns }] = await sql`
        select string_agg(column_name || ' ' || data_type, ', '
          order by column_name) as columns
        from information_schema.columns
        where table_schema = 'public' and table_name = 'usuarios'
          and column_name in ('auth_user_id', 'last_manual_logout_at')`;
      assert.match(columns, /^auth_user_id uuid, last_manual_logout_at /);
      const [{ unique }] = await sql`
        select count(*)::int as unique from pg_constraint
        where conrelid = 'public.usuarios'::regclass
          and conname = 'usuarios_auth_user_id_key' and contype = 'u'`;
      assert.equal(unique, 1);
      const id = crypto.randomUUID();
      await sql`update public.usuarios set auth_user_id = ${id}
                where id = ${shape.user.rowId}`;
      await assert.rejects(
        sql`update public.usuarios set auth_user_id = ${id}
            where id <> ${shape.user.rowId}`,
        (e: postgres.PostgresError) => e.code === "23505",
      );
      await assert.rejects(
        sql`update public.usuarios set presence_state = 'away'
            where id = ${shape.user.rowId}`,
        (e: postgres.PostgresError) => e.code === "23514",
      );
      await sql`update public.usuarios set auth_user_id = null
                where id = ${shape.user.rowId}`;

      // Run again: nothing left to do.
      assert.deepEqual(await applyUpgrade(db.url), []);
    },
  );

  e2eTest(
    name(
      shape.seedable
        ? "after the upgrade, --seed writes the fixture on request, offline sets last_manual_logout_at and sync links"
        : "after the upgrade, --seed that the table cannot take fails in one line, offline sets last_manual_logout_at and sync links",
    ),
    async () => {
      assert.ok(stack);
      await stack.close();
      stack = null;
      if (shape.seedable) {
        const started = await start(db, signingKey, { seed: true });
        stack = started.stack;
        assert.equal(stack.seeded, true);
        const [{ fixture }] = await sql`
          select count(*)::int as fixture from public.usuarios
          where correo like '%@example.com'
            or nombre_usuario in ('carla@example.com', 'diego')`;
        assert.equal(fixture, 6);
        const ana = await signIn(stack, "ana@example.com", "ana-password");
        assert.equal((await invoke(ana, "presence-ping")).status, 200);
      } else {
        const rows = await snapshot(sql);
        await assert.rejects(
          start(db, signingKey, { seed: true }),
          (e: StartError) =>
            e instanceof StartError &&
            /^The database refused supabase\/seed\.sql: .*SQLSTATE 23502/
              .test(e.message) &&
            !e.line().includes("\n"),
        );
        assert.equal(await snapshot(sql), rows);
        stack = (await start(db, signingKey)).stack;
        assert.equal(stack.seeded, false);
      }
      apiUrl = stack.apiUrl;
      const again = await signIn(stack, user.email, user.password);
      // Online first: a repeated offline within the interval is not written.
      assert.equal((await invoke(again, "presence-ping")).status, 200);
      const offline = await invoke(again, "presence-ping", {
        body: { state: "offline" },
      });
      assert.equal(offline.status, 200, JSON.stringify(offline.body));
      const [row] = await sql`
        select last_manual_logout_at is not null as set
        from public.usuarios where id = ${shape.user.rowId}`;
      assert.equal(row.set, true);

      const admin = await signIn(stack, boss.email, boss.password);
      const sync = await invoke(admin, "auth-sync", {
        body: { action: "sync", ids: [shape.user.rowId] },
      });
      assert.equal(sync.status, 200, JSON.stringify(sync.body));
      assert.deepEqual(sync.body.results, [{
        id: shape.user.rowId,
        status: "linked",
        auth_user_id: user.id,
      }]);
    },
  );

  e2eTest(name("cleans up"), async () => {
    await stack?.close();
    await sql.end();
    await db.close();
    await assert.rejects(
      fetch(`${apiUrl}/auth/v1/health`, { signal: AbortSignal.timeout(2000) }),
    );
  });
}
