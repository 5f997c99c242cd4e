/**
 * The three functions on a database shaped as a hosted Supabase project's,
 * where `SUPABASE_DB_URL` connects as a `postgres` that is not a superuser
 * (`throwawayCluster({ hosted: true })`, whose doc comment at
 * `HOSTED_ROLES_SQL` names the supabase/postgres files its roles and grants
 * follow): the migrations pushed as that `postgres` (as `supabase db push`
 * does), the functions connected as it, and the Auth stand-in as
 * `supabase_auth_admin` (as hosted Auth connects), which owns the `auth`
 * tables `postgres` may read and write but not alter.
 *
 * The same scenario runs on a plain cluster whose `postgres` is the
 * superuser, and must answer the same: a ping (fast path, and Auth's
 * `getUser` with `PRESENCE_VERIFY=auth`), a `presence` read with a cursor
 * and the poll that sees a change, an `auth-sync` `update` of email,
 * password and username of a linked user, a `sync` that links a row by a
 * proven email (reading `auth.users` and `auth.identities`), and a
 * `reconcile` that settles an open intent and lists a mismatch.
 *
 * Assumption where supabase/postgres is silent: `postgres` has no
 * membership in `supabase_auth_admin` (taken away by
 * `20250421084701_revoke_admin_roles_from_postgres.sql`; older projects may
 * still have it, which only adds rights). PostgreSQL only: it makes its own
 * clusters.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import {
  clusterUnavailable,
  type RestartableDb,
  throwawayCluster,
} from "../../local/testing/cluster.ts";
import { pushMigrations } from "../../local/migrate.ts";
import { call, invoke } from "../support/invoke.ts";
import {
  servedBehindCountingProxy,
  startTestStack,
  type TestUser,
} from "../support/stack.ts";

const BOSS = `boss-${crypto.randomUUID().slice(0, 8)}@test.local`;

/** What the scenario saw, step by step; equal on both databases. */
type Seen = Record<string, unknown>;

