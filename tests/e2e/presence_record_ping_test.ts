/**
 * The database function `presence.record_ping` on its own (PGlite or
 * PostgreSQL): who may call it, its fixed `search_path`, every matching and
 * writing rule, the session proof, the optional columns absent; and, last,
 * presence-ping's clear 500 when the function is gone.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { pushMigrations } from "../../local/migrate.ts";
import { LATEST_MIGRATION } from "../../supabase/functions/_shared/db_function.ts";
import { call } from "../support/invoke.ts";
import { startTestStack, type TestStack } from "../support/stack.ts";
import { sessionIdOf } from "../support/tokens.ts";

const stack: TestStack = await startTestStack();
const sql = stack.sql;
const SIGNATURE = "presence.record_ping(uuid,uuid,text,text,text[],integer)";

interface Pinged {
  session_ok: boolean;
  id: number | null;
  ultimo_acceso: Date | null;
  presence_state: string | null;
}

// The slow path's call: an identity as Auth described it.
async function ping(
  userId: string,
  email: string | null,
  options: { state?: string; domains?: string[]; interval?: number } = {},
): Promise<Pinged> {
  const [row] = await sql`
    select session_ok, id, ultimo_acceso, presence_state
    from presence.record_ping(${userId}::uuid, null, ${email}::text,
      ${options.state ?? "online"}, ${options.domains ?? []}::text[],
      ${options.interval ?? 0}::int)`;
  return {
    session_ok: row.session_ok,
    id: row.id === null ? null : Number(row.id),
    ultimo_acceso: row.ultimo_acceso,
    presence_state: row.presence_state,
  };
}

function uid(): string {
  return crypto.randomUUID();
}

function email(prefix = "rp"): string {
  return `${prefix}-${crypto.randomUUID().slice(0, 8)}@example.org`;
}

async function insert(row: Record<string, unknown>): Promise<number> {
  const [r] = await sql`insert into public.usuarios ${sql(row)} returning id`;
  return Number(r.id);
}

/**
 * The app's own transaction runs `change` on row `id` and holds it 400 ms
 * while the identity `userId` with the confirmed `email` pings (the slow
 * path's call, on its own connection): the ping's answer, and whether the
 * row's presence was written. PostgreSQL only: on PGlite's one session a
 * held transaction holds everyone.
 */
async function pingWhileAppMoves(
  id: number,
  change: (tx: postgres.TransactionSql) => Promise<unknown>,
  userId: string,
  mail: string,
): Promise<{ answered: number | null; written: boolean }> {
  const app = postgres(stack.dbUrl, { max: 1, prepare: false });
  const fn = postgres(stack.dbUrl, { max: 1, prepare: false });
  try {
    // Both connected first: the ping must start while the app holds the row.
    await Promise.all([app`select 1`, fn`select 1`]);
    let changed!: () => void;
    const isChanged = new Promise<void>((r) => changed = r);
    const moved = app.begin(async (tx) => {
      await change(tx);
      changed();
      await new Promise((r) => setTimeout(r, 400));
    });
    await isChanged;
    const [pinged] = await Promise.all([
      fn`select id from presence.record_ping(${userId}::uuid, null,
           ${mail}::text, 'online', '{}'::text[], 0)`,
      moved,
    ]);
    const [row] = await sql`
      select presence_state = 'online' as written from public.usuarios
      where id = ${id}`;
    return {
      answered: pinged[0].id === null ? null : Number(pinged[0].id),
      written: row.written,
    };
  } finally {
    await app.end();
    await fn.end();
  }
}

e2eTest(
  "record_ping: not executable by anon or authenticated, executable by service_role",
  async () => {
    const [r] = await sql`
      select has_function_privilege('anon', ${SIGNATURE}, 'execute') as anon,
             has_function_privilege('authenticated', ${SIGNATURE}, 'execute') as authenticated,
             has_function_privilege('service_role', ${SIGNATURE}, 'execute') as service_role,
             has_schema_privilege('anon', 'presence', 'usage') as anon_schema`;
    assert.deepEqual(
      { ...r },
      {
        anon: false,
        authenticated: false,
        service_role: true,
        anon_schema: false,
      },
    );
  },
);

