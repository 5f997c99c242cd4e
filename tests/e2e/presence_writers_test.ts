/**
 * presence's changes-since cursor under every kind of writer: the client
 * kit's watched map (the real kit, polling the real function through
 * supabase-js) must equal a full read after the app's own update, insert
 * and delete, a SAVEPOINT or EXCEPTION-block write, a write by another role,
 * a TRUNCATE, a session in replica mode, a logical-replication subscription
 * (PostgreSQL only: a publisher cluster of the test's own), an idle
 * transaction beside the reads, times a Date cannot hold (`infinity`,
 * `-infinity`, a BC date), and with a naive `timestamp` column under
 * Europe/Madrid and America/Mexico_City. Also: a non-superuser reading role.
 * Runs on PGlite and, with TEST_DATABASE_URL,
 * on PostgreSQL, where transactions really overlap.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { type Clock, PresenceKit } from "../../client/presence.ts";
import { Pools, type Sql } from "../../supabase/functions/_shared/db.ts";
import {
  covers,
  FIRST_PAGE,
  type PresenceUser,
  readPresence,
  readShared,
} from "../../supabase/functions/presence/query.ts";
import { PROJECT_DIR } from "../../local/migrate.ts";
import { throwawayCluster } from "../../local/testing/cluster.ts";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { answerHoldingProxy } from "../support/faults.ts";
import { invoke } from "../support/invoke.ts";
import { jsonLines, logLines } from "../support/logs.ts";
import { startTestStack, type TestStack } from "../support/stack.ts";

const stack: TestStack = await startTestStack();
const onPostgres = Boolean(Deno.env.get("TEST_DATABASE_URL"));

/** The optional columns of the test stack's table, and a full first page. */
const READ_COLUMNS = { authUserId: true, lastManualLogoutAt: true };
const FULL_READ = {
  afterId: FIRST_PAGE,
  limit: 500,
  admin: false,
  awayS: 300,
  offlineS: 900,
  since: null,
};

/** The stack's database as a handler's deps reach it, statements bounded by `timeoutMs`. */
const _settings = (timeoutMs: number) => ({
  dbUrl: stack.dbUrl,
  dbPoolMax: 4,
  dbStatementTimeoutMs: timeoutMs,
});

// Holds ACCESS EXCLUSIVE on usuarios, so that reads wait on it, until
// `release()`; `waitFor(n)` waits until n statements queue behind it.
async function lockUsuarios() {
  const locker = postgres(stack.dbUrl, { max: 1, onnotice: () => {} });
  const watch = postgres(stack.dbUrl, { max: 1, onnotice: () => {} });
  let release: () => void = () => {};
  const released = new Promise<void>((r) => release = r);
  let locked: () => void = () => {};
  const isLocked = new Promise<void>((r) => locked = r);
  const held = locker.begin(async (tx) => {
    await tx`lock table public.usuarios in access exclusive mode`;
    locked();
    await released;
  });
  await isLocked;
  let ended: Promise<void> | undefined;
  return {
    async waitFor(count: number) {
      for (let i = 0; i < 500; i++) {
        const [{ n }] = await watch<{ n: number }[]>`
          select count(*)::int as n from pg_catalog.pg_locks
          where not granted and relation = 'public.usuarios'::regclass`;
        if (n >= count) return;
        await new Promise((r) => setTimeout(r, 20));
      }
      throw new Error(`no ${count} statements waited on the lock`);
    },
    release() {
      release();
      ended ??= held.then(() => Promise.all([locker.end(), watch.end()]))
        .then(() => {});
      return ended;
    },
  };
}