async function scenario(db: RestartableDb): Promise<Seen> {
  const seen: Seen = {};
  const stack = await startTestStack({
    // Confirmations on: sync links only by an email proven by mail.
    emailConfirmations: true,
    functionEnv: { ADMIN_EMAILS: BOSS },
    database: { url: db.url, authUrl: db.authUrl },
  });
  // Both ways of checking a ping's token, behind proxies that count the
  // calls to Auth: the fast path must prove the session in the database
  // (auth.sessions, auth.users) without asking Auth.
  const fastPath = await servedBehindCountingProxy(stack);
  const authPath = await servedBehindCountingProxy(stack, {
    PRESENCE_VERIFY: "auth",
  });
  try {
    const [who] = await stack.sql<{ user: string; superuser: boolean }[]>`
      select current_user as user, r.rolsuper as superuser
      from pg_roles r where r.rolname = current_user`;
    seen.role = { ...who };

    const boss = await stack.createUser({ email: BOSS, confirmed: "by-mail" });
    const pinger = await stack.createUser({ row: { auth_user_id: true } });
    const ping = (apiUrl: string, user: TestUser, state: string) =>
      call(apiUrl, "presence-ping", {
        headers: {
          Authorization: `Bearer ${user.token}`,
          "Content-Type": "application/json",
        },
        body: JSON.stringify({ state }),
      });

    // presence-ping, both ways of checking the token.
    const fast = await ping(fastPath.served.apiUrl, pinger, "online");
    const viaAuth = await ping(authPath.served.apiUrl, pinger, "offline");
    seen.ping = [fast, viaAuth].map((r) => [
      r.status,
      r.status === 200 ? r.body.user.presence_state : r.body,
    ]);
    seen.authUserCalls = [fastPath, authPath].map((p) =>
      p.calls.get("/auth/v1/user") ?? 0
    );

    // presence: a read issues a cursor; a poll with it sees the next ping.
    const first = await invoke(pinger.client, "presence", {
      body: { ids: [pinger.rowId] },
    });
    const viaAuthRead = await call(authPath.served.apiUrl, "presence", {
      headers: {
        Authorization: `Bearer ${pinger.token}`,
        "Content-Type": "application/json",
      },
      body: JSON.stringify({ ids: [pinger.rowId] }),
    });
    const online = await ping(stack.apiUrl, pinger, "online");
    const poll = await invoke(pinger.client, "presence", {
      body: { cursor: first.body.cursor },
    });
    seen.presence = {
      first: [
        first.status,
        first.body.users?.map((u: { id: number }) => u.id === pinger.rowId),
      ],
      viaAuth: [viaAuthRead.status, viaAuthRead.body.users?.length],
      online: online.status,
      poll: [
        poll.status,
        poll.body.users?.map((u: { id: number; presence_state: string }) => [
          u.id === pinger.rowId,
          u.presence_state,
        ]),
      ],
    };

    // auth-sync update: email, password and username of a linked user.
    const email = `before-${crypto.randomUUID().slice(0, 8)}@test.local`;
    const moved = `moved-${crypto.randomUUID().slice(0, 8)}@test.local`;
    const name = `n${crypto.randomUUID().slice(0, 8)}`;
    const password = `pw-${crypto.randomUUID()}`;
    const u = await stack.createUser({
      email,
      row: { auth_user_id: true, correo: email },
    });
    const update = await invoke(boss.client, "auth-sync", {
      body: {
        action: "update",
        id: u.rowId,
        email: moved,
        password,
        nombre_usuario: name,
      },
    });
    const signIn = await stack.anon().auth.signInWithPassword({
      email: moved,
      password,
    });
    const [row] = await stack.sql`
      select correo, nombre_usuario from public.usuarios where id = ${u.rowId}`;
    seen.update = {
      status: update.status,
      changed: update.body.changed,
      user: update.status === 200
        ? {
          correo: update.body.user.correo === moved,
          nombre_usuario: update.body.user.nombre_usuario === name,
        }
        : update.body,
      row: { correo: row.correo === moved, name: row.nombre_usuario === name },
      signIn: signIn.error?.message ?? "ok",
      // Its lease taken and released, its intent written and settled, its
      // audit row written: the functions' own tables, as postgres.
      lease: (await stack.sql`
        select count(*)::int as n from public.auth_sync_leases
        where target_id = ${u.rowId}`)[0].n,
      intents: (await stack.sql`
        select outcome, fields from public.auth_sync_intents
        where target_id = ${u.rowId}`).map((r) => [r.outcome, r.fields]),
      audit: (await stack.sql`
        select outcome, fields from public.auth_sync_audit
        where target_id = ${u.rowId}`).map((r) => [r.outcome, r.fields]),
    };

    // auth-sync sync: a linked row is in sync, a row found by a proven
    // email is linked (results in id order).
    const proven = await stack.createUser({ confirmed: "by-mail" });
    const [unlinked] = await stack.sql`
      insert into public.usuarios (correo) values (${proven.email})
      returning id`;
    const sync = await invoke(boss.client, "auth-sync", {
      body: { action: "sync", ids: [Number(unlinked.id), u.rowId] },
    });
    seen.sync = [
      sync.status,
      sync.body.results?.map((r: { status: string; auth_user_id?: string }) => [
        r.status,
        r.auth_user_id === proven.id || r.auth_user_id === u.id,
      ]) ?? sync.body,
    ];

    // auth-sync reconcile: an update whose worker died after Auth changed
    // the account (an open intent, its lease gone) is settled, and a row
    // whose account's email changed elsewhere is listed.
    const dead = await stack.createUser({ row: { auth_user_id: true } });
    const deadEmail = `dead-${crypto.randomUUID().slice(0, 8)}@test.local`;
    const changed = await stack.admin().auth.admin.updateUserById(dead.id, {
      email: deadEmail,
    });
    assert.equal(changed.error, null);
    await stack.sql`
      insert into public.auth_sync_intents
        (id, target_id, holder, kind, account_id, fields, old_email,
         new_email, row_set, actor_kind, created_at)
      values (${crypto.randomUUID()}, ${dead.rowId}, ${crypto.randomUUID()},
              'update', ${dead.id}, '{email}', ${dead.email}, ${deadEmail},
              ${stack.sql.json({ correo: deadEmail })}, 'service',
              now() - interval '10 minutes')`;
    const drifted = await stack.createUser({ row: { auth_user_id: true } });
    const drift = `drift-${crypto.randomUUID().slice(0, 8)}@test.local`;
    await stack.admin().auth.admin.updateUserById(drifted.id, {
      email: drift,
    });
    // By an administrator by rol, whose rights the functions grant only
    // once presence.rights_writable_by() finds no Data API role able to
    // write rol, auth_user_id or correo (here the hosted default grants
    // reach the table, and row level security stops them).
    const officer = await stack.createUser({
      row: { auth_user_id: true, rol: "admin" },
    });
    const reconcile = await invoke(officer.client, "auth-sync", {
      body: { action: "reconcile", after_id: dead.rowId! - 1, limit: 2 },
    });
    const [settledRow] = await stack.sql`
      select correo from public.usuarios where id = ${dead.rowId}`;
    seen.reconcile = {
      status: reconcile.status,
      settled: reconcile.body.settled?.map((
        s: { target_id: number; outcome: string },
      ) => [s.target_id === dead.rowId, s.outcome]) ?? reconcile.body,
      mismatches: reconcile.body.mismatches?.map((
        m: { id: number; account_email: string },
      ) => [m.id === drifted.rowId, m.account_email === drift]),
      row: settledRow.correo === deadEmail,
    };
    // Who the functions (their pools are still open) and Auth connected as.
    const sessions = await stack.sql<{ usename: string }[]>`
      select distinct usename::text from pg_stat_activity
      where datname = current_database() and backend_type = 'client backend'
      order by 1`;
    seen.role = { ...who, sessions: sessions.map((s) => s.usename) };
  } finally {
    for (const { served, proxy } of [fastPath, authPath]) {
      await served.close();
      await proxy.shutdown();
    }
    await stack.close();
  }
  return seen;
}