e2eTest(
  "record_ping: a stored ultimo_acceso over a minute ahead of the database clock (the app's own local-time now(), a fast browser clock) holds nobody online: offline lands and online moves the time to now; a lead within a minute keeps the order rules",
  async () => {
    const e = email("ahead");
    const id = await insert({ correo: e });
    const storedAhead = async (lead: string) => {
      await sql`update public.usuarios
        set presence_state = 'online', ultimo_acceso = now() + ${lead}::interval
        where id = ${id}`;
    };
    const nearNow = async (t: Date | null) => {
      const [{ now }] = await sql`select now() as now`;
      assert.ok(t && Math.abs(t.getTime() - (now as Date).getTime()) < 5_000);
    };
    await storedAhead("1 hour");
    const off = await ping(uid(), e, { state: "offline" });
    assert.equal(off.presence_state, "offline");
    await nearNow(off.ultimo_acceso);

    await storedAhead("1 hour");
    const on = await ping(uid(), e, { state: "online" });
    assert.equal(on.presence_state, "online");
    await nearNow(on.ultimo_acceso);

    // A concurrent ping's lead (never near a minute): the stored online is
    // newer, so the offline is answered as stored.
    await storedAhead("30 seconds");
    const [{ stored }] = await sql`
      select ultimo_acceso as stored from public.usuarios where id = ${id}`;
    const older = await ping(uid(), e, { state: "offline" });
    assert.equal(older.presence_state, "online");
    assert.equal(older.ultimo_acceso?.getTime(), (stored as Date).getTime());
  },
);

e2eTest(
  "record_ping: fixed empty search_path and UTC, invoker rights, outside the exposed schemas",
  async () => {
    const [r] = await sql`
      select p.proconfig, p.prosecdef, n.nspname::text as schema
      from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where p.oid = ${SIGNATURE}::regprocedure`;
    // UTC: a `timestamp without time zone` column holds UTC whatever the
    // caller's TimeZone; a lock held elsewhere fails the ping after 1 s.
    assert.deepEqual(r.proconfig, [
      'search_path=""',
      "TimeZone=UTC",
      "lock_timeout=1s",
    ]);
    assert.equal(r.prosecdef, false);
    assert.equal(r.schema, "presence");
    const config = await Deno.readTextFile(
      new URL("../../supabase/config.toml", import.meta.url),
    );
    const exposed = config.match(/^schemas = \[(.*)\]$/m)![1];
    assert.ok(!exposed.includes('"presence"'), exposed);
  },
);

e2eTest(
  "record_ping: precedence auth_user_id > correo > nombre_usuario = email > local part",
  async () => {
    const id = uid();
    const mail = email("prec");
    const local = mail.split("@")[0];
    const byLocal = await insert({ nombre_usuario: local });
    const byName = await insert({ nombre_usuario: mail.toUpperCase() });
    const byCorreo = await insert({ correo: mail.toUpperCase() });
    const byId = await insert({ auth_user_id: id, correo: "other@x.org" });
    const opts = { domains: ["example.org"] };
    assert.equal((await ping(id, mail, opts)).id, byId);
    await sql`delete from public.usuarios where id = ${byId}`;
    assert.equal((await ping(id, mail, opts)).id, byCorreo);
    await sql`delete from public.usuarios where id = ${byCorreo}`;
    assert.equal((await ping(id, mail, opts)).id, byName);
    await sql`delete from public.usuarios where id = ${byName}`;
    assert.equal((await ping(id, mail, opts)).id, byLocal);
  },
);

e2eTest(
  "record_ping: the local part only for listed domains, or all with *",
  async () => {
    const mail = email("dom");
    const row = await insert({ nombre_usuario: mail.split("@")[0] });
    assert.equal((await ping(uid(), mail)).id, null);
    assert.equal(
      (await ping(uid(), mail, { domains: ["other.org"] })).id,
      null,
    );
    assert.equal(
      (await ping(uid(), mail, { domains: ["example.org"] })).id,
      row,
    );
    assert.equal((await ping(uid(), mail, { domains: ["*"] })).id, row);
    assert.equal((await ping(uid(), null, { domains: ["*"] })).id, null);
  },
);

e2eTest(
  "record_ping: a row linked to another identity is never matched by email or username",
  async () => {
    const mail = email("linked");
    await insert({
      correo: mail,
      nombre_usuario: mail.split("@")[0],
      auth_user_id: uid(),
    });
    const res = await ping(uid(), mail, { domains: ["*"] });
    assert.deepEqual(res, {
      session_ok: true,
      id: null,
      ultimo_acceso: null,
      presence_state: null,
    });
  },
);

e2eTest(
  "record_ping: the database clock to the millisecond; offline sets last_manual_logout_at",
  async () => {
    const id = uid();
    const row = await insert({ auth_user_id: id });
    const res = await ping(id, null, { state: "offline" });
    assert.equal(res.id, row);
    assert.equal(res.presence_state, "offline");
    const [stored] = await sql`
      select ultimo_acceso, last_manual_logout_at,
             ultimo_acceso = date_trunc('milliseconds', ultimo_acceso) as whole_ms
      from public.usuarios where id = ${row}`;
    assert.equal(stored.whole_ms, true);
    assert.equal(stored.ultimo_acceso.getTime(), res.ultimo_acceso!.getTime());
    assert.equal(
      stored.last_manual_logout_at.getTime(),
      res.ultimo_acceso!.getTime(),
    );
    await ping(id, null, { state: "online" });
    const [after] = await sql`
      select presence_state, last_manual_logout_at from public.usuarios
      where id = ${row}`;
    assert.equal(after.presence_state, "online");
    assert.equal(
      after.last_manual_logout_at.getTime(),
      res.ultimo_acceso!.getTime(),
    );
  },
);