/** A clock whose timers fire only when the test says so. */
class ManualClock implements Clock {
  #timers = new Map<number, () => void>();
  #next = 1;
  now() {
    return Date.now();
  }
  setTimeout(fn: () => void, _ms: number) {
    const id = this.#next++;
    this.#timers.set(id, fn);
    return id;
  }
  clearTimeout(handle: unknown) {
    this.#timers.delete(handle as number);
  }
  fire() {
    const due = [...this.#timers.values()];
    this.#timers.clear();
    for (const fn of due) fn();
  }
}

/** The real kit watching as `reader`; `poll()` runs one poll and gives its map. */
async function watcher(reader: Awaited<ReturnType<TestStack["createUser"]>>) {
  const clock = new ManualClock();
  const kit = new PresenceKit(reader.client, {
    url: stack.apiUrl,
    publishableKey: stack.anonKey,
    clock,
    pageSize: 7,
  });
  let resolve: (m: Map<number, PresenceUser>) => void = () => {};
  let reject: (error: unknown) => void = () => {};
  const pending = () =>
    new Promise<Map<number, PresenceUser>>((ok, fail) => {
      resolve = ok;
      reject = fail;
    });
  let next = pending();
  const errors: unknown[] = [];
  // A failed poll fails the test at once, rather than leave it waiting for
  // a map that never comes.
  kit.on("error", (e) => {
    errors.push(e);
    reject(new Error(`the kit's poll failed: ${JSON.stringify(e)}`));
  });
  const unwatch = kit.watch((users) => {
    resolve(new Map(users as Map<number, PresenceUser>));
    next = pending();
  });
  let map = await next;
  return {
    get map() {
      return map;
    },
    async poll() {
      const pending = next;
      clock.fire();
      map = await pending;
      assert.deepEqual(errors, []);
      return map;
    },
    stop() {
      unwatch();
      kit.dispose();
    },
  };
}

type Watcher = Awaited<ReturnType<typeof watcher>>;

/** Every user, by a full read through the function (every page). */
async function fullRead(
  reader: Awaited<ReturnType<TestStack["createUser"]>>,
): Promise<Map<number, PresenceUser>> {
  const users = new Map<number, PresenceUser>();
  let after: number | null | undefined;
  while (after !== null) {
    const res = await invoke(reader.client, "presence", {
      body: { after_id: after, limit: 500 },
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    for (const u of res.body.users) users.set(u.id, u);
    after = res.body.next_after_id;
  }
  return users;
}

function sorted(map: Map<number, PresenceUser>) {
  return [...map.values()].sort((a, b) => a.id - b.id);
}

/** Polls once and asserts that the kit's map equals a full read. */
async function assertInStep(w: Watcher, reader: Reader, what: string) {
  const map = await w.poll();
  assert.deepEqual(sorted(map), sorted(await fullRead(reader)), what);
  return map;
}

type Reader = Awaited<ReturnType<TestStack["createUser"]>>;

async function member(name: string) {
  return await stack.createUser({
    row: {
      auth_user_id: true,
      nombre_usuario: `${name}-${crypto.randomUUID().slice(0, 6)}`,
    },
  });
}

e2eTest(
  "presence: the kit's map follows the app's own update, insert and delete",
  async () => {
    const reader = await member("reader");
    const other = await member("other");
    await invoke(other.client, "presence-ping");
    const w = await watcher(reader);
    try {
      assert.equal(w.map.get(other.rowId!)?.status, "online");
      // A server-side logout: the app sets the state itself.
      await stack.sql`update public.usuarios set presence_state = 'offline'
                      where id = ${other.rowId!}`;
      let map = await assertInStep(w, reader, "after an app update");
      assert.equal(map.get(other.rowId!)?.presence_state, "offline");
      assert.equal(map.get(other.rowId!)?.status, "offline");
      // A nightly "everyone offline" job over many rows at once.
      await invoke(other.client, "presence-ping");
      await w.poll();
      await stack.sql`update public.usuarios set presence_state = 'offline'
                      where presence_state = 'online'`;
      map = await assertInStep(w, reader, "after a bulk update");
      assert.equal(map.get(other.rowId!)?.status, "offline");
      // An insert by the app, already online.
      const [added] = await stack.sql`
        insert into public.usuarios (nombre_usuario, presence_state, ultimo_acceso)
        values ('added-by-app', 'online', date_trunc('milliseconds', now()))
        returning id`;
      map = await assertInStep(w, reader, "after an app insert");
      assert.equal(map.get(Number(added.id))?.status, "online");
      // A delete: the user leaves the map.
      await stack.sql`delete from public.usuarios where id = ${added.id}`;
      map = await assertInStep(w, reader, "after an app delete");
      assert.equal(map.has(Number(added.id)), false);
    } finally {
      w.stop();
    }
  },
);

e2eTest(
  "presence: the kit's map follows writes made in a SAVEPOINT and in a PL/pgSQL EXCEPTION block",
  async () => {
    const reader = await member("reader");
    const a = await member("sp"), b = await member("exc");
    const w = await watcher(reader);
    try {
      await stack.sql.begin(async (tx) => {
        await tx`savepoint s1`;
        await tx`update public.usuarios
                 set presence_state = 'online',
                     ultimo_acceso = date_trunc('milliseconds', now())
                 where id = ${a.rowId!}`;
        await tx`release savepoint s1`;
      });
      // The usual shape of an app's own rpc(): the write inside a block
      // with an exception handler, which PL/pgSQL runs as a subtransaction.
      await stack.sql.unsafe(`
        do $$ begin
          begin
            update public.usuarios
            set presence_state = 'online',
                ultimo_acceso = date_trunc('milliseconds', now())
            where id = ${b.rowId!};
          exception when others then raise;
          end;
        end $$`);
      const map = await assertInStep(w, reader, "after subtransaction writes");
      assert.equal(map.get(a.rowId!)?.status, "online");
      assert.equal(map.get(b.rowId!)?.status, "online");
    } finally {
      w.stop();
    }
  },
);

e2eTest(
  "presence: the kit's map follows a write by another role that has no right on the presence schema",
  async () => {
    const reader = await member("reader");
    const target = await member("target");
    // An app's own role, with a policy of its own on the table (row level
    // security is on for the table the migration creates).
    await stack.sql.unsafe(`
      do $$ begin
        -- Roles belong to the cluster, grants and policies to this database.
        if not exists (select 1 from pg_roles where rolname = 'app_writer_18') then
          create role app_writer_18 nologin nosuperuser;
        end if;
      end $$;
      grant usage on schema public to app_writer_18;
      grant select, update on public.usuarios to app_writer_18;
      drop policy if exists app_writer_18_all on public.usuarios;
      create policy app_writer_18_all on public.usuarios to app_writer_18
        using (true) with check (true);`);
    const w = await watcher(reader);
    try {
      await stack.sql.begin(async (tx) => {
        await tx`set local role app_writer_18`;
        const [{ usage }] = await tx`
          select has_schema_privilege('presence', 'usage') as usage`;
        assert.equal(usage, false);
        await tx`update public.usuarios
                 set presence_state = 'online',
                     ultimo_acceso = date_trunc('milliseconds', now())
                 where id = ${target.rowId!}`;
      });
      const map = await assertInStep(w, reader, "after another role's write");
      assert.equal(map.get(target.rowId!)?.status, "online");
    } finally {
      w.stop();
    }
  },
);

e2eTest(
  "presence: a TRUNCATE of usuarios answers the next poll with a resync",
  async () => {
    const reader = await member("reader");
    const w = await watcher(reader);
    const issued = await invoke(reader.client, "presence", {
      body: { limit: 1 },
    });
    try {
      const keep = await stack.sql`select * from public.usuarios`;
      await stack.sql`truncate public.usuarios`;
      await stack.sql`insert into public.usuarios ${
        stack.sql(keep.map((r) => ({ ...r })))
      }`;
      const res = await invoke(reader.client, "presence", {
        body: { cursor: issued.body.cursor },
      });
      assert.equal(res.status, 200);
      assert.equal(res.body.resync, true);
      await assertInStep(w, reader, "after a truncate and reload");
    } finally {
      w.stop();
    }
  },
);

e2eTest(
  "presence: a write with triggers disabled is not listed; the whole-table marker docs/api.md gives for it makes the next poll a resync",
  async () => {
    const reader = await member("reader");
    const other = await member("other");
    const w = await watcher(reader);
    try {
      // As pg_restore --disable-triggers, or a bulk fix run that way.
      await stack.sql.begin(async (tx) => {
        await tx`alter table public.usuarios disable trigger usuarios_log_update`;
        await tx`update public.usuarios set presence_state = 'online',
                   ultimo_acceso = now() where id = ${other.rowId!}`;
        await tx`alter table public.usuarios
                   enable always trigger usuarios_log_update`;
      });
      assert.equal((await w.poll()).get(other.rowId!)?.status, "offline");
      // The statement of docs/api.md, "How the cursor works".
      await stack.sql`
        insert into presence.changes (user_id, txid)
        values (-9223372036854775808, pg_current_xact_id())
        on conflict (user_id) do update set txid = excluded.txid, logged_at = now()`;
      const map = await assertInStep(w, reader, "after the marker");
      assert.equal(map.get(other.rowId!)?.status, "online");
    } finally {
      w.stop();
    }
  },
);

/** The change-log trigger on updates, as migration 20261124020000 makes it. */
const CREATE_UPDATE_TRIGGER = `
  create trigger usuarios_log_update
    after update on public.usuarios
    referencing old table as old_rows new table as new_rows
    for each statement execute function presence.log_usuarios_changes();
  alter table public.usuarios enable always trigger usuarios_log_update`;

/** One changes-since read through the function: its resync and cursor. */
async function readSince(reader: Reader, cursor: string) {
  const res = await invoke(reader.client, "presence", { body: { cursor } });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body as {
    resync: boolean;
    cursor: string;
    users: PresenceUser[];
  };
}

e2eTest(
  "presence: while a change-log trigger is missing or disabled (a table swapped for a copy, a schema tool), or a table inherits usuarios, every changes-since read is a full read (resync), its line says so (at warn once a minute); once mended, one resync more, then changes again; after a data-only restore (pg_restore --disable-triggers, which leaves them enabled for origin sessions only) one full read shows what it wrote, then ordinary writes are followed and the lines say replica-mode writes are not logged (appwrite H1, M1; fresh5 M2; fresh6 M1)",
  async () => {
    const reader = await member("reader");
    const other = await member("other");
    let cursor = (await invoke(reader.client, "presence", { body: {} })).body
      .cursor as string;
    const online = async () => {
      await stack.sql`update public.usuarios set presence_state = 'online',
                        ultimo_acceso = now() where id = ${other.rowId!}`;
    };
    const offline = async () => {
      await stack.sql`update public.usuarios set presence_state = 'offline'
                      where id = ${other.rowId!}`;
    };
    const breakages: [string, string, string][] = [
      [
        "dropped",
        "drop trigger usuarios_log_update on public.usuarios",
        CREATE_UPDATE_TRIGGER,
      ],
      [
        "disabled",
        "alter table public.usuarios disable trigger usuarios_log_update",
        "alter table public.usuarios enable always trigger usuarios_log_update",
      ],
      [
        "a child table (inheritance, partitions)",
        "create table public.usuarios_hist_t () inherits (public.usuarios)",
        "drop table public.usuarios_hist_t",
      ],
    ];
    for (const [what, breakIt, mendIt] of breakages) {
      await stack.sql.unsafe(breakIt);
      await online();
      const lines = await logLines(async () => {
        const broken = await readSince(reader, cursor);
        assert.equal(broken.resync, true, what);
        assert.equal(
          broken.users.find((u) => u.id === other.rowId)?.status,
          "online",
          what,
        );
        cursor = broken.cursor;
        await offline();
        const still = await readSince(reader, cursor);
        assert.equal(still.resync, true, `${what}, a second poll`);
        cursor = still.cursor;
      });
      const said = jsonLines(lines).filter((l) =>
        l.fn === "presence" && /change log/.test(String(l.change_log ?? ""))
      );
      assert.equal(said.length, 2, `${what}: ${lines.join("\n")}`);
      // The stack's presence handler warned at its first such read (the
      // first breakage) and not again within the minute.
      assert.deepEqual(
        said.map((l) => l.level),
        what === "dropped" ? ["warn", "info"] : ["info", "info"],
        what,
      );
      await stack.sql.unsafe(mendIt);
      const mended = await readSince(reader, cursor);
      assert.equal(mended.resync, true, `${what}: the cursor of a full read`);
      await online();
      const after = await readSince(reader, mended.cursor);
      assert.equal(after.resync, false, `${what}, mended`);
      assert.deepEqual(after.users.map((u) => u.id), [other.rowId], what);
      cursor = after.cursor;
      await offline();
      cursor = (await readSince(reader, cursor)).cursor;
    }
    // A data-only restore (pg_restore --disable-triggers): its writes are
    // never logged, and it leaves the triggers enabled for origin sessions
    // only. The switch costs one full read, which shows the restored row;
    // then ordinary writes are followed, each line saying that replica-mode
    // writes are not logged; enabled ALWAYS again, one full read more.
    await stack.sql.unsafe(`
      alter table public.usuarios disable trigger user;
      update public.usuarios set presence_state = 'online',
        ultimo_acceso = now() where id = ${other.rowId};
      alter table public.usuarios enable trigger user`);
    try {
      const lines = await logLines(async () => {
        const restored = await readSince(reader, cursor);
        assert.equal(restored.resync, true);
        assert.equal(
          restored.users.find((u) => u.id === other.rowId)?.status,
          "online",
        );
        await offline();
        const origin = await readSince(reader, restored.cursor);
        assert.equal(origin.resync, false);
        assert.deepEqual(origin.users.map((u) => u.id), [other.rowId]);
        cursor = origin.cursor;
      });
      const said = jsonLines(lines).filter((l) => l.fn === "presence")
        .map((l) => String(l.change_log));
      assert.equal(said.length, 2, lines.join("\n"));
      for (const line of said) assert.match(line, /origin sessions only/);
    } finally {
      await stack.sql.unsafe(`
        alter table public.usuarios
          enable always trigger usuarios_log_insert,
          enable always trigger usuarios_log_update,
          enable always trigger usuarios_log_delete,
          enable always trigger usuarios_log_truncate,
          enable always trigger usuarios_log_replica_rows`);
    }
    const always = await readSince(reader, cursor);
    assert.equal(always.resync, true);
    cursor = (await readSince(reader, always.cursor)).cursor;
    // Dropped and made again between two polls: the write in between was
    // never logged, and the cursor tells the triggers apart.
    await stack.sql`drop trigger usuarios_log_update on public.usuarios`;
    await online();
    await stack.sql.unsafe(CREATE_UPDATE_TRIGGER);
    const across = await readSince(reader, cursor);
    assert.equal(across.resync, true);
    assert.equal(
      across.users.find((u) => u.id === other.rowId)?.status,
      "online",
    );
  },
);

e2eTest(
  "presence: the kit's map follows a session in replica mode (a data-only restore through psql), and each id it writes is logged once, by its transaction",
  async () => {
    const reader = await member("reader");
    const moved = await member("moved");
    const renumbered = await member("renumbered");
    const leaving = await member("leaving");
    const w = await watcher(reader);
    try {
      // Both the statement triggers and the row trigger for replica-mode
      // writers (20261125020000) fire here.
      const [{ newId }] = await stack.sql`
        select nextval(pg_get_serial_sequence('public.usuarios', 'id'))::int
          as "newId"`;
      const { txid, added } = await stack.sql.begin(async (tx) => {
        await tx`set local session_replication_role = replica`;
        const [{ txid }] = await tx`select pg_current_xact_id()::text as txid`;
        const added = await tx`
          insert into public.usuarios
            (nombre_usuario, presence_state, ultimo_acceso)
          select 'restored-' || g, 'online', date_trunc('milliseconds', now())
          from generate_series(1, 3) g returning id`;
        await tx`update public.usuarios
                 set presence_state = 'online',
                     ultimo_acceso = date_trunc('milliseconds', now())
                 where id = ${moved.rowId!}`;
        await tx`update public.usuarios set id = ${newId}
                 where id = ${renumbered.rowId!}`;
        await tx`delete from public.usuarios where id = ${leaving.rowId!}`;
        return { txid, added: added.map((r) => Number(r.id)) };
      });
      const written = [
        ...added,
        moved.rowId!,
        renumbered.rowId!,
        newId,
        leaving.rowId!,
      ].sort((a, b) => a - b);
      const logged = await stack.sql`
        select user_id::int as id, count(*)::int as n from presence.changes
        where txid = ${txid}::xid8 group by user_id order by user_id`;
      assert.deepEqual(
        logged.map((r) => [r.id, r.n]),
        written.map((id) => [id, 1]),
      );
      const map = await assertInStep(w, reader, "after a replica-mode session");
      assert.equal(map.get(moved.rowId!)?.status, "online");
      assert.equal(map.has(renumbered.rowId!), false);
      assert.match(String(map.get(newId)?.nombre_usuario), /^renumbered-/);
      assert.equal(map.has(leaving.rowId!), false);
      for (const id of added) assert.equal(map.get(id)?.status, "online");
    } finally {
      w.stop();
    }
  },
);

e2eTest(
  "presence.changes: the prune docs/api.md gives removes only deleted users' rows older than a day",
  async () => {
    const prune = () =>
      stack.sql`
        delete from presence.changes c
        where not exists (select 1 from public.usuarios u where u.id = c.user_id)
          and c.logged_at < now() - interval '1 day'
        returning c.user_id`;
    const [kept] = await stack.sql`
      insert into public.usuarios (nombre_usuario) values ('kept') returning id`;
    const [gone] = await stack.sql`
      insert into public.usuarios (nombre_usuario) values ('gone') returning id`;
    await stack.sql`delete from public.usuarios where id = ${gone.id}`;
    assert.deepEqual([...await prune()], []);
    await stack.sql`update presence.changes
                    set logged_at = now() - interval '2 days'
                    where user_id in (${kept.id}, ${gone.id})`;
    assert.deepEqual((await prune()).map((r) => Number(r.user_id)), [
      Number(gone.id),
    ]);
    await stack.sql`delete from public.usuarios where id = ${kept.id}`;
  },
);

e2eTest(
  "presence: a legacy table's ids of 0 and below are listed, followed and removed like any other",
  async () => {
    const reader = await member("reader");
    const w = await watcher(reader);
    try {
      await stack.sql`
        insert into public.usuarios (id, nombre_usuario, presence_state)
        overriding system value
        values (0, 'system', 'offline'), (-5, 'legacy-admin', 'offline')`;
      let map = await assertInStep(w, reader, "after ids 0 and -5");
      assert.equal(map.get(0)?.nombre_usuario, "system");
      assert.equal(map.get(-5)?.nombre_usuario, "legacy-admin");
      const page = await invoke(reader.client, "presence", {
        body: { ids: [-5, 0], limit: 1 },
      });
      assert.deepEqual(page.body.users.map((u: PresenceUser) => u.id), [-5]);
      assert.equal(page.body.next_after_id, -5);
      await stack.sql`update public.usuarios set presence_state = 'online',
                        ultimo_acceso = now() where id = -5`;
      map = await assertInStep(w, reader, "after -5 came online");
      assert.equal(map.get(-5)?.status, "online");
      await stack.sql`delete from public.usuarios where id in (0, -5)`;
      map = await assertInStep(w, reader, "after both left");
      assert.equal(map.has(0) || map.has(-5), false);
    } finally {
      w.stop();
      await stack.sql`delete from public.usuarios where id in (0, -5)`;
    }
  },
);

e2eTest(
  "presence change log: the row trigger for replica-mode writers runs only in replica mode, is enabled ALWAYS, and its function is security definer with search_path '' and no execute for clients",
  async () => {
    const target = await member("target");
    const [t] = await stack.sql`
      select tgenabled, pg_get_triggerdef(oid) as def from pg_trigger
      where tgrelid = 'public.usuarios'::regclass
        and tgname = 'usuarios_log_replica_rows'`;
    assert.equal(t.tgenabled, "A");
    assert.equal(
      t.def,
      "CREATE TRIGGER usuarios_log_replica_rows AFTER INSERT OR DELETE OR UPDATE ON public.usuarios FOR EACH ROW WHEN ((current_setting('session_replication_role'::text) = 'replica'::text)) EXECUTE FUNCTION presence.log_usuarios_row_changes()",
    );
    const fns = await stack.sql`
      select p.proname::text as name, p.prosecdef, p.proconfig,
             pg_get_userbyid(p.proowner)::text as owner,
             has_function_privilege('anon', p.oid, 'execute') as anon,
             has_function_privilege('authenticated', p.oid, 'execute')
               as authenticated
      from pg_proc p
      where p.oid in ('presence.log_usuarios_changes()'::regprocedure,
                      'presence.log_usuarios_row_changes()'::regprocedure)
      order by 1`;
    // As the statement triggers' function, owner included.
    const same = {
      prosecdef: true,
      proconfig: ['search_path=""'],
      owner: fns[0].owner,
      anon: false,
      authenticated: false,
    };
    assert.deepEqual(fns.map((f) => ({ ...f })), [
      { name: "log_usuarios_changes", ...same },
      { name: "log_usuarios_row_changes", ...same },
    ]);
    // Calls in this transaction: none for an ordinary write, one per row
    // in replica mode.
    const calls = await stack.sql.begin(async (tx) => {
      await tx`set local track_functions = 'pl'`;
      const count = async () => {
        const [r] = await tx`
          select coalesce(sum(calls), 0)::int as n
          from pg_stat_xact_user_functions
          where schemaname = 'presence'
            and funcname = 'log_usuarios_row_changes'`;
        return r.n;
      };
      await tx`update public.usuarios set presence_state = 'offline'
               where id = ${target.rowId!}`;
      const ordinary = await count();
      await tx`set local session_replication_role = replica`;
      await tx`update public.usuarios set presence_state = 'offline'
               where id = ${target.rowId!}`;
      return [ordinary, await count()];
    });
    assert.deepEqual(calls, [0, 1]);
  },
);

e2eTest(
  "presence: a non-superuser reading role reads changes since a cursor",
  async () => {
    const target = await member("target");
    await stack.sql.unsafe(`
      do $$ begin
        if not exists (select 1 from pg_roles where rolname = 'presence_reader_18') then
          create role presence_reader_18 nologin nosuperuser bypassrls;
        end if;
      end $$;
      grant usage on schema public, presence to presence_reader_18;
      grant select on public.usuarios, presence.changes to presence_reader_18;`);
    const columns = READ_COLUMNS;
    const options = FULL_READ;
    const asReader = <T>(work: (sql: Sql) => Promise<T>) =>
      stack.sql.begin(async (tx) => {
        await tx`set local role presence_reader_18`;
        const [me] = await tx`select rolsuper from pg_roles
                              where rolname = current_user`;
        assert.equal(me.rolsuper, false);
        return await work(tx as unknown as Sql);
      });
    const first = await asReader((sql) => readPresence(sql, columns, options));
    await invoke(target.client, "presence-ping");
    const delta = await asReader((sql) =>
      readPresence(sql, columns, { ...options, since: first.cursor })
    );
    assert.equal(delta.reset, false);
    assert.deepEqual(delta.users.map((u) => [u.id, u.status]), [[
      target.rowId,
      "online",
    ]]);
  },
);

e2eTest(
  "readShared: a read asked while one that covers it is in flight shares its statement; later ones run their own",
  async () => {
    // As the handler gets it: a view of its deps' pool, whose memory holds
    // the reads in flight.
    const pools = new Pools();
    const sql = pools.database(_settings(10_000));
    try {
      const columns = READ_COLUMNS;
      const options = FULL_READ;
      const first = await readPresence(sql, columns, options);
      const since = { ...options, since: first.cursor };
      const together = await Promise.all(
        Array.from({ length: 8 }, () => readShared(sql, columns, since)),
      );
      assert.ok(together.every((r) => r === together[0]));
      const other = await readShared(sql, columns, { ...since, limit: 7 });
      assert.notEqual(other, together[0]);
      const later = await readShared(sql, columns, since);
      assert.notEqual(later, together[0]);
      assert.deepEqual(later.users, together[0].users);
      // A newer cursor asked while an older one's read runs shares it (its
      // answer covers the newer one's); an older cursor never shares a
      // newer one's.
      const older = readShared(sql, columns, since);
      const newer = readShared(sql, columns, {
        ...options,
        since: later.cursor,
      });
      assert.equal(await newer, await older);
      const newest = readShared(sql, columns, {
        ...options,
        since: later.cursor,
      });
      const oldest = readShared(sql, columns, since);
      assert.notEqual(await oldest, await newest);
      // Another set of deps (another isolate) shares nothing with this one.
      const elsewhere = new Pools();
      try {
        const mine = readShared(sql, columns, since);
        const theirs = readShared(
          elsewhere.database(_settings(10_000)),
          columns,
          since,
        );
        assert.notEqual(await theirs, await mine);
      } finally {
        await elsewhere.close();
      }
    } finally {
      await pools.close();
    }
  },
);

// A pool whose one connection goes through an answer-holding proxy
// (`sql`, its connection opened before any hold) and one straight to the
// database (`elsewhere`: another isolate of the same project), for `work`.
async function withHeldPool(
  work: (pool: {
    proxy: ReturnType<typeof answerHoldingProxy>;
    sql: Sql;
    elsewhere: Sql;
  }) => Promise<void>,
) {
  const proxy = answerHoldingProxy(stack.dbUrl);
  const pools = new Pools(), direct = new Pools();
  try {
    const sql = pools.database({
      ..._settings(30_000),
      dbUrl: proxy.url,
      dbPoolMax: 1,
    });
    await readPresence(sql, READ_COLUMNS, FULL_READ);
    await work({ proxy, sql, elsewhere: direct.database(_settings(30_000)) });
  } finally {
    proxy.release();
    await pools.close();
    await direct.close();
    await proxy.close();
  }
}

// Statement A of `sql` runs for `options`, its answer held from its command
// tag (postgres.js describes a statement with parameters first, and runs it
// once that answer is in), while `meanwhile` runs; then B asks `readShared`
// on the same pool for `asked(what meanwhile gave)`, and the answer is
// released.
async function whileHeld<T>(
  proxy: ReturnType<typeof answerHoldingProxy>,
  sql: Sql,
  options: Parameters<typeof readShared>[2],
  meanwhile: () => Promise<T>,
  asked: (got: T) => Parameters<typeof readShared>[2],
) {
  proxy.hold(/SELECT \d/);
  const a = readShared(sql, READ_COLUMNS, options);
  for (let i = 0; proxy.held() === ""; i++) {
    assert.ok(i < 300, "statement A was not answered in 30 s");
    await new Promise((r) => setTimeout(r, 100));
  }
  const got = await meanwhile();
  const b = readShared(sql, READ_COLUMNS, asked(got));
  proxy.release();
  const [ra, rb] = await Promise.all([a, b]);
  return { ra, rb, got };
}

e2eTest(
  "readShared: a read never shares a statement whose snapshot is older than its own cursor (its answer still on the way when the newer cursor was issued)",
  async () => {
    const target = await member("target");
    await withHeldPool(async ({ proxy, sql, elsewhere }) => {
      const a = (await readPresence(elsewhere, READ_COLUMNS, FULL_READ))
        .cursor;
      // A write after A's snapshot, and a cursor b that sees it, issued
      // elsewhere. b is newer than a: A's statement covers b's cursor, not
      // its view.
      const { ra, rb, got: b } = await whileHeld(
        proxy,
        sql,
        { ...FULL_READ, since: a },
        async () => {
          await invoke(target.client, "presence-ping");
          return (await readPresence(elsewhere, READ_COLUMNS, {
            ...FULL_READ,
            since: a,
          })).cursor;
        },
        (b) => ({ ...FULL_READ, since: b }),
      );
      assert.ok(ra.users.every((u) => u.id !== target.rowId));
      assert.notEqual(rb, ra);
      assert.ok(
        covers(b, rb.cursor),
        "the answer's cursor went back behind the caller's",
      );
    });
  },
);

e2eTest(
  "readShared: a later page is never shared (a statement older than the caller's first page would hide a write the next poll does not list)",
  async () => {
    const one = await member("page-one");
    const two = await member("page-two");
    await invoke(two.client, "presence-ping");
    await withHeldPool(async ({ proxy, sql, elsewhere }) => {
      const page = { ...FULL_READ, limit: 1, afterId: one.rowId! };
      // Watcher X's second page runs; the app logs `two` out; watcher Y
      // reads its first page elsewhere, then its second page here.
      const { rb, got: firstPage } = await whileHeld(
        proxy,
        sql,
        page,
        async () => {
          await stack.sql`update public.usuarios set presence_state = 'offline'
                          where id = ${two.rowId!}`;
          return await readPresence(elsewhere, READ_COLUMNS, {
            ...FULL_READ,
            limit: 1,
            afterId: one.rowId! - 1,
          });
        },
        () => page,
      );
      // Y's view: its pages, then the next poll from its first page's
      // cursor, as the kit keeps it.
      const next = await readPresence(elsewhere, READ_COLUMNS, {
        ...FULL_READ,
        since: firstPage.cursor,
      });
      const seen = [...rb.users, ...next.users].filter((u) =>
        u.id === two.rowId
      );
      assert.equal(seen.at(-1)?.presence_state, "offline");
    });
  },
);

e2eTest(
  "readShared: the reset answered to a cursor older than an hour is not handed to a caller with a fresh cursor sharing its statement",
  async () => {
    await member("someone");
    await withHeldPool(async ({ proxy, sql, elsewhere }) => {
      const old = (await readPresence(elsewhere, READ_COLUMNS, FULL_READ))
        .cursor;
      // A laptop that slept 61 minutes: its cursor, by the database clock.
      const stale = { ...old, time: old.time - 3_660_000_000n };
      const fresh = (await readPresence(elsewhere, READ_COLUMNS, {
        ...FULL_READ,
        since: old,
      })).cursor;
      const { ra, rb } = await whileHeld(
        proxy,
        sql,
        { ...FULL_READ, since: stale },
        () => Promise.resolve(null),
        () => ({ ...FULL_READ, since: fresh }),
      );
      assert.equal(ra.reset, true);
      assert.equal(rb.reset, false);
    });
  },
);

if (onPostgres) {
  // Logical replication is PostgreSQL's: a publisher of its own (a cluster
  // with wal_level=logical) and the stack's database subscribing to it.
  e2eTest(
    "presence: the kit's map follows writes applied by a logical-replication subscription (update, insert, delete, a changed id, a truncate)",
    async () => {
      const reader = await member("reader");
      const moved = await member("moved");
      const leaving = await member("leaving");
      const renumbered = await member("renumbered");
      // Ids the publisher's new rows take, from the stack's own sequence
      // so that no later insert here takes them.
      const [{ newId, addedId }] = await stack.sql`
        select nextval(pg_get_serial_sequence('public.usuarios', 'id'))::int
                 as "newId",
               nextval(pg_get_serial_sequence('public.usuarios', 'id'))::int
                 as "addedId"`;
      const publisher = await throwawayCluster({
        settings: { wal_level: "logical" },
      });
      const pub = postgres(publisher.url, { max: 1, onnotice: () => {} });
      const name = `presence_sub_${crypto.randomUUID().slice(0, 8)}`;
      let w: Watcher | null = null;
      try {
        // The replicated table: the rows both sides hold (copy_data =
        // false), with the columns the publisher has.
        const rows = await stack.sql`
          select id::int as id, nombre_usuario, presence_state, ultimo_acceso
          from public.usuarios
          where id in ${
          stack.sql([moved.rowId!, leaving.rowId!, renumbered.rowId!])
        }`;
        await pub`create table public.usuarios (
                    id bigint primary key, nombre_usuario text,
                    presence_state text not null, ultimo_acceso timestamptz)`;
        await pub`insert into public.usuarios ${
          pub(rows.map((r) => ({ ...r })))
        }`;
        await pub`create publication presence_pub for table public.usuarios`;
        const port = new URL(publisher.url).port;
        // Trust authentication on loopback: no password in the catalog.
        await stack.sql.unsafe(`
          create subscription ${name}
          connection 'host=127.0.0.1 port=${port} dbname=postgres user=postgres'
          publication presence_pub with (copy_data = false)`);
        w = await watcher(reader);
        const applied = async (what: string, check: () => Promise<boolean>) => {
          for (let i = 0; i < 300; i++) {
            if (await check()) return;
            await new Promise((r) => setTimeout(r, 100));
          }
          assert.fail(`the subscription did not apply ${what} in 30 s`);
        };

        // Each its own transaction on the publisher.
        await pub`update public.usuarios
                  set presence_state = 'online',
                      ultimo_acceso = date_trunc('milliseconds', now())
                  where id = ${moved.rowId!}`;
        await pub`insert into public.usuarios
                    (id, nombre_usuario, presence_state, ultimo_acceso)
                  values (${addedId}, 'added-by-publisher', 'online',
                          date_trunc('milliseconds', now()))`;
        await pub`delete from public.usuarios where id = ${leaving.rowId!}`;
        await pub`update public.usuarios set id = ${newId}
                  where id = ${renumbered.rowId!}`;
        await applied("the writes", async () => {
          const [r] = await stack.sql`
            select count(*) filter (where id = ${newId})::int as renumbered,
                   count(*) filter (where id = ${leaving.rowId!})::int
                     as leaving
            from public.usuarios`;
          return r.renumbered === 1 && r.leaving === 0;
        });
        const [{ worker }] = await stack.sql`
          select count(*)::int as worker from pg_stat_subscription
          where subname = ${name} and pid is not null`;
        assert.equal(worker, 1, "applied by the subscription's worker");
        const map = await assertInStep(w, reader, "after applied writes");
        assert.equal(map.get(moved.rowId!)?.status, "online");
        assert.equal(map.get(addedId)?.status, "online");
        assert.equal(map.has(leaving.rowId!), false);
        assert.equal(map.has(renumbered.rowId!), false);
        assert.match(String(map.get(newId)?.nombre_usuario), /^renumbered-/);

        // A truncate on the publisher empties the table here too (every
        // row, the stack's own included): the next poll starts over.
        const keep = await stack.sql`select * from public.usuarios`;
        const issued = await invoke(reader.client, "presence", {
          body: { limit: 1 },
        });
        await pub`truncate public.usuarios`;
        await applied("the truncate", async () => {
          const [r] = await stack.sql`
            select count(*)::int as n from public.usuarios`;
          return r.n === 0;
        });
        await stack.sql.unsafe(`alter subscription ${name} disable`);
        await stack.sql`insert into public.usuarios ${
          stack.sql(keep.map((r) => ({ ...r })))
        }`;
        const res = await invoke(reader.client, "presence", {
          body: { cursor: issued.body.cursor },
        });
        assert.equal(res.status, 200, JSON.stringify(res.body));
        assert.equal(res.body.resync, true);
        await assertInStep(w, reader, "after the applied truncate");
      } finally {
        w?.stop();
        // The worker stops with the subscription; its slot on the
        // publisher goes with it (or with the publisher's cluster).
        await stack.sql.unsafe(`alter subscription ${name} disable`)
          .catch(() => {});
        await stack.sql.unsafe(
          `alter subscription ${name} set (slot_name = none)`,
        ).catch(() => {});
        await stack.sql.unsafe(`drop subscription if exists ${name}`);
        await pub.end();
        await publisher.destroy();
      }
    },
  );
}

if (onPostgres) {
  // PGlite runs one transaction at a time: a transaction left open there
  // would stop every other statement, so these cases exist only where
  // transactions overlap.

  e2eTest(
    "readShared: when the request that started a shared read is abandoned, its sharers ask again and are answered, not failed",
    async () => {
      const pools = new Pools();
      const lock = await lockUsuarios();
      try {
        const closedTab = new AbortController();
        const starter = pools.database(_settings(30_000), closedTab.signal);
        const sharer = pools.database(
          _settings(30_000),
          new AbortController().signal,
        );
        const first = readShared(starter, READ_COLUMNS, FULL_READ);
        const firstOutcome = first.then(() => null, (e) => e);
        await lock.waitFor(1);
        const second = readShared(sharer, READ_COLUMNS, FULL_READ);
        const secondOutcome = second.then((r) => r, (e) => e);
        closedTab.abort();
        const failure = await firstOutcome;
        assert.equal(failure?.code, "57014");
        // The sharer's own statement now waits on the lock in its place.
        await lock.waitFor(1);
        await lock.release();
        const answer = await secondOutcome;
        assert.ok(!(answer instanceof Error), String(answer));
        const fresh = await readPresence(sharer, READ_COLUMNS, FULL_READ);
        assert.deepEqual(answer.users, fresh.users);
      } finally {
        await lock.release();
        await pools.close();
      }
    },
  );

  e2eTest(
    "readShared: a shared read that runs out of time fails its sharers with it (no statement per watcher on a slow database)",
    async () => {
      const pools = new Pools();
      const lock = await lockUsuarios();
      try {
        const starter = pools.database(
          _settings(2_000),
          new AbortController().signal,
        );
        const sharer = pools.database(
          _settings(30_000),
          new AbortController().signal,
        );
        const first = readShared(starter, READ_COLUMNS, FULL_READ)
          .then(() => null, (e) => e);
        await lock.waitFor(1);
        const second = readShared(sharer, READ_COLUMNS, FULL_READ)
          .then(() => null, (e) => e);
        assert.equal((await first)?.code, "57014");
        assert.equal((await second)?.code, "57014");
      } finally {
        await lock.release();
        await pools.close();
      }
    },
  );
  e2eTest(
    "presence: a SAVEPOINT write committed after a cursor was issued is in the next delta",
    async () => {
      const reader = await member("reader");
      const late = await member("late");
      const w = await watcher(reader);
      const other = postgres(stack.dbUrl, { max: 1, onnotice: () => {} });
      try {
        await other.begin(async (tx) => {
          await tx`select pg_current_xact_id()`;
          await tx`savepoint s1`;
          await tx`update public.usuarios
                   set presence_state = 'online',
                       ultimo_acceso = date_trunc('milliseconds', now())
                   where id = ${late.rowId!}`;
          await tx`release savepoint s1`;
          // A poll while the transaction is still open: its cursor's
          // snapshot cannot see the write.
          const map = await w.poll();
          assert.notEqual(map.get(late.rowId!)?.status, "online");
        });
        const map = await assertInStep(w, reader, "after the late commit");
        assert.equal(map.get(late.rowId!)?.status, "online");
      } finally {
        await other.end();
        w.stop();
      }
    },
  );

  e2eTest(
    "presence change-log migration: on a busy usuarios it steps aside for writes and retries, then creates the triggers",
    async () => {
      const [{ id }] = await stack
        .sql`select min(id) as id from public.usuarios`;
      const file = await Deno.readTextFile(
        `${PROJECT_DIR}supabase/migrations/20261124020000_create_presence_changes.sql`,
      );
      const holder = postgres(stack.dbUrl, { max: 1, onnotice: () => {} });
      const notices: string[] = [];
      const migrator = postgres(stack.dbUrl, {
        max: 1,
        onnotice: (n) => notices.push(String(n.message)),
      });
      let release = () => {};
      const held = new Promise<void>((r) => release = r);
      let opened = () => {};
      const isOpen = new Promise<void>((r) => opened = r);
      const tx = holder.begin(async (sql) => {
        await sql`update public.usuarios set presence_state = presence_state
                  where id = ${id}`;
        opened();
        await held;
      });
      try {
        await isOpen;
        // Sent now (postgres.js sends a query when it is awaited).
        const migration = migrator.unsafe(file).execute();
        // The migration waits for the lock behind the open transaction...
        for (;;) {
          const [{ waiting }] = await stack.sql`
            select count(*)::int as waiting from pg_locks
            where relation = 'public.usuarios'::regclass and not granted`;
          if (waiting > 0) break;
          await new Promise((r) => setTimeout(r, 50));
        }
        // ...and another writer still lands while that transaction holds
        // the table: the migration's lock request does not keep writes
        // queued behind it (it gives up after 2 s and tries again).
        await stack
          .sql`update public.usuarios set presence_state = presence_state
                        where id <> ${id}`;
        release();
        await tx;
        await migration;
        assert.ok(notices.some((n) => n.includes("is busy (attempt 1 of 10)")));
        const triggers = await stack.sql`
          select tgname, tgenabled from pg_trigger
          where tgrelid = 'public.usuarios'::regclass
            and tgname like 'usuarios_log_%' order by tgname`;
        assert.deepEqual(triggers.map((t) => [t.tgname, t.tgenabled]), [
          ["usuarios_log_delete", "A"],
          ["usuarios_log_insert", "A"],
          ["usuarios_log_replica_rows", "A"],
          ["usuarios_log_truncate", "A"],
          ["usuarios_log_update", "A"],
        ]);
      } finally {
        release();
        await tx.catch(() => {});
        await holder.end();
        await migrator.end();
      }
    },
  );

  e2eTest(
    "presence: an idle open transaction beside the reads neither hides changes nor widens what a poll reads",
    async () => {
      const reader = await member("reader");
      const idle = await member("idle");
      const busy = await member("busy");
      const w = await watcher(reader);
      const other = postgres(stack.dbUrl, { max: 1, onnotice: () => {} });
      let release = () => {};
      const held = new Promise<void>((r) => release = r);
      let opened = () => {};
      const isOpen = new Promise<void>((r) => opened = r);
      const tx = other.begin(async (tx) => {
        await tx`update public.usuarios set presence_state = 'online',
                   ultimo_acceso = date_trunc('milliseconds', now())
                 where id = ${idle.rowId!}`;
        opened();
        await held;
      });
      try {
        await isOpen;
        await w.poll();
        // Many changes, each its own transaction, while it stays open.
        const many = await stack.sql`
          insert into public.usuarios (nombre_usuario)
          select 'many-' || g from generate_series(1, 20) g returning id`;
        for (const row of many) {
          await stack.sql`update public.usuarios
            set presence_state = 'online',
                ultimo_acceso = date_trunc('milliseconds', now())
            where id = ${row.id}`;
        }
        const [{ snap }] = await stack.sql`
          select pg_current_snapshot()::text as snap`;
        await invoke(busy.client, "presence-ping");
        // What a poll from that snapshot reads of the change log: the one
        // ping after it (the open transaction's row is not visible yet),
        // not every change since the open transaction began, which a range
        // from the snapshot's xmin would.
        const [{ ours, fromXmin }] = await stack.sql`
          select
            (select count(*)::int from presence.changes c
             where c.txid >= pg_snapshot_xmax(${snap}::pg_snapshot)
                or c.txid = any(array(select pg_snapshot_xip(${snap}::pg_snapshot))))
              as ours,
            (select count(*)::int from presence.changes c
             where c.txid >= pg_snapshot_xmin(${snap}::pg_snapshot))
              as "fromXmin"`;
        assert.equal(ours, 1);
        assert.ok(fromXmin >= 21, String(fromXmin));
        let map = await assertInStep(w, reader, "beside the idle transaction");
        assert.equal(map.get(busy.rowId!)?.status, "online");
        assert.notEqual(map.get(idle.rowId!)?.status, "online");
        release();
        await tx;
        map = await assertInStep(w, reader, "after it commits");
        assert.equal(map.get(idle.rowId!)?.status, "online");
      } finally {
        release();
        await tx.catch(() => {});
        await other.end();
        w.stop();
      }
    },
  );
}

/** Runs `late` in a transaction that started before `meanwhile` ran and committed. */
async function startedEarlier<T>(
  meanwhile: () => Promise<unknown>,
  late: (tx: postgres.TransactionSql) => Promise<T>,
): Promise<T> {
  const other = postgres(stack.dbUrl, { max: 1, onnotice: () => {} });
  try {
    return await other.begin(async (tx) => {
      await tx`select now()`;
      await new Promise((r) => setTimeout(r, 30));
      await meanwhile();
      return await late(tx);
    }) as T;
  } finally {
    await other.end();
  }
}

if (onPostgres) {
  const recordPing = (
    tx: postgres.TransactionSql,
    u: { id: string; email: string },
    state: string,
  ) =>
    tx`select id, ultimo_acceso, presence_state
       from presence.record_ping(${u.id}::uuid, null, ${u.email}, ${state},
                                 '{}'::text[], 0)`;

  e2eTest(
    "record_ping: ultimo_acceso never moves backwards when an earlier ping commits later",
    async () => {
      const u = await member("mono");
      let newer = "";
      const [late] = await startedEarlier(async () => {
        const ping = await invoke(u.client, "presence-ping");
        newer = ping.body.user.ultimo_acceso;
      }, (tx) => recordPing(tx, u, "online"));
      assert.equal((late.ultimo_acceso as Date).toISOString(), newer);
      const [row] = await stack.sql`select ultimo_acceso from public.usuarios
                                    where id = ${u.rowId!}`;
      assert.equal((row.ultimo_acceso as Date).toISOString(), newer);
    },
  );

  e2eTest(
    "record_ping: an older offline never overwrites a newer online, and is answered as stored",
    async () => {
      const u = await member("order");
      let newer = "";
      const [late] = await startedEarlier(async () => {
        const ping = await invoke(u.client, "presence-ping");
        newer = ping.body.user.ultimo_acceso;
      }, (tx) => recordPing(tx, u, "offline"));
      assert.deepEqual(
        [late.presence_state, (late.ultimo_acceso as Date).toISOString()],
        ["online", newer],
      );
      const [row] = await stack.sql`select presence_state from public.usuarios
                                    where id = ${u.rowId!}`;
      assert.equal(row.presence_state, "online");
      // A newer offline still lands.
      const off = await invoke(u.client, "presence-ping", {
        body: { state: "offline" },
      });
      assert.equal(off.body.user.presence_state, "offline");
    },
  );
}

e2eTest(
  "presence: an ultimo_acceso a Date cannot hold (infinity, -infinity, a BC date: legacy sentinels, or the app's own write) is answered null; full reads and the changes since a cursor go on",
  async () => {
    const reader = await member("reader");
    const w = await watcher(reader);
    const ids: number[] = [];
    try {
      for (
        const [value, state] of [
          ["-infinity", "offline"],
          ["infinity", "offline"],
          ["0044-03-15 00:00:00+00 BC", "online"],
        ]
      ) {
        // Written by the app after the watcher's first read: the next poll
        // lists it.
        const [row] = await stack.sql`
          insert into public.usuarios (nombre_usuario, presence_state, ultimo_acceso)
          values (${`odd-${value}`}, ${state}, ${value}::text::timestamptz)
          returning id`;
        ids.push(Number(row.id));
        const map = await assertInStep(w, reader, `after ${value}`);
        const user = map.get(Number(row.id));
        assert.equal(user?.ultimo_acceso, null, value);
        assert.equal(user?.status, "offline", value);
      }
      // The app moves one of them to a real time: listed with it.
      await stack.sql`update public.usuarios set ultimo_acceso = now(),
                        presence_state = 'online' where id = ${ids[0]}`;
      const map = await assertInStep(w, reader, "after a real time");
      assert.equal(map.get(ids[0])?.status, "online");
    } finally {
      w.stop();
      await stack.sql`delete from public.usuarios where id = any(${ids})`;
    }
  },
);

e2eTest(
  "presence: a time before 1901 (a legacy sentinel such as 1900-01-01) is answered as the same instant in a database outside UTC as in a UTC one; the zones' offsets then were in seconds (local mean time), which postgres.js cannot read",
  async () => {
    const reader = await member("reader");
    const [{ db }] = await stack.sql`select current_database() as db`;
    const [row] = await stack.sql`
      insert into public.usuarios (nombre_usuario, presence_state, ultimo_acceso)
      values ('sentinel-1900', 'offline', '1900-01-01 00:00:00.123456+00')
      returning id`;
    try {
      for (
        const zone of [
          "UTC",
          "Europe/Madrid",
          "America/Mexico_City",
          "Asia/Kolkata",
        ]
      ) {
        await stack.sql.unsafe(
          `alter database "${db}" set timezone to '${zone}'`,
        );
        await stack.sql.unsafe(`set timezone to '${zone}'`);
        await stack.reopenFunctionPools();
        const w = await watcher(reader);
        try {
          assert.deepEqual(
            w.map.get(Number(row.id))?.ultimo_acceso,
            "1900-01-01T00:00:00.123Z",
            zone,
          );
        } finally {
          w.stop();
        }
      }
    } finally {
      await stack.sql`delete from public.usuarios where id = ${row.id}`;
    }
  },
);

for (const zone of ["Europe/Madrid", "America/Mexico_City"]) {
  e2eTest(
    `presence: a naive timestamp column under ${zone}: status and deltas by UTC`,
    async () => {
      const reader = await member("reader");
      const pinger = await member("pinger");
      const gone = await member("gone");
      const [{ data_type }] = await stack.sql`
        select data_type from information_schema.columns
        where table_schema = 'public' and table_name = 'usuarios'
          and column_name = 'ultimo_acceso'`;
      if (data_type !== "timestamp without time zone") {
        await stack.sql`alter table public.usuarios
          alter column ultimo_acceso type timestamp without time zone
          using ultimo_acceso at time zone 'UTC'`;
      }
      const [{ db }] = await stack.sql`select current_database() as db`;
      await stack.sql.unsafe(
        `alter database "${db}" set timezone to '${zone}'`,
      );
      // PGlite is one session shared by every connection; PostgreSQL
      // sessions take the database's setting when they open.
      await stack.sql.unsafe(`set timezone to '${zone}'`);
      await stack.reopenFunctionPools();
      // Gone an hour ago, stored online: offline in any zone.
      await stack.sql`update public.usuarios
        set presence_state = 'online',
            ultimo_acceso = (now() - interval '1 hour') at time zone 'UTC'
        where id = ${gone.rowId!}`;
      const w = await watcher(reader);
      try {
        assert.equal(w.map.get(gone.rowId!)?.status, "offline");
        const ping = await invoke(pinger.client, "presence-ping");
        assert.equal(ping.status, 200);
        const map = await assertInStep(w, reader, `after a ping in ${zone}`);
        assert.deepEqual(
          [
            map.get(pinger.rowId!)?.status,
            map.get(pinger.rowId!)?.ultimo_acceso,
          ],
          ["online", ping.body.user.ultimo_acceso],
        );
        assert.ok(
          Math.abs(Date.parse(ping.body.user.ultimo_acceso) - Date.now()) <
            60_000,
          "stored as UTC",
        );
        assert.equal(map.get(gone.rowId!)?.status, "offline");
        // A legacy sentinel before 1901 (local mean time in the zone).
        await stack.sql`update public.usuarios
          set ultimo_acceso = '1900-01-01 00:00:00', presence_state = 'offline'
          where id = ${gone.rowId!}`;
        assert.equal(
          (await assertInStep(w, reader, "after a sentinel")).get(gone.rowId!)
            ?.ultimo_acceso,
          "1900-01-01T00:00:00.000Z",
        );
        await stack.sql`update public.usuarios
          set ultimo_acceso = (now() - interval '1 hour') at time zone 'UTC',
              presence_state = 'online'
          where id = ${gone.rowId!}`;
        await assertInStep(w, reader, "after the sentinel went");
        // A move made by the clock alone: 298 s old, then over 300 s: away.
        await stack.sql`update public.usuarios
          set ultimo_acceso = (now() - interval '298 seconds') at time zone 'UTC'
          where id = ${gone.rowId!}`;
        assert.equal((await w.poll()).get(gone.rowId!)?.status, "online");
        await new Promise((r) => setTimeout(r, 2500));
        const later = await assertInStep(w, reader, "after the clock moved");
        assert.equal(later.get(gone.rowId!)?.status, "away");
      } finally {
        w.stop();
      }
    },
  );
}

closeStackAfterAll("presence writers", stack);
