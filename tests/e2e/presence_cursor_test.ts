/**
 * presence's changes-since cursor under concurrency: pings (some of them in
 * transactions that started before a cursor was issued and commit after)
 * and polls run at once; a client view built only from the first full read
 * and the deltas must equal the table at the end, clock-made moves
 * included. Runs on PGlite and, with TEST_DATABASE_URL, on PostgreSQL,
 * where transactions really overlap.
 */
import assert from "node:assert/strict";
import {
  CHANGES_BOUND_PAGES,
  presenceStatement,
} from "../../supabase/functions/presence/query.ts";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { invoke } from "../support/invoke.ts";
import { startTestStack, type TestStack } from "../support/stack.ts";

const AWAY_S = 1;
const OFFLINE_S = 2;
const stack: TestStack = await startTestStack({
  functionEnv: {
    PRESENCE_AWAY_AFTER_S: String(AWAY_S),
    PRESENCE_OFFLINE_AFTER_S: String(OFFLINE_S),
  },
});
const onPostgres = Boolean(
  Deno.env.get("TEST_DATABASE_URL") ?? Deno.env.get("E2E_SUPABASE_URL"),
);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Item {
  id: number;
  presence_state: string;
  ultimo_acceso: string | null;
  status: string;
}

type Reader = Awaited<ReturnType<TestStack["createUser"]>>;