e2eTest(
  "record_ping: with a write interval, a fresh repeat is read, a change is written",
  async () => {
    const id = uid();
    const row = await insert({ auth_user_id: id, presence_state: "online" });
    const first = await ping(id, null, { interval: 60 });
    assert.ok(first.ultimo_acceso);
    const [{ xmin: before }] = await sql`
      select xmin::text from public.usuarios where id = ${row}`;
    const repeat = await ping(id, null, { interval: 60 });
    assert.equal(repeat.id, row);
    assert.equal(
      repeat.ultimo_acceso!.getTime(),
      first.ultimo_acceso!.getTime(),
    );
    const [{ xmin: after }] = await sql`
      select xmin::text from public.usuarios where id = ${row}`;
    assert.equal(after, before);
    const change = await ping(id, null, { state: "offline", interval: 60 });
    assert.equal(change.presence_state, "offline");
  },
);

e2eTest(
  "record_ping: a state other than online or offline is refused",
  async () => {
    await assert.rejects(
      ping(uid(), null, { state: "away" }),
      (e: { code?: string }) => e.code === "22023",
    );
  },
);

e2eTest(
  "record_ping: with a session id, a live session passes, an unknown or foreign one does not",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const session = sessionIdOf(u.token);
    const run = async (userId: string, sessionId: string) => {
      const [r] = await sql`
        select session_ok, id from presence.record_ping(${userId}::uuid,
          ${sessionId}::uuid, 'ignored@example.org', 'online', '{}', 0)`;
      return { ok: r.session_ok, id: r.id === null ? null : Number(r.id) };
    };
    assert.deepEqual(await run(u.id, session), { ok: true, id: u.rowId });
    assert.deepEqual(await run(u.id, uid()), { ok: false, id: null });
    const other = await stack.createUser();
    assert.deepEqual(await run(u.id, sessionIdOf(other.token)), {
      ok: false,
      id: null,
    });
    await sql`update auth.sessions set not_after = now() - interval '1 s'
              where id = ${session}::uuid`;
    assert.deepEqual(await run(u.id, session), { ok: false, id: null });
  },
);

if (Deno.env.get("TEST_DATABASE_URL")) {
  e2eTest(
    "record_ping: a row the app moves to another person while the ping waits on it (a new correo; unlinked and renamed) is not written, and the ping finds no row",
    async () => {
      const mail = email("moving");
      const byEmail = await insert({
        correo: mail,
        presence_state: "offline",
      });
      const moved = await pingWhileAppMoves(
        byEmail,
        (tx) =>
          tx`update public.usuarios set correo = ${email("someone")}
             where id = ${byEmail}`,
        uid(),
        mail,
      );
      assert.deepEqual(moved, { answered: null, written: false });

      const linkedMail = email("unlinking");
      const owner = uid();
      const linked = await insert({
        correo: linkedMail,
        auth_user_id: owner,
        presence_state: "offline",
      });
      const unlinked = await pingWhileAppMoves(
        linked,
        (tx) =>
          tx`update public.usuarios
             set auth_user_id = null, correo = ${email("someone")}
             where id = ${linked}`,
        owner,
        linkedMail,
      );
      assert.deepEqual(unlinked, { answered: null, written: false });

      // A change that leaves the row the caller's is waited for and written.
      const keptMail = email("kept");
      const keptRow = await insert({
        correo: keptMail,
        presence_state: "offline",
      });
      const kept = await pingWhileAppMoves(
        keptRow,
        (tx) =>
          tx`update public.usuarios set rol = 'usuario'
             where id = ${keptRow}`,
        uid(),
        keptMail,
      );
      assert.deepEqual(kept, { answered: keptRow, written: true });
    },
  );
}

e2eTest(
  "record_ping: without the optional columns, correo and usernames still match",
  async () => {
    // Last but one: the columns stay dropped for the rest of the file.
    await sql`alter table public.usuarios drop column last_manual_logout_at`;
    const id = uid();
    const mail = email("nolink");
    const row = await insert({ correo: mail, auth_user_id: uid() });
    await sql`alter table public.usuarios drop column auth_user_id`;
    const res = await ping(id, mail, { state: "offline" });
    assert.equal(res.id, row);
    assert.equal(res.presence_state, "offline");
  },
);