const EXPECTED: Omit<Seen, "role"> = {
  ping: [[200, "online"], [200, "offline"]],
  authUserCalls: [0, 1],
  presence: {
    first: [200, [true]],
    viaAuth: [200, 1],
    online: 200,
    poll: [200, [[true, "online"]]],
  },
  update: {
    status: 200,
    changed: ["email", "password", "nombre_usuario"],
    user: { correo: true, nombre_usuario: true },
    row: { correo: true, name: true },
    signIn: "ok",
    lease: 0,
    intents: [["applied", ["email", "password"]]],
    audit: [["ok", ["email", "password", "nombre_usuario"]]],
  },
  sync: [200, [["in_sync", true], ["linked", true]]],
  reconcile: {
    status: 200,
    settled: [[true, "applied"]],
    mismatches: [[true, true]],
    row: true,
  },
};

/**
 * The scenario on a fresh cluster; with `authSelectOnly`, a hosted one whose
 * `postgres` may only read the `auth` tables (by its grants on them: not a
 * member of `pg_read_all_data`).
 */
async function run(hosted: boolean, authSelectOnly = false): Promise<Seen> {
  const db = await throwawayCluster({ hosted });
  try {
    if (authSelectOnly) {
      const admin = postgres(db.adminUrl!, { max: 1, onnotice: () => {} });
      try {
        // pg_read_all_data too, which would read them for it.
        await admin`revoke pg_read_all_data from postgres`;
        await admin`revoke insert, update, delete, truncate, references,
                    trigger on all tables in schema auth from postgres`;
      } finally {
        await admin.end();
      }
    }
    return await scenario(db);
  } finally {
    await db.destroy();
  }
}

const unavailable = clusterUnavailable();

/**
 * A test on a fresh hosted-shaped cluster, through one connection as its
 * `postgres`; `migrated`: the project's migrations pushed first, as
 * `supabase db push` does.
 */
function hostedTest(
  name: string,
  migrated: boolean,
  fn: (sql: postgres.Sql) => Promise<void>,
) {
  Deno.test({
    name,
    ignore: unavailable !== null,
    sanitizeOps: false,
    sanitizeResources: false,
    async fn() {
      const db = await throwawayCluster({ hosted: true });
      const sql = postgres(db.url, {
        max: 1,
        prepare: false,
        onnotice: () => {},
      });
      try {
        if (migrated) await pushMigrations(db.url, { includeSeed: false });
        await fn(sql);
      } finally {
        await sql.end();
        await db.destroy();
      }
    },
  });
}

Deno.test({
  name:
    "hosted role: as a postgres that is not a superuser, the migrations push and presence-ping, presence and auth-sync answer as on the superuser database",
  ignore: unavailable !== null,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const hosted = await run(true);
    assert.deepEqual(hosted.role, {
      user: "postgres",
      superuser: false,
      sessions: ["postgres", "supabase_auth_admin"],
    });
    const { role: _h, ...onHosted } = hosted;
    assert.deepEqual(onHosted, EXPECTED);
    const plain = await run(false);
    assert.deepEqual(plain.role, {
      user: "postgres",
      superuser: true,
      sessions: ["postgres"],
    });
    const { role: _p, ...onPlain } = plain;
    assert.deepEqual(onPlain, EXPECTED);
  },
});

// The functions and the migrations only read auth.users, auth.identities
// and auth.sessions: they keep working where a project's postgres may do no
// more there than select (stricter than supabase/postgres grants it). Where
// it could not read auth.sessions, the fast path would ask Auth instead
// (logged "Fast path cannot read the auth schema"), and authUserCalls would
// say so.
Deno.test({
  name:
    "hosted role: with no more than select on auth's tables, the three functions answer the same",
  ignore: unavailable !== null,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const { role, ...seen } = await run(true, true);
    assert.deepEqual(role, {
      user: "postgres",
      superuser: false,
      sessions: ["postgres", "supabase_auth_admin"],
    });
    assert.deepEqual(seen, EXPECTED);
  },
});