/** Reads every page of one request, keeping the first page's cursor. */
async function readAll(
  reader: Reader,
  body: Record<string, unknown>,
): Promise<{ items: Item[]; cursor: string; resync: boolean }> {
  const items: Item[] = [];
  let cursor = "";
  let resync = false;
  let after: number | null = 0;
  while (after !== null) {
    const res = await invoke(reader.client, "presence", {
      body: { ...body, after_id: after },
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    if (!cursor) {
      cursor = res.body.cursor;
      resync = res.body.resync;
    }
    items.push(...res.body.users);
    after = res.body.next_after_id;
  }
  return { items, cursor, resync };
}

/** The table as the view should hold it, statuses by the database clock now. */
async function table(): Promise<Map<number, Item>> {
  const rows = await stack.sql<
    {
      id: string;
      presence_state: string;
      ultimo_acceso: Date | null;
      status: string;
    }[]
  >`
    select u.id, u.presence_state, u.ultimo_acceso,
      case
        when u.presence_state = 'online'
         and u.ultimo_acceso > now() - make_interval(secs => ${AWAY_S}::int)
          then 'online'
        when u.presence_state = 'online'
         and u.ultimo_acceso > now() - make_interval(secs => ${OFFLINE_S}::int)
          then 'away'
        else 'offline' end as status
    from public.usuarios u order by u.id`;
  return new Map(rows.map((r) => [Number(r.id), {
    id: Number(r.id),
    presence_state: r.presence_state,
    ultimo_acceso: r.ultimo_acceso?.toISOString() ?? null,
    status: r.status,
  }]));
}

function keep(view: Map<number, Item>, items: Item[]) {
  for (const i of items) {
    view.set(i.id, {
      id: i.id,
      presence_state: i.presence_state,
      ultimo_acceso: i.ultimo_acceso,
      status: i.status,
    });
  }
}

e2eTest(
  "presence: a view built from deltas equals the table after concurrent pings and polls",
  async () => {
    const users = await Promise.all(
      Array.from({ length: 16 }, () =>
        stack.createUser({
          row: {
            auth_user_id: true,
            nombre_usuario: `c-${crypto.randomUUID().slice(0, 8)}`,
          },
        })),
    );
    const reader = users[0];
    const ids = users.map((u) => u.rowId!);
    const first = await readAll(reader, { limit: 7 });
    const view = new Map<number, Item>();
    keep(view, first.items);
    let cursor = first.cursor;
    const statusesSeen = new Set<string>();
    let deltas = 0, reported = 0, slowPings = 0;

    let writing = true;
    const pinger = async (seed: number) => {
      let i = seed;
      while (writing) {
        const u = users[i = (i * 7 + 3) % users.length];
        const state = i % 5 === 0 ? "offline" : "online";
        const res = await invoke(u.client, "presence-ping", {
          body: { state },
        });
        assert.equal(res.status, 200);
        await sleep(i % 30);
      }
    };
    // A ping whose transaction starts, waits, and only then writes and
    // commits: its ultimo_acceso (the transaction's start) is older than
    // cursors issued meanwhile (on PostgreSQL; PGlite runs it alone).
    const slowPinger = async () => {
      let i = 0;
      while (writing) {
        const id = ids[(i * 5 + 1) % ids.length];
        // Offline as often as not: an online row would later be reported
        // anyway when the clock moves it, which could hide a missed ping.
        const state = i++ % 2 === 0 ? "offline" : "online";
        await stack.sql.begin(async (tx) => {
          await tx`select now()`;
          await sleep(150);
          await tx`update public.usuarios
                   set ultimo_acceso = date_trunc('milliseconds', now()),
                       presence_state = ${state}
                   where id = ${id}`;
        });
        slowPings++;
      }
    };
    const poll = async () => {
      const delta = await readAll(reader, { cursor, limit: 5 });
      assert.equal(delta.resync, false);
      keep(view, delta.items);
      for (const item of delta.items) statusesSeen.add(item.status);
      cursor = delta.cursor;
      deltas++;
      reported += delta.items.length;
    };
    const poller = async () => {
      while (writing) {
        await poll();
        await sleep(40);
      }
    };
    const work = [
      pinger(1),
      pinger(2),
      pinger(3),
      slowPinger(),
      poller(),
      poller(),
    ];
    await sleep(4000);
    writing = false;
    await Promise.all(work);
    // Quiet: every user now drifts online -> away -> offline by the clock
    // alone, which only the deltas can tell the view.
    const settle = Date.now() + (OFFLINE_S + 1) * 1000;
    while (Date.now() < settle) {
      await poll();
      await sleep(200);
    }
    await poll();
    const expected = await table();
    assert.deepEqual(
      [...view.values()].sort((a, b) => a.id - b.id),
      [...expected.values()],
    );
    assert.ok(slowPings > 0 && deltas > 10 && reported > 0);
    for (const s of ["online", "away", "offline"]) {
      assert.ok(statusesSeen.has(s), `a delta reported ${s}`);
    }
  },
);

if (onPostgres) {
  // PGlite runs one transaction at a time, so there a read cannot happen
  // while a ping's transaction is open: this case exists only where
  // transactions overlap.
  e2eTest(
    "presence: a ping whose transaction started before the cursor was issued is in the next delta",
    async () => {
      const reader = await stack.createUser({
        row: { auth_user_id: true, nombre_usuario: "late-reader" },
      });
      const [late] = await stack.sql`
        insert into public.usuarios (nombre_usuario) values ('late-pinger')
        returning id`;
      let issued: { cursor: string; server_time: string } | null = null;
      await stack.sql.begin(async (tx) => {
        await tx`select now()`;
        await sleep(50);
        const res = await invoke(reader.client, "presence", {
          body: { ids: [reader.rowId] },
        });
        assert.equal(res.status, 200);
        issued = res.body;
        await tx`update public.usuarios
                 set ultimo_acceso = date_trunc('milliseconds', now()),
                     presence_state = 'online'
                 where id = ${late.id}`;
      });
      const [row] = await stack.sql`select ultimo_acceso from public.usuarios
                                    where id = ${late.id}`;
      // The trap: the committed ping is older than the answer that preceded
      // its commit, so "ultimo_acceso > last server_time" would miss it.
      assert.ok(
        (row.ultimo_acceso as Date).getTime() <
          Date.parse(issued!.server_time),
      );
      const delta = await invoke(reader.client, "presence", {
        body: { cursor: issued!.cursor },
      });
      assert.deepEqual(
        delta.body.users.map((x: Item) => [x.id, x.status, x.ultimo_acceso]),
        [[
          Number(late.id),
          "online",
          (row.ultimo_acceso as Date).toISOString(),
        ]],
      );
    },
  );
}

e2eTest(
  "presence: a changes-since read of a large table reads only the changed rows, through the change log's txid index",
  async () => {
    await stack.sql`
      insert into public.usuarios (nombre_usuario, ultimo_acceso, presence_state)
      select 'plan-' || g, now() - random() * interval '1 day',
             case when g % 3 = 0 then 'online' else 'offline' end
      from generate_series(1, 20000) g`;
    await stack.sql`analyze public.usuarios`;
    await stack.sql`analyze presence.changes`;
    const [cur] = await stack.sql<{ t: string; snap: string }[]>`
      select (extract(epoch from now()) * 1000000)::bigint::text as t,
             pg_current_snapshot()::text as snap`;
    await stack.sql`
      update public.usuarios
      set ultimo_acceso = date_trunc('milliseconds', now()),
          presence_state = 'online'
      where id in (select id from public.usuarios order by id desc limit 5)`;
    const time = BigInt(cur.t);
    const plan = (await stack.sql<{ "QUERY PLAN": string }[]>`
      explain (analyze, buffers, costs off) ${
      presenceStatement(stack.sql, {
        authUserId: true,
        lastManualLogoutAt: true,
      }, {
        afterId: 0,
        limit: 100,
        admin: false,
        awayS: 300,
        offlineS: 900,
        since: {
          time,
          snapshot: cur.snap,
          awayS: 300,
          offlineS: 900,
        },
      })
    }`).map((r) => r["QUERY PLAN"]).join("\n");
    assert.match(
      plan,
      /Index Scan using changes_txid_idx on changes c \(actual time=[\d.]+ rows=5(\.00)? /,
      plan,
    );
    assert.match(plan, /Index Cond: \(txid = ANY/, plan);
    assert.match(plan, /Bitmap Index Scan on usuarios_ultimo_acceso_idx/, plan);
    // No table is scanned; the catalogs the change-log check reads
    // (query.ts _changeLog) are a page or two here, where the planner
    // rightly reads them whole.
    assert.doesNotMatch(
      plan.replace(/Seq Scan on pg_(?:trigger|inherits) /g, ""),
      /Seq Scan/,
      plan,
    );
    // The page's five rows are five primary-key lookups, not a scan.
    assert.match(
      plan,
      /Index Scan using usuarios_pkey on usuarios u \(actual time=[\d.]+ rows=1(\.00)? loops=5\)/,
      plan,
    );
  },
);

e2eTest(
  "presence: on a large table the changes-since bound grows with the table (the square root of its rows times limit): a bulk write short of a full read's cost is followed, not answered with a resync",
  async () => {
    // A large table (the test above makes one; alone, this test does).
    await stack.sql`
      insert into public.usuarios (nombre_usuario, presence_state)
      select 'plan-' || g, 'offline'
      from generate_series(1, 20000 - (select count(*)::int
        from public.usuarios where nombre_usuario like 'plan-%')) g`;
    await stack.sql`analyze public.usuarios`;
    const [{ rows }] = await stack.sql`
      select reltuples::float8 as rows from pg_catalog.pg_class
      where oid = 'public.usuarios'::regclass`;
    assert.ok(rows >= 20_000, `${rows} rows`);
    const limit = 2;
    const bound = Math.max(
      limit * CHANGES_BOUND_PAGES,
      Math.floor(Math.sqrt(rows * limit)),
    );
    // Past the bound of pages alone: the table decides here.
    assert.ok(bound > limit * CHANGES_BOUND_PAGES, `bound ${bound}`);
    const reader = await stack.createUser({
      row: { auth_user_id: true, nombre_usuario: "bound-reader" },
    });
    const ids = (await stack.sql`
      select id from public.usuarios where nombre_usuario like 'plan-%'
      order by id limit ${bound + 1}`).map((r) => Number(r.id));
    const touch = (n: number) =>
      stack.sql`update public.usuarios set rol = 'bulk'
                where id = any(${ids.slice(0, n)}::bigint[])`;
    const first = await invoke(reader.client, "presence", {
      body: { limit },
    });
    await touch(bound);
    const within = await invoke(reader.client, "presence", {
      body: { limit, cursor: first.body.cursor },
    });
    assert.equal(within.status, 200);
    assert.equal(within.body.resync, false);
    assert.deepEqual(
      within.body.users.map((u: Item) => u.id),
      ids.slice(0, limit),
    );
    await touch(bound + 1);
    const past = await invoke(reader.client, "presence", {
      body: { limit, cursor: within.body.cursor },
    });
    assert.equal(past.body.resync, true);
  },
);

closeStackAfterAll("presence cursor", stack);