if (Deno.env.get("TEST_DATABASE_URL")) {
  e2eTest(
    "record_ping: without auth_user_id, a row the app moves to another person while the ping waits on it is not written",
    async () => {
      const mail = email("legacy-moving");
      const row = await insert({ correo: mail, presence_state: "offline" });
      const moved = await pingWhileAppMoves(
        row,
        (tx) =>
          tx`update public.usuarios set correo = ${email("someone")}
             where id = ${row}`,
        uid(),
        mail,
      );
      assert.deepEqual(moved, { answered: null, written: false });
    },
  );
}

e2eTest(
  "presence-ping: without presence.record_ping a ping is a 500 migration_missing naming the migration, and nothing is written",
  async () => {
    const u = await stack.createUser({ row: { correo: "placeholder" } });
    await sql`update public.usuarios set correo = ${u.email}
              where id = ${u.rowId!}`;
    await sql`alter function ${
      sql.unsafe(SIGNATURE)
    } rename to record_ping_moved`;
    try {
      for (const path of ["local", "auth"]) {
        const served = path === "local"
          ? { apiUrl: stack.apiUrl }
          : await stack.withFunctionEnv({ PRESENCE_VERIFY: "auth" });
        try {
          const res = await call(served.apiUrl, "presence-ping", {
            headers: { Authorization: `Bearer ${u.token}` },
          });
          assert.equal(res.status, 500, path);
          assert.equal(res.body.code, "migration_missing", path);
          assert.match(
            res.body.error,
            new RegExp(`presence\\.record_ping .*${LATEST_MIGRATION}`),
            path,
          );
        } finally {
          if ("close" in served) await served.close();
        }
      }
      const [row] = await sql`select ultimo_acceso from public.usuarios
                              where id = ${u.rowId!}`;
      assert.equal(row.ultimo_acceso, null);
    } finally {
      await sql`alter function presence.record_ping_moved(uuid,uuid,text,text,text[],integer)
                rename to record_ping`;
    }
  },
);

e2eTest(
  "presence-ping: a database migrated before presence.live_session existed answers 500 migration_missing naming it (not Auth on every ping); the repair migration restores it and the lock_timeout rule",
  async () => {
    const u = await stack.createUser({ row: { correo: "placeholder" } });
    await sql`update public.usuarios set correo = ${u.email}
              where id = ${u.rowId!}`;
    // What 20261124020100 and 030000 left on a database pushed before they
    // were changed in place.
    await sql`drop function presence.live_session(uuid, uuid)`;
    await sql`alter function presence.log_usuarios_changes()
              set lock_timeout = '1s'`;
    const broken = await call(stack.apiUrl, "presence-ping", {
      headers: { Authorization: `Bearer ${u.token}` },
    });
    assert.equal(broken.status, 500);
    assert.equal(broken.body.code, "migration_missing");
    assert.match(
      broken.body.error,
      new RegExp(
        `^presence\\.live_session is not callable: apply the migrations up to ${LATEST_MIGRATION}$`,
      ),
    );

    // The database as it was then, pushed again: the repair and what
    // follows it are applied.
    await sql`delete from supabase_migrations.schema_migrations
              where version >= '20261124235000'`;
    await pushMigrations(stack.dbUrl, { includeSeed: false });
    const repaired = await call(stack.apiUrl, "presence-ping", {
      headers: { Authorization: `Bearer ${u.token}` },
    });
    assert.equal(repaired.status, 200, JSON.stringify(repaired.body));
    const [fn] = await sql`
      select p.proconfig,
             has_function_privilege('authenticated', p.oid, 'execute') as open
      from pg_proc p where p.oid = 'presence.live_session(uuid,uuid)'::regprocedure`;
    assert.deepEqual(fn.proconfig, ['search_path=""']);
    assert.equal(fn.open, false);
    const timeouts = await sql`
      select p.proname::text as name,
             (select c from unnest(p.proconfig) c
              where c like 'lock_timeout=%') as lock_timeout
      from pg_proc p where p.pronamespace = 'presence'::regnamespace
      order by p.proname::text collate "C"`;
    assert.deepEqual(timeouts.map((r) => [r.name, r.lock_timeout]), [
      ["live_session", null],
      ["log_usuarios_changes", null],
      ["log_usuarios_row_changes", null],
      ["match_usuario", null],
      ["match_usuario", null],
      ["reader", "lock_timeout=1s"],
      ["record_ping", "lock_timeout=1s"],
      ["rights_writable_by", null],
      ["rights_write_paths", null],
      ["run_ddl", "lock_timeout=500ms"],
      ["settle_index", null],
    ]);
  },
);

closeStackAfterAll("record_ping", stack);
