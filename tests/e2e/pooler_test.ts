/**
 * The functions through a real transaction pooler, as hosted projects run
 * them with `PRESENCE_DB_URL` on Supavisor's port 6543: Debian's PgBouncer
 * in `pool_mode = transaction` with two server connections, shared by
 * every request of several served function sets (two connections each,
 * the default `DB_POOL_MAX`), so that one request's transactions run on
 * server connections another request used just before. Auth keeps its
 * direct connection, as hosted Auth is not behind the project's pooler.
 *
 * Pings (fast path and through Auth, many users and one user's two tabs at
 * once), presence reads (pages, and changes since a cursor taken on one
 * server connection and used on another), auth-sync's links and updates
 * (leases, intents, transactions) and a statement cancelled for its time
 * all give their real answers and rows; the functions' pool never writes a
 * statement behind another (a connection ending, a statement postgres.js
 * refuses while building it); then every server connection the
 * pooler holds is found with the server's defaults: no session setting, no
 * advisory lock, no prepared statement, no temporary table left behind.
 *
 * PostgreSQL only: PGlite serves one session and no pooler can stand in
 * front of it.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { bounded, Pools } from "../../supabase/functions/_shared/db.ts";
import { ONE_FLIGHT } from "../../supabase/functions/_shared/db_function.ts";
import { Gate } from "../../supabase/functions/_shared/gate.ts";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { call, type Invoked } from "../support/invoke.ts";
import { startPgBouncer } from "../support/pgbouncer.ts";
import { poolWithSockets } from "../support/postgres.ts";
import {
  servedBehindCountingProxy,
  startTestStack,
  type TestUser,
} from "../support/stack.ts";

if (Deno.env.get("TEST_DATABASE_URL")) {
  const POOL_SIZE = 2;
  const stack = await startTestStack();
  const bouncer = await startPgBouncer(stack.dbUrl, { poolSize: POOL_SIZE })
    .catch(async (error) => {
      await stack.close();
      throw error;
    });
  const pooledUrl = bouncer.pooled(stack.dbUrl);
  // The functions' default pool (two client connections per function
  // set, `DB_POOL_MAX`), as deployed: the auth-sync test below sends more
  // requests at once than that, so they queue in the function set's pool
  // and then in the pooler.
  const POOLED = { PRESENCE_DB_URL: pooledUrl, DB_POOL_MAX: "2" };
  const fast = await servedBehindCountingProxy(stack, POOLED);
  const viaAuth = await servedBehindCountingProxy(stack, {
    ...POOLED,
    PRESENCE_VERIFY: "auth",
  });
  // A statement bound a third of the default, so the timeout tests are
  // short; the other pings go through `fast`, with the default.
  const hasty = await stack.withFunctionEnv({
    ...POOLED,
    DB_STATEMENT_TIMEOUT_MS: "1000",
  });

  const unique = (p: string) => `${p}-${crypto.randomUUID().slice(0, 8)}`;

  const post = (
    apiUrl: string,
    name: string,
    token: string,
    body: unknown,
  ): Promise<Invoked> =>
    call(apiUrl, name, {
      headers: {
        Authorization: `Bearer ${token}`,
        "Content-Type": "application/json",
      },
      body: JSON.stringify(body),
      // A request stuck on a wedged pooler connection fails its test
      // instead of holding the run.
      signal: AbortSignal.timeout(30_000),
    });

  const member = (row: Record<string, unknown> = {}) =>
    stack.createUser({
      row: { auth_user_id: true, nombre_usuario: unique("p"), ...row },
    });

  /** Another signed-in session of `u`: a second tab. */
  const secondTab = async (u: TestUser): Promise<string> => {
    const { data, error } = await stack.anon().auth.signInWithPassword({
      email: u.email,
      password: u.password,
    });
    if (error) throw error;
    return data.session.access_token;
  };

  const stored = async (id: number) => {
    const [r] = await stack.sql`
      select presence_state, ultimo_acceso, nombre_usuario, correo,
             auth_user_id::text
      from public.usuarios where id = ${id}`;
    return {
      state: r.presence_state as string,
      at: (r.ultimo_acceso as Date | null)?.toISOString() ?? null,
      name: r.nombre_usuario as string | null,
      correo: r.correo as string | null,
      auth: r.auth_user_id as string | null,
    };
  };

  /** Pings `states` in order as `token`; every answer 200 for `rowId`. */
  const pingInTurn = async (
    apiUrl: string,
    token: string,
    rowId: number,
    states: string[],
  ): Promise<Invoked[]> => {
    const out = [];
    for (const state of states) {
      const res = await post(apiUrl, "presence-ping", token, { state });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.equal(res.body.user.id, rowId);
      assert.equal(res.body.user.presence_state, state);
      out.push(res);
    }
    return out;
  };

  e2eTest(
    "pooler: presence-ping online and offline, on the fast path and through Auth, many users and one user's two tabs at once, lands every ping",
    async () => {
      const users = await Promise.all([1, 2, 3, 4, 5, 6].map(() => member()));
      const twoTabs = await member();
      const tabB = await secondTab(twoTabs);
      const states = ["online", "offline", "online", "offline", "online"];
      fast.calls.clear();
      viaAuth.calls.clear();
      const [runs, tabs] = await Promise.all([
        Promise.all(users.map((u, i) =>
          pingInTurn(
            (i % 2 ? viaAuth : fast).served.apiUrl,
            u.token,
            u.rowId!,
            states,
          )
        )),
        Promise.all([
          [twoTabs.token, fast, "online"],
          [tabB, viaAuth, "offline"],
          [twoTabs.token, viaAuth, "offline"],
          [tabB, fast, "online"],
        ].map(([token, served, state]) =>
          post(
            (served as typeof fast).served.apiUrl,
            "presence-ping",
            token as string,
            { state },
          )
        )),
      ]);
      for (const [i, u] of users.entries()) {
        const last = runs[i].at(-1)!.body.user;
        assert.deepEqual(
          await stored(u.rowId!).then(({ state, at }) => ({ state, at })),
          { state: last.presence_state, at: last.ultimo_acceso },
        );
      }
      // The two tabs' pings landed in some order; the row is the answer of
      // the one stored last, which carries the latest time.
      for (const res of tabs) {
        assert.equal(res.status, 200, JSON.stringify(res.body));
        assert.equal(res.body.user.id, twoTabs.rowId);
      }
      const latest = tabs.map((r) => r.body.user).sort((a, b) =>
        a.ultimo_acceso.localeCompare(b.ultimo_acceso)
      ).at(-1);
      const row = await stored(twoTabs.rowId!);
      assert.equal(row.at, latest.ultimo_acceso);
      assert.ok(
        tabs.some((r) =>
          r.body.user.ultimo_acceso === row.at &&
          r.body.user.presence_state === row.state
        ),
        `the row ${JSON.stringify(row)} is one of the answers`,
      );
      // The requests' client connections shared the pooler's two.
      assert.ok(await bouncer.clients() > POOL_SIZE);
      // The fast path checked its tokens itself; the other asked Auth.
      assert.equal(fast.calls.get("/auth/v1/user") ?? 0, 0);
      assert.ok((viaAuth.calls.get("/auth/v1/user") ?? 0) >= 3 * 5);
    },
  );

  /** Every page of one read as `token`, and the first page's cursor. */
  const readAll = async (token: string, body: Record<string, unknown>) => {
    const items: { id: number; presence_state: string }[] = [];
    let cursor = "";
    let after: number | null = 0;
    let pages = 0;
    while (after !== null) {
      const res = await post(fast.served.apiUrl, "presence", token, {
        ...body,
        after_id: after,
        limit: 2,
      });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.equal(res.body.resync, false);
      cursor ||= res.body.cursor;
      items.push(...res.body.users);
      after = res.body.next_after_id;
      pages++;
    }
    return { items, cursor, pages };
  };

  e2eTest(
    "pooler: presence reads every page, several readers at once, and a cursor taken on one server connection gives exactly the changes since on another",
    async () => {
      const users = await Promise.all([1, 2, 3, 4, 5].map(() => member()));
      await Promise.all(
        users.map((u) =>
          post(fast.served.apiUrl, "presence-ping", u.token, {
            state: "online",
          })
        ),
      );
      const table = await stack.sql`
        select id, presence_state from public.usuarios order by id`;
      const reads = await Promise.all(
        users.map((u) => readAll(u.token, {})),
      );
      for (const read of reads) {
        assert.deepEqual(
          read.items.map((i) => ({ id: i.id, state: i.presence_state })),
          table.map((r) => ({ id: Number(r.id), state: r.presence_state })),
        );
        assert.ok(read.pages >= 3);
      }
      const { cursor } = reads[0];
      // The server connections the cursor's read may have used are closed:
      // what follows runs on new ones.
      const before = new Set((await bouncer.servers()).map((s) => s.pid));
      await bouncer.reconnect();
      const moved = [users[1], users[3]].sort((a, b) => a.rowId! - b.rowId!);
      for (const u of moved) {
        const res = await post(fast.served.apiUrl, "presence-ping", u.token, {
          state: "offline",
        });
        assert.equal(res.status, 200, JSON.stringify(res.body));
      }
      const delta = await readAll(users[0].token, { cursor });
      assert.deepEqual(
        delta.items.map((i) => [i.id, i.presence_state]),
        moved.map((u) => [u.rowId, "offline"]),
      );
      const now = (await bouncer.servers()).map((s) => s.pid);
      assert.ok(now.length > 0);
      assert.deepEqual(now.filter((pid) => before.has(pid)), []);
      // Nothing changed since the delta's own cursor.
      const none = await readAll(users[2].token, { cursor: delta.cursor });
      assert.deepEqual(none.items, []);
    },
  );

  e2eTest(
    "pooler: auth-sync links rows and changes an email, a password and usernames, several at once and one row twice, with every lease released and every intent settled",
    async () => {
      const admin = await member({ rol: "admin" });
      // Rows to link: their correo is a confirmed account's email, vouched
      // for by the operator.
      const toLink = await Promise.all([1, 2, 3].map(() => {
        const email = `${unique("link")}@test.local`;
        return stack.createUser({
          email,
          adminVerified: true,
          row: { correo: email },
        });
      }));
      const [byEmail, byPassword, byName, twice] = await Promise.all(
        [1, 2, 3, 4].map(() => {
          const email = `${unique("upd")}@test.local`;
          return stack.createUser({
            email,
            row: { auth_user_id: true, correo: email },
          });
        }),
      );
      const newEmail = `${unique("moved")}@test.local`;
      const newPassword = `pw-${crypto.randomUUID()}`;
      const newName = unique("name");
      const names = [unique("first"), unique("second")];
      const sync = (body: unknown) =>
        post(fast.served.apiUrl, "auth-sync", admin.token, body);
      const update = (body: Record<string, unknown>) =>
        sync({ action: "update", ...body });
      const [linked, email, password, name, ...both] = await Promise.all([
        sync({ action: "sync", ids: toLink.map((u) => u.rowId) }),
        update({ id: byEmail.rowId, email: newEmail }),
        update({ id: byPassword.rowId, password: newPassword }),
        update({ id: byName.rowId, nombre_usuario: newName }),
        ...names.map((n) => update({ id: twice.rowId, nombre_usuario: n })),
      ]);
      assert.equal(linked.status, 200, JSON.stringify(linked.body));
      toLink.sort((a, b) => a.rowId! - b.rowId!);
      assert.deepEqual(
        [...linked.body.results].sort((a, b) => a.id - b.id),
        toLink.map((u) => ({
          id: u.rowId,
          status: "linked",
          auth_user_id: u.id,
        })),
      );
      for (const u of toLink) assert.equal((await stored(u.rowId!)).auth, u.id);

      assert.equal(email.status, 200, JSON.stringify(email.body));
      assert.deepEqual(email.body.changed, ["email"]);
      assert.equal((await stored(byEmail.rowId!)).correo, newEmail);
      const account = await stack.admin().auth.admin.getUserById(byEmail.id);
      assert.equal(account.data.user?.email, newEmail);

      assert.equal(password.status, 200, JSON.stringify(password.body));
      assert.deepEqual(password.body.changed, ["password"]);
      const signIn = await stack.anon().auth.signInWithPassword({
        email: byPassword.email,
        password: newPassword,
      });
      assert.equal(signIn.error, null);

      assert.equal(name.status, 200, JSON.stringify(name.body));
      assert.equal(name.body.user.nombre_usuario, newName);
      assert.equal((await stored(byName.rowId!)).name, newName);

      // One row updated twice at once: the lease lets one in at a time, so
      // both land, and the row holds the one that landed last.
      for (const res of both) {
        assert.equal(res.status, 200, JSON.stringify(res.body));
      }
      assert.ok(names.includes((await stored(twice.rowId!)).name!));

      const targets = [byEmail, byPassword, byName, twice].map((u) => u.rowId);
      const [{ leases }] = await stack.sql`
        select count(*)::int as leases from public.auth_sync_leases`;
      assert.equal(leases, 0);
      const intents = await stack.sql`
        select target_id, outcome from public.auth_sync_intents
        where target_id = any(${targets}::bigint[]) order by target_id`;
      const byTarget = (a: unknown[], b: unknown[]) =>
        Number(a[0]) - Number(b[0]);
      assert.deepEqual(
        intents.map((i) => [Number(i.target_id), i.outcome]),
        [[byEmail.rowId, "applied"], [byPassword.rowId, "applied"]].sort(
          byTarget,
        ),
      );
      const audit = await stack.sql`
        select target_id, outcome from public.auth_sync_audit
        where target_id = any(${targets}::bigint[]) order by target_id, id`;
      assert.deepEqual(
        audit.map((a) => [Number(a.target_id), a.outcome]),
        [
          [byEmail.rowId, "ok"],
          [byPassword.rowId, "ok"],
          [byName.rowId, "ok"],
          [twice.rowId, "ok"],
          [twice.rowId, "ok"],
        ].sort(byTarget),
      );
    },
  );

  e2eTest(
    "pooler: a ping still running after DB_STATEMENT_TIMEOUT_MS is cancelled on its server connection (503 db_timeout) while other pings land",
    async () => {
      const slow = await member({ nombre_usuario: unique("slow") });
      const others = await Promise.all([1, 2, 3].map(() => member()));
      // A trigger that holds the slow user's update for 30 s: only a cancel
      // that reaches the server connection running it ends it sooner.
      await stack.sql.unsafe(`
        create function public.test_pooler_slow() returns trigger
        language plpgsql as $$
        begin
          if new.nombre_usuario like 'slow-%' then
            perform pg_sleep(30);
          end if;
          return new;
        end $$;
        create trigger test_pooler_slow before update on public.usuarios
          for each row execute function public.test_pooler_slow();
      `);
      try {
        const [late, ...onTime] = await Promise.all([
          post(hasty.apiUrl, "presence-ping", slow.token, {}),
          ...others.map((u) =>
            post(fast.served.apiUrl, "presence-ping", u.token, {
              state: "offline",
            })
          ),
        ]);
        assert.equal(late.status, 503, JSON.stringify(late.body));
        assert.equal(late.body.code, "db_timeout");
        assert.equal(late.headers.get("retry-after"), "1");
        assert.equal(late.body.error, "statement timeout (SQLSTATE 57014)");
        for (const [i, res] of onTime.entries()) {
          assert.equal(res.status, 200, JSON.stringify(res.body));
          assert.equal(res.body.user.id, others[i].rowId);
          assert.equal(res.body.user.presence_state, "offline");
          assert.deepEqual(
            await stored(others[i].rowId!).then((r) => r.at),
            res.body.user.ultimo_acceso,
          );
        }
        // The server stopped the statement: no sleep left running.
        const until = Date.now() + 5_000;
        for (;;) {
          const [{ n }] = await stack.sql`
            select count(*)::int as n from pg_stat_activity
            where datname = current_database() and state = 'active'
              and query like '%record_ping%' and pid <> pg_backend_pid()`;
          if (n === 0) break;
          assert.ok(Date.now() < until, "the cancelled ping still runs");
          await new Promise((r) => setTimeout(r, 100));
        }
        assert.equal((await stored(slow.rowId!)).at, null);
      } finally {
        await stack.sql.unsafe(`
          drop trigger test_pooler_slow on public.usuarios;
          drop function public.test_pooler_slow();
        `);
      }
      // The pool serves the same user again once the statement is fast.
      const again = await post(hasty.apiUrl, "presence-ping", slow.token, {});
      assert.equal(again.status, 200, JSON.stringify(again.body));
    },
  );

  e2eTest(
    "pooler: a ping queued in the pooler while every server connection is busy is answered 503 db_timeout once its cancel goes unanswered, and the pool serves again",
    async () => {
      const u = await member();
      // Every server connection held by a transaction of another client of
      // the pooler: the ping's statement waits in PgBouncer's queue, where
      // a cancel request is dropped (only a statement on a server
      // connection can be cancelled).
      const hog = postgres(pooledUrl, {
        max: POOL_SIZE,
        prepare: false,
        onnotice: () => {},
      });
      try {
        let arrived = 0;
        let release = () => {};
        const all = new Promise<void>((r) => release = r);
        let free = () => {};
        const freed = new Promise<void>((r) => free = r);
        const holding = Promise.all(
          Array.from({ length: POOL_SIZE }, () =>
            hog.begin(async (tx) => {
              await tx`select 1`;
              if (++arrived === POOL_SIZE) release();
              await freed;
            })),
        );
        await all;
        const res = await post(hasty.apiUrl, "presence-ping", u.token, {
          state: "offline",
        });
        assert.equal(res.status, 503, JSON.stringify(res.body));
        assert.equal(res.body.code, "db_timeout");
        assert.equal(res.body.error, "statement timeout (SQLSTATE 57014)");
        assert.equal((await stored(u.rowId!)).at, null);
        free();
        await holding;
      } finally {
        await hog.end();
      }
      // Once a server connection is free the queued statement runs after
      // all: the ping lands late, as the client's retry would have
      // (docs/reliability.md, "Database timeouts").
      const until = Date.now() + 5_000;
      while ((await stored(u.rowId!)).at === null) {
        assert.ok(Date.now() < until, "the queued ping never ran");
        await new Promise((r) => setTimeout(r, 50));
      }
      assert.equal((await stored(u.rowId!)).state, "offline");
      const again = await post(hasty.apiUrl, "presence-ping", u.token, {});
      assert.equal(again.status, 200, JSON.stringify(again.body));
      assert.equal(again.body.user.presence_state, "online");
      assert.equal((await stored(u.rowId!)).state, "online");
    },
  );

  e2eTest(
    "pooler: a statement with parameters sent while another runs (a ping's call, or a statement without parameters) is answered: the functions' pool never writes it behind another, which a pooler that releases at the first ReadyForQuery would answer to nobody",
    async () => {
      // postgres.js (prepare: false) sends a statement with parameters as
      // Parse/Describe/Flush first (no Sync) and, with every connection
      // busy, writes it behind the one running. PgBouncer 1.18 hands the
      // server connection back at the first statement's ReadyForQuery and
      // drops the Describe's answer when it comes later: the second
      // statement waits for ever. Later, here: its Parse waits for a lock
      // another session holds for 300 ms.
      const table = unique("pooler_probe").replaceAll("-", "_");
      await stack.sql.unsafe(`create table public.${table} (n int)`);
      const second = async (
        sql: postgres.Sql,
        first: (sql: postgres.Sql) => Promise<unknown>,
      ) => {
        await first(sql); // an open connection
        let locked = () => {};
        const isLocked = new Promise<void>((r) => locked = r);
        const holding = stack.sql.begin(async (tx) => {
          await tx.unsafe(
            `lock table public.${table} in access exclusive mode`,
          );
          locked();
          await new Promise((r) => setTimeout(r, 300));
        });
        await isLocked;
        const answer = answered(
          Promise.all([
            first(sql),
            sql`select count(*)::int as n from ${sql(table)} where n = ${2}`,
          ]).then(([, [{ n }]]) => n),
        );
        await holding;
        return await answer;
      };
      // As the ping sends its call: one flight, no parameters.
      const ping = (sql: postgres.Sql) =>
        sql.unsafe("select 1 as one", [], ONE_FLIGHT).then((r) => r);
      const plain = (sql: postgres.Sql) => sql`select 1 as one`.then((r) => r);
      const answered = (work: Promise<unknown>) =>
        Promise.race([
          work,
          new Promise((r) => setTimeout(() => r("no answer in 5 s"), 5_000)),
        ]);
      // The hazard is real here: the bare client, one connection.
      const bare = postgres(pooledUrl, {
        max: 1,
        prepare: false,
        onnotice: () => {},
      });
      const pools = new Pools();
      try {
        assert.equal(
          await second(bare, ping),
          "no answer in 5 s",
          "this pooler answers a pipelined Describe: the test no longer shows the hazard it guards against",
        );
        // The functions' pool, one connection: every statement answered.
        const sql = pools.database({
          dbUrl: pooledUrl,
          dbPoolMax: 1,
          dbStatementTimeoutMs: 5_000,
        });
        assert.equal(await second(sql, ping), 0);
        assert.equal(await second(sql, plain), 0);
        // Pings, statements and transactions of several requests at once.
        const mix = await answered(
          Promise.all([
            sql`select pg_sleep(0.1)`,
            sql.unsafe("select 2 as n", [], ONE_FLIGHT),
            sql.begin((tx) => tx`select ${3}::int as n`),
            sql`select 4 as n`,
            sql.unsafe("select 5 as n", [], ONE_FLIGHT),
            sql`select ${6}::int as n`,
            sql.begin(async (tx) => [...await tx`select 7 as n`]),
          ]).then(([, ...rows]) => rows.map(([{ n }]) => n)),
        );
        assert.deepEqual(mix, [2, 3, 4, 5, 6, 7]);
      } finally {
        await bare.end({ timeout: 0 });
        await pools.close();
        await stack.sql.unsafe(`drop table public.${table}`);
      }
    },
  );

  e2eTest(
    "pooler: a connection postgres.js ends for its age while busy, not yet closed, takes nothing behind another statement: a statement with parameters waits for a connection of its own",
    async () => {
      // Between its end and its socket's close a connection is neither
      // open nor closed, and postgres.js writes the next statement behind
      // one running on a busy connection, unless none is busy: with the
      // pool's gate each statement marks its connection full while it runs
      // (QueryBounds.gate). Its own postgres.js pool here, with a lifetime
      // of 2 s.
      const table = unique("pooler_age").replaceAll("-", "_");
      await stack.sql.unsafe(`create table public.${table} (n int)`);
      const statements = postgres(pooledUrl, {
        max: 2,
        prepare: false,
        max_lifetime: 2,
        onnotice: () => {},
      });
      const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
      try {
        const sql = bounded(statements, {
          timeoutMs: 8_000,
          gate: new Gate(2),
        });
        await sql`select 1`; // c1: its lifetime runs from now
        await sleep(1_000);
        // c2 opens; c1, free first, is taken first.
        await Promise.all([sql`select 1`, sql`select 2`]);
        const s1 = sql`select pg_sleep(1.2)`.then((r) => r); // c1 ends meanwhile
        const s2 = sql`select pg_sleep(1.6)`.then((r) => r); // c2, running then
        // Its Parse waits for a lock held from 1.5 s to 1.9 s: its answer
        // comes after c2's ReadyForQuery.
        const lock = sleep(1_500).then(() =>
          stack.sql.begin(async (tx) => {
            await tx.unsafe(
              `lock table public.${table} in access exclusive mode`,
            );
            await sleep(400);
          })
        );
        const counted = Promise.race([
          sql`select count(*)::int as n from ${sql(table)} where n = ${1}`
            .then(([{ n }]) => n),
          sleep(6_000).then(() => "no answer in 6 s"),
        ]);
        const [, , n] = await Promise.all([s1, s2, counted, lock]);
        assert.equal(n, 0);
      } finally {
        await statements.end({ timeout: 0 });
        await stack.sql.unsafe(`drop table public.${table}`);
      }
    },
  );

  e2eTest(
    "pooler: a statement postgres.js refuses while building it (too many parameters) keeps its connection until that connection's ReadyForQuery: the next statement with parameters is not written behind the Sync still under way",
    async () => {
      const pools = new Pools();
      try {
        const sql = pools.database({
          dbUrl: pooledUrl,
          dbPoolMax: 1,
          dbStatementTimeoutMs: 3_000,
        });
        await sql`select 1`; // the pool's only connection, open
        // postgres.js throws writing it, rejects it, writes a Sync and
        // counts the connection busy until that Sync's ReadyForQuery.
        const refused = sql.unsafe("select 1", Array(65_534).fill(1))
          .then(() => "answered", (e) => e.code);
        const next = Promise.race([
          sql<{ n: number }[]>`select ${2}::int as n`.then(([{ n }]) => n),
          new Promise((r) => setTimeout(() => r("no answer in 6 s"), 6_000)),
        ]);
        assert.deepEqual(await Promise.all([refused, next]), [
          "MAX_PARAMETERS_EXCEEDED",
          2,
        ]);
      } finally {
        await pools.close();
      }
    },
  );

  // Through a gate of two in front of a postgres.js pool of two
  // connections whose first is ended by postgres.js for its age (2 s) and
  // closes 1.5 s later (the gap between its end and its socket's close,
  // when it is neither open nor closed, widened): `refuse` on the second
  // connection, a statement postgres.js would refuse while building it,
  // then (in the same turn, or once `refuse` has failed) a statement with
  // parameters whose Parse waits for a lock until after the refused
  // statement's ReadyForQuery. Gives what each answered.
  const behindARefusal = async (
    refuse: (sql: postgres.Sql) => Promise<unknown>,
    { sameTurn }: { sameTurn: boolean },
  ) => {
    const table = unique("pooler_refusal").replaceAll("-", "_");
    await stack.sql.unsafe(`create table public.${table} (n int)`);
    const { sql: statements } = poolWithSockets(
      pooledUrl,
      { max: 2, max_lifetime: 2 },
      (socket) => {
        const end = socket.end.bind(socket);
        socket.end = ((...args: []) => {
          setTimeout(() => end(...args), 1_500);
          return socket;
        }) as typeof socket.end;
      },
    );
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
    try {
      const sql = bounded(statements, { timeoutMs: 8_000, gate: new Gate(2) });
      const t0 = Date.now();
      await sql`select 1`; // c1: its lifetime runs from now
      await sleep(1_000);
      await Promise.all([sql`select 1`, sql`select 2`]); // c2 opens
      // Another session locks the table from 2.1 s to 2.7 s.
      const lock = sleep(2_100 - (Date.now() - t0)).then(() =>
        stack.sql.begin(async (tx) => {
          await tx.unsafe(
            `lock table public.${table} in access exclusive mode`,
          );
          await sleep(600);
        })
      );
      await sleep(2_250 - (Date.now() - t0)); // c1 ended at 2 s, not closed
      const refused = refuse(sql).then(() => "answered", (e) => e.code);
      if (!sameTurn) await refused;
      const counted = Promise.race([
        sql`select count(*)::int as n from ${sql(table)} where n = ${1}`
          .then(([{ n }]) => n),
        sleep(6_000).then(() => "no answer in 6 s"),
      ]);
      const [r, n] = await Promise.all([refused, counted, lock]);
      return { refused: r, counted: n };
    } finally {
      await statements.end({ timeout: 0 });
      await stack.sql.unsafe(`drop table public.${table}`);
    }
  };

  e2eTest(
    "pooler: a statement with an undefined value, sent in the same turn as another while a connection is ending, is refused before it reaches postgres.js, which would leave its connection open to the next statement behind its Sync",
    async () => {
      assert.deepEqual(
        await behindARefusal(
          (sql) => sql`select ${undefined as unknown as number} as x`,
          { sameTurn: true },
        ),
        { refused: "UNDEFINED_VALUE", counted: 0 },
      );
    },
  );

  e2eTest(
    "pooler: after a statement postgres.js refused while building it, no other starts until that connection's ReadyForQuery, though a connection is ending and the gate has a free place",
    async () => {
      assert.deepEqual(
        await behindARefusal(
          (sql) => sql.unsafe("select 1", Array(65_534).fill(1)),
          { sameTurn: false },
        ),
        { refused: "MAX_PARAMETERS_EXCEEDED", counted: 0 },
      );
    },
  );

  e2eTest(
    "pooler: after every run, each server connection the pooler holds has the server's defaults: no session setting, advisory lock, prepared statement or temporary table left",
    async () => {
      const state = (sql: postgres.TransactionSql | postgres.Sql) =>
        sql`
          select pg_backend_pid() as pid,
                 current_setting('statement_timeout') as statement_timeout,
                 current_setting('lock_timeout') as lock_timeout,
                 current_setting('search_path') as search_path,
                 current_setting('idle_in_transaction_session_timeout')
                   as idle_timeout,
                 (select count(*)::int from pg_locks
                  where locktype = 'advisory' and pid = pg_backend_pid())
                   as advisory_locks,
                 (select count(*)::int from pg_prepared_statements)
                   as prepared,
                 pg_my_temp_schema() <> 0 as temp_schema`;
      // A session that never went through the pooler: the defaults.
      const direct = postgres(stack.dbUrl, {
        max: 1,
        prepare: false,
        onnotice: () => {},
      });
      const plain = postgres(pooledUrl, {
        max: POOL_SIZE,
        prepare: false,
        onnotice: () => {},
      });
      try {
        const [defaults] = await state(direct);
        const expected = { ...defaults, pid: 0 };
        // As many transactions open at once as the pool has connections:
        // each holds its own, so together they see every one.
        let arrived = 0;
        let release = () => {};
        const all = new Promise<void>((r) => release = r);
        const seen = await Promise.all(
          Array.from({ length: POOL_SIZE }, () =>
            plain.begin(async (tx) => {
              const [row] = await state(tx);
              if (++arrived === POOL_SIZE) release();
              await all;
              return row;
            })),
        );
        for (const row of seen) {
          assert.deepEqual({ ...row, pid: 0 }, expected, `pid ${row.pid}`);
        }
        const pids = seen.map((r) => r.pid).sort();
        assert.equal(new Set(pids).size, POOL_SIZE);
        assert.deepEqual(
          (await bouncer.servers()).map((s) => s.pid).sort(),
          pids,
        );
        const [{ advisory }] = await direct`
          select count(*)::int as advisory from pg_locks
          where locktype = 'advisory'`;
        assert.equal(advisory, 0);
      } finally {
        await plain.end();
        await direct.end();
      }
    },
  );

  e2eTest("pooler: PgBouncer and the served functions stop", async () => {
    // PgBouncer first: a request still waiting on it (a test that failed)
    // then ends with its connection, and the servers can shut down.
    await bouncer.close();
    const probe = postgres(pooledUrl, { max: 1, connect_timeout: 2 });
    await assert.rejects(probe`select 1`);
    await probe.end();
    for (const { served, proxy } of [fast, viaAuth]) {
      await served.close();
      await proxy.shutdown();
    }
    await hasty.close();
  });

  closeStackAfterAll("pooler", stack);
}