// The hosted cluster's own shape, so that the test above proves what it
// claims: postgres reads and writes auth's tables but may not alter them.
hostedTest(
  "hosted role: the cluster's postgres is no superuser, may write auth's tables, and may not alter them or create in auth",
  false,
  async (sql) => {
    const [r] = await sql`
        select r.rolsuper, r.rolbypassrls, r.rolcreaterole,
               pg_has_role('postgres', 'service_role', 'member') as service,
               pg_has_role('postgres', 'supabase_auth_admin', 'member')
                 as auth_admin,
               has_table_privilege('auth.users', 'select, update') as dml,
               has_schema_privilege('auth', 'create') as create_in_auth,
               (select relowner::regrole::text from pg_class
                where oid = 'auth.users'::regclass) as owner
        from pg_roles r where r.rolname = current_user`;
    assert.deepEqual({ ...r }, {
      rolsuper: false,
      rolbypassrls: true,
      rolcreaterole: true,
      service: true,
      auth_admin: false,
      dml: true,
      create_in_auth: false,
      owner: "supabase_auth_admin",
    });
    await assert.rejects(
      sql`alter table auth.users add column x int`,
      (e: postgres.PostgresError) => e.code === "42501",
    );
  },
);

// Hosted grants every table postgres creates in public to the Data API roles
// (the initial schema's default privileges; on projects made before
// Supabase's 2026 change, for tables made before 2026-10-30, or with
// "Default privileges for new entities" on): row level security without a
// policy keeps their rows from anon and authenticated, but not TRUNCATE, nor
// the tables' place in the Data API's schema. auth-sync's own tables are
// the functions' alone, as presence.changes is.
hostedTest(
  "hosted role: auth-sync's tables (audit, leases, intents) are not granted to anon or authenticated, who cannot truncate them, nor usuarios",
  true,
  async (sql) => {
    const granted = await sql<{ role: string; object: string }[]>`
        select r.role, o.object
        from unnest(array['anon', 'authenticated']) r(role)
        cross join unnest(array[
          'public.auth_sync_audit', 'public.auth_sync_leases',
          'public.auth_sync_intents']) o(object)
        where has_table_privilege(r.role, o.object,
          'select, insert, update, delete, truncate, references, trigger')
        union all
        select r.role, 'public.auth_sync_audit_id_seq'
        from unnest(array['anon', 'authenticated']) r(role)
        where has_sequence_privilege(r.role, 'public.auth_sync_audit_id_seq',
          'usage, select, update')
        union all
        select r.role, 'public.usuarios'
        from unnest(array['anon', 'authenticated']) r(role)
        where has_table_privilege(r.role, 'public.usuarios',
          'truncate, references, trigger')
        order by 1, 2`;
    assert.deepEqual(granted.map((g) => `${g.role} ${g.object}`), []);
    for (const role of ["anon", "authenticated"]) {
      for (const table of ["public.auth_sync_audit", "public.usuarios"]) {
        await assert.rejects(
          sql.begin(async (tx) => {
            await tx.unsafe(`set local role ${role}`);
            await tx.unsafe(`truncate ${table}`);
          }),
          (e: postgres.PostgresError) => e.code === "42501",
          `${role} ${table}`,
        );
      }
    }
  },
);

// The same default privileges grant every view postgres creates in public:
// a view built on a view over rol (a report, an alias) brings back the
// write the operator took away from the first, and the rights check must
// say so (an owner-rights view reaches the table with its owner's rights,
// at any depth).
hostedTest(
  "hosted role: a view over a view over rol, granted by the default privileges, is named by presence.rights_writable_by after the write was taken away from the first, and the write goes through",
  true,
  async (sql) => {
    const writableBy = async () =>
      (await sql`select presence.rights_writable_by() as r`)[0].r;
    const [{ id }] = await sql`insert into public.usuarios (nombre_usuario)
                                 values ('pest') returning id`;
    assert.deepEqual(await writableBy(), []);
    await sql`create view public.perfil as
                select id, nombre_usuario, rol, auth_user_id from public.usuarios`;
    assert.deepEqual(await writableBy(), ["anon", "authenticated"]);
    // The operator's fix for that view.
    await sql`revoke insert, update on public.perfil from anon, authenticated`;
    assert.deepEqual(await writableBy(), []);
    await sql`create view public.perfil_v2 as select * from public.perfil`;
    assert.deepEqual(await writableBy(), ["anon", "authenticated"]);
    await sql.begin(async (tx) => {
      await tx`set local role authenticated`;
      await tx`update public.perfil_v2 set rol = 'superadmin'
                 where id = ${id}`;
    });
    const [{ rol }] = await sql`select rol from public.usuarios
                                  where id = ${id}`;
    assert.equal(rol, "superadmin");
  },
);
