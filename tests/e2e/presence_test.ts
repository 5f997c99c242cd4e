/**
 * presence end to end: the real supabase-js client against the local stack
 * (PGlite, or PostgreSQL with TEST_DATABASE_URL), one test per rule of
 * docs/api.md "presence": who may read, what each user item holds,
 * each status boundary by the database clock, each query form, the cursor,
 * every error, and the legacy `usuarios` shape (last in the file).
 */
import assert from "node:assert/strict";
import {
  CursorKeys,
  sealCursor,
} from "../../supabase/functions/presence/cursor.ts";
import {
  AHEAD_S,
  CHANGES_BOUND_PAGES,
} from "../../supabase/functions/presence/query.ts";
import type { SupabaseClient } from "@supabase/supabase-js";
import { functionEnv } from "../../local/functions.ts";
import { createDeps } from "../../supabase/functions/_shared/deps.ts";
import { createPresence } from "../../supabase/functions/presence/handler.ts";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { call, invoke } from "../support/invoke.ts";
import { startTestStack, type TestStack } from "../support/stack.ts";

const ISO_MS_Z = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const PUBLIC_FIELDS = [
  "id",
  "nombre_usuario",
  "presence_state",
  "status",
  "ultimo_acceso",
];

const stack: TestStack = await startTestStack();
// Thresholds of 1 s and 2 s, so the clock moves users within a test.
const fast = await stack.withFunctionEnv({
  PRESENCE_AWAY_AFTER_S: "1",
  PRESENCE_OFFLINE_AFTER_S: "2",
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const unique = (p: string) => `${p}-${crypto.randomUUID().slice(0, 8)}`;

/** A signed-in user with a row. */
function member(row: Record<string, unknown> = {}) {
  return stack.createUser({
    row: { auth_user_id: true, nombre_usuario: unique("m"), ...row },
  });
}

function read(
  client: SupabaseClient,
  body?: Record<string, unknown> | unknown[],
) {
  return invoke(client, "presence", body === undefined ? {} : { body });
}

/** A read through the functions served with 1 s / 2 s thresholds. */
function readFast(token: string, body: unknown = {}) {
  return call(fast.apiUrl, "presence", {
    headers: {
      Authorization: `Bearer ${token}`,
      "Content-Type": "application/json",
    },
    body: JSON.stringify(body),
  });
}

/** Moves a row's last access `seconds` into the past by the database clock. */
async function lastSeen(id: number, seconds: number, state = "online") {
  await stack.sql`
    update public.usuarios
    set ultimo_acceso = now() - make_interval(secs => ${seconds}::int),
        presence_state = ${state}
    where id = ${id}`;
}

// ------------------------------------------------------------------ access

e2eTest(
  "presence: a user with a row reads everyone's public fields, never an email",
  async () => {
    const u = await member({ correo: `${unique("c")}@mail.test` });
    const res = await read(u.client);
    assert.equal(res.status, 200);
    assert.deepEqual(Object.keys(res.body).sort(), [
      "cursor",
      "next_after_id",
      "ok",
      "removed",
      "resync",
      "server_time",
      "users",
    ]);
    assert.equal(res.body.ok, true);
    assert.deepEqual(res.body.removed, []);
    assert.match(res.body.server_time, ISO_MS_Z);
    assert.equal(typeof res.body.cursor, "string");
    assert.equal(res.body.resync, false);
    assert.ok(res.body.users.length >= 2);
    for (const item of res.body.users) {
      assert.deepEqual(Object.keys(item).sort(), PUBLIC_FIELDS);
      assert.equal(typeof item.id, "number");
    }
    const text = JSON.stringify(res.body);
    assert.ok(!text.includes("@"), "no email, not even as a username");
    assert.ok(!text.includes(u.id), "no auth_user_id");
    assert.ok(!text.includes("administrador"), "no rol");
    assert.equal(res.headers.get("access-control-allow-origin"), "*");
  },
);

e2eTest(
  "presence: an administrator by rol also gets correo, auth_user_id and rol",
  async () => {
    const boss = await member({ rol: "admin" });
    const u = await member({ correo: `${unique("c")}@mail.test` });
    const res = await read(boss.client, { ids: [u.rowId] });
    assert.equal(res.status, 200);
    assert.deepEqual(res.body.users, [{
      id: u.rowId,
      nombre_usuario: res.body.users[0].nombre_usuario,
      presence_state: "offline",
      ultimo_acceso: null,
      status: "offline",
      correo: (await stack.sql`select correo from public.usuarios
                               where id = ${u.rowId!}`)[0].correo,
      auth_user_id: u.id,
      rol: "usuario",
    }]);
  },
);

e2eTest(
  "presence: an ADMIN_EMAILS administrator without a row reads with emails",
  async () => {
    const jefa = await stack.createUser({
      email: "jefa@example.com",
      adminVerified: true,
    });
    const res = await read(jefa.client, { ids: [1] });
    assert.equal(res.status, 200);
    assert.equal(res.body.users[0].correo, "ana@example.com");
    assert.equal(res.body.users[0].rol, "usuario");
  },
);

e2eTest(
  "presence: a username that is an email reaches a standard user only up to the @",
  async () => {
    const u = await member();
    const boss = await member({ rol: "admin" });
    const name = `${unique("n")}@mail.test`;
    const [r] = await stack.sql`insert into public.usuarios (nombre_usuario)
                                values (${name}) returning id`;
    const plain = await read(u.client, { ids: [Number(r.id)] });
    assert.equal(plain.body.users[0].nombre_usuario, name.split("@")[0]);
    const admin = await read(boss.client, { ids: [Number(r.id)] });
    assert.equal(admin.body.users[0].nombre_usuario, name);
  },
);

e2eTest(
  "presence: a rol matched only by username grants no emails",
  async () => {
    const name = unique("boss");
    const u = await stack.createUser({ email: `${name}@example.com` });
    await stack.sql`insert into public.usuarios (nombre_usuario, rol)
                    values (${`${name}@example.com`}, 'admin')`;
    const res = await read(u.client, { ids: [1] });
    assert.equal(res.status, 200);
    assert.deepEqual(Object.keys(res.body.users[0]).sort(), PUBLIC_FIELDS);
  },
);

e2eTest("presence: a valid token without a row gives 404", async () => {
  const u = await stack.createUser();
  const res = await read(u.client);
  assert.equal(res.status, 404);
  assert.deepEqual(res.body, {
    message: "No se encontró el usuario en la tabla usuarios",
    code: "user_not_found",
  });
});

e2eTest("presence: no Authorization header gives 401", async () => {
  const res = await call(stack.apiUrl, "presence");
  assert.equal(res.status, 401);
  assert.equal(res.body.code, "missing_bearer");
  assert.equal(res.headers.get("www-authenticate"), "Bearer");
});

e2eTest("presence: a token Auth rejects gives 401 invalid_token", async () => {
  const u = await member();
  const [h, p] = u.token.split(".");
  const res = await call(stack.apiUrl, "presence", {
    headers: { Authorization: `Bearer ${h}.${p}.${"A".repeat(86)}` },
  });
  assert.equal(res.status, 401);
  assert.equal(res.body.code, "invalid_token");
});

e2eTest(
  "presence: the token is checked before the body (no row, bad body: 404)",
  async () => {
    const u = await stack.createUser();
    const res = await read(u.client, { status: ["busy"] });
    assert.equal(res.status, 404);
  },
);

e2eTest("presence: methods other than POST give 405 with Allow", async () => {
  const u = await member();
  for (const method of ["GET", "PUT", "DELETE"]) {
    const res = await invoke(u.client, "presence", { method: method as "GET" });
    assert.equal(res.status, 405, method);
    assert.equal(res.body.code, "method_not_allowed");
    assert.equal(res.headers.get("allow"), "POST, OPTIONS");
  }
});

// ---------------------------------------------------------------- status

e2eTest(
  "presence: status by the database clock at each default threshold (300 s, 900 s)",
  async () => {
    const u = await member();
    const rows: [number, string, string][] = [];
    const cases: [number | null, string, string][] = [
      [0, "online", "online"],
      [295, "online", "online"],
      [305, "online", "away"],
      [895, "online", "away"],
      [905, "online", "offline"],
      [0, "offline", "offline"],
      [null, "offline", "offline"],
      // Ahead of the clock: within AHEAD_S a ping's, further no evidence.
      [-(AHEAD_S - 5), "online", "online"],
      [-(AHEAD_S + 5), "online", "offline"],
      [-5 * 3600, "online", "offline"],
    ];
    for (const [ago, state, expected] of cases) {
      const [r] = await stack.sql`insert into public.usuarios (nombre_usuario)
                                  values (${unique("s")}) returning id`;
      const id = Number(r.id);
      if (ago !== null) await lastSeen(id, ago, state);
      rows.push([id, state, expected]);
    }
    const res = await read(u.client, { ids: rows.map(([id]) => id) });
    assert.equal(res.status, 200);
    assert.deepEqual(
      res.body.users.map((
        x: { id: number; presence_state: string; status: string },
      ) => [
        x.id,
        x.presence_state,
        x.status,
      ]),
      rows,
    );
    for (const x of res.body.users) {
      if (x.ultimo_acceso !== null) assert.match(x.ultimo_acceso, ISO_MS_Z);
    }
  },
);

e2eTest(
  "presence: a time ahead of the clock is a ping's for the read exactly when it is for presence-ping (AHEAD_S)",
  async () => {
    // Within the bound, an older offline ping does not overwrite the stored
    // online (the order rule) and the read counts it online; past it, the
    // ping stores its own time over it and the read counted it offline.
    for (
      const [ahead, readAs, afterOffline] of [
        [AHEAD_S - 5, "online", "online"],
        [AHEAD_S + 5, "offline", "offline"],
      ] as const
    ) {
      const u = await member();
      await lastSeen(u.rowId!, -ahead);
      const before = await read(u.client, { ids: [u.rowId] });
      assert.equal(before.body.users[0].status, readAs, `${ahead} s ahead`);
      const ping = await invoke(u.client, "presence-ping", {
        body: { state: "offline" },
      });
      assert.equal(ping.status, 200);
      const [row] = await stack.sql`
        select presence_state, ultimo_acceso <= now() as past
        from public.usuarios where id = ${u.rowId!}`;
      assert.equal(row.presence_state, afterOffline, `${ahead} s ahead`);
      assert.equal(row.past, afterOffline === "offline", `${ahead} s ahead`);
    }
  },
);

e2eTest(
  "presence: changes since a cursor include a time ahead of the clock coming within AHEAD_S (a move by the clock alone)",
  async () => {
    const u = await member();
    const ids = [u.rowId];
    // 1.5 s past the bound: offline now, online once 1.5 s have passed.
    await stack.sql`
      update public.usuarios
      set ultimo_acceso = now() + make_interval(secs => ${AHEAD_S + 1.5}),
          presence_state = 'online'
      where id = ${u.rowId!}`;
    const first = await read(u.client, { ids });
    assert.equal(first.body.users[0].status, "offline");
    await sleep(2500);
    const next = await read(u.client, { cursor: first.body.cursor, ids });
    assert.deepEqual(
      next.body.users.map((x: { id: number; status: string }) => [
        x.id,
        x.status,
      ]),
      [[u.rowId, "online"]],
    );
  },
);

e2eTest(
  "presence: a stored state outside online/offline reads as offline",
  async () => {
    const u = await member();
    const [r] = await stack.sql`insert into public.usuarios (nombre_usuario)
                                values (${unique("odd")}) returning id`;
    // Legacy tables may lack the check constraint; drop it for this row.
    await stack.sql.begin(async (tx) => {
      await tx`alter table public.usuarios
               drop constraint if exists usuarios_presence_state_check`;
      await tx`update public.usuarios set presence_state = 'busy',
               ultimo_acceso = now() where id = ${r.id}`;
    });
    const res = await read(u.client, { ids: [Number(r.id)] });
    assert.equal(res.body.users[0].presence_state, "busy");
    assert.equal(res.body.users[0].status, "offline");
    await stack.sql`update public.usuarios set presence_state = 'offline'
                    where id = ${r.id}`;
    await stack.sql`alter table public.usuarios
      add constraint usuarios_presence_state_check
      check (presence_state in ('online', 'offline'))`;
  },
);

e2eTest(
  "presence: reading never changes the stored presence_state",
  async () => {
    const u = await member();
    await lastSeen(u.rowId!, 2000);
    const res = await read(u.client, { ids: [u.rowId] });
    assert.equal(res.body.users[0].status, "offline");
    const [r] = await stack.sql`select presence_state from public.usuarios
                                where id = ${u.rowId!}`;
    assert.equal(r.presence_state, "online");
  },
);

// ----------------------------------------------------------------- queries

e2eTest("presence: ids returns exactly those rows, in id order", async () => {
  const a = await member(), b = await member();
  const res = await read(a.client, { ids: [b.rowId, a.rowId, 99_999_999] });
  assert.deepEqual(
    res.body.users.map((x: { id: number }) => x.id),
    [a.rowId, b.rowId].sort((x, y) => x! - y!),
  );
  assert.equal(res.body.next_after_id, null);
});

e2eTest("presence: status filters by computed status", async () => {
  const u = await member();
  const ids: number[] = [];
  for (const ago of [0, 400, 1000]) {
    const v = await member();
    await lastSeen(v.rowId!, ago);
    ids.push(v.rowId!);
  }
  const pick = async (status: string[]) =>
    (await read(u.client, { ids, status })).body.users.map((
      x: { id: number },
    ) => x.id);
  assert.deepEqual(await pick(["online"]), [ids[0]]);
  assert.deepEqual(await pick(["online", "away"]), [ids[0], ids[1]]);
  assert.deepEqual(await pick(["offline"]), [ids[2]]);
  assert.deepEqual(await pick(["away", "offline", "online"]), ids);
});

e2eTest(
  "presence: pages by after_id and limit cover every row once",
  async () => {
    const u = await member();
    const [{ n }] = await stack.sql`select count(*)::int as n
                                    from public.usuarios`;
    const seen: number[] = [];
    let after: number | null = 0;
    let pages = 0;
    while (after !== null) {
      const res = await read(u.client, { after_id: after, limit: 3 });
      assert.equal(res.status, 200);
      assert.ok(res.body.users.length <= 3);
      seen.push(...res.body.users.map((x: { id: number }) => x.id));
      after = res.body.next_after_id;
      if (after !== null) assert.equal(after, seen.at(-1));
      pages++;
    }
    assert.equal(seen.length, n);
    assert.deepEqual(seen, [...seen].sort((a, b) => a - b));
    assert.equal(pages, Math.ceil(n / 3));
  },
);

e2eTest("presence: limit defaults to 100", async () => {
  const u = await member();
  const [{ have }] = await stack.sql`select count(*)::int as have
                                     from public.usuarios`;
  if (have < 101) {
    await stack.sql`insert into public.usuarios (nombre_usuario)
      select 'bulk-' || g || '-' || ${unique("b")}
      from generate_series(1, ${101 - have}::int) g`;
  }
  const res = await read(u.client);
  assert.equal(res.body.users.length, 100);
  assert.equal(res.body.next_after_id, res.body.users[99].id);
});

// ------------------------------------------------------------------ cursor

e2eTest(
  "presence: changes since a cursor list only the users pinged since",
  async () => {
    const u = await member(), v = await member();
    // Only these two: the test stack's thresholds are a second or two, so
    // another test's user pinged a moment ago may cross one by the clock
    // between two reads, and would be listed rightly.
    const ids = [u.rowId, v.rowId];
    const first = await read(u.client, { ids });
    const quiet = await read(u.client, { cursor: first.body.cursor, ids });
    assert.equal(quiet.status, 200);
    assert.deepEqual(quiet.body.users, []);
    assert.equal(quiet.body.resync, false);
    const ping = await invoke(v.client, "presence-ping");
    const changed = await read(u.client, { cursor: quiet.body.cursor, ids });
    assert.deepEqual(changed.body.users, [{
      id: v.rowId,
      nombre_usuario: changed.body.users[0].nombre_usuario,
      presence_state: "online",
      ultimo_acceso: ping.body.user.ultimo_acceso,
      status: "online",
    }]);
    const again = await read(u.client, { cursor: changed.body.cursor, ids });
    assert.deepEqual(again.body.users, []);
  },
);

e2eTest(
  "presence: changes since a cursor include moves made by the clock alone",
  async () => {
    const u = await member();
    const ids = [u.rowId];
    const first = await readFast(u.token, { ids });
    await invoke(u.client, "presence-ping");
    const seen = await readFast(u.token, { cursor: first.body.cursor, ids });
    assert.deepEqual(
      seen.body.users.map((x: { status: string }) => x.status),
      ["online"],
    );
    await sleep(1300);
    const away = await readFast(u.token, { cursor: seen.body.cursor, ids });
    assert.deepEqual(
      away.body.users.map((x: { id: number; status: string }) => [
        x.id,
        x.status,
      ]),
      [[u.rowId, "away"]],
    );
    await sleep(1000);
    const gone = await readFast(u.token, { cursor: away.body.cursor, ids });
    assert.deepEqual(
      gone.body.users.map((x: { id: number; status: string }) => [
        x.id,
        x.status,
      ]),
      [[u.rowId, "offline"]],
    );
    const still = await readFast(u.token, { cursor: gone.body.cursor, ids });
    assert.deepEqual(still.body.users, []);
  },
);

e2eTest(
  "presence: changes since a cursor page by after_id with the same cursor",
  async () => {
    const u = await member();
    const others = [await member(), await member(), await member()];
    const first = await read(u.client, { ids: [u.rowId] });
    for (const o of others) await invoke(o.client, "presence-ping");
    const ids: number[] = [];
    let after: number | null = 0;
    while (after !== null) {
      const res = await read(u.client, {
        cursor: first.body.cursor,
        after_id: after,
        limit: 2,
      });
      ids.push(...res.body.users.map((x: { id: number }) => x.id));
      after = res.body.next_after_id;
    }
    for (const o of others) assert.ok(ids.includes(o.rowId!));
  },
);

e2eTest("presence: changes since a cursor honour ids", async () => {
  const u = await member(), v = await member(), w = await member();
  const first = await read(u.client, { ids: [v.rowId] });
  await invoke(v.client, "presence-ping");
  await invoke(w.client, "presence-ping");
  const res = await read(u.client, {
    cursor: first.body.cursor,
    ids: [v.rowId],
  });
  assert.deepEqual(res.body.users.map((x: { id: number }) => x.id), [v.rowId]);
});

e2eTest(
  "presence: a cursor older than an hour gets a full read flagged resync",
  async () => {
    const u = await member();
    const [{ t, snap }] = await stack.sql`
      select (extract(epoch from now() - interval '61 minutes') * 1000000)
               ::bigint::text as t,
             pg_current_snapshot()::text as snap`;
    const old = await sealCursor(
      {
        time: BigInt(t),
        snapshot: snap,
        awayS: 300,
        offlineS: 900,
      },
      stack.secretKey || stack.serviceRoleKey,
      new CursorKeys(),
    ); // the key the functions hold
    const res = await read(u.client, { cursor: old, ids: [u.rowId] });
    assert.equal(res.status, 200);
    assert.equal(res.body.resync, true);
    assert.deepEqual(res.body.users.map((x: { id: number }) => x.id), [
      u.rowId,
    ]);
    const next = await read(u.client, { cursor: res.body.cursor });
    assert.equal(next.body.resync, false);
  },
);

e2eTest(
  "presence: a cursor's age is judged by the database clock that issued it, not the function's (one 30 minutes off either way)",
  async () => {
    const env = functionEnv(stack.functionInput);
    const u = await member();
    // A cursor `ageMin` minutes old by the database clock.
    const cursorAged = async (ageMin: number) => {
      const [{ t, snap }] = await stack.sql`
        select (extract(epoch from now() - make_interval(mins => ${ageMin}::int))
                  * 1000000)::bigint::text as t,
               pg_current_snapshot()::text as snap`;
      return await sealCursor(
        { time: BigInt(t), snapshot: snap, awayS: 300, offlineS: 900 },
        stack.secretKey || stack.serviceRoleKey,
        new CursorKeys(),
      );
    };
    for (
      const [skewMin, ageMin, resync] of [
        [-30, 61, true], // the function's clock 30 minutes behind
        [30, 40, false], // 30 minutes ahead
      ] as const
    ) {
      const deps = createDeps({ now: () => Date.now() + skewMin * 60_000 });
      try {
        const handler = createPresence((name) => env.get(name), deps);
        const res = await handler(
          new Request("http://functions.local/presence", {
            method: "POST",
            headers: {
              Authorization: `Bearer ${u.token}`,
              "Content-Type": "application/json",
            },
            body: JSON.stringify({
              cursor: await cursorAged(ageMin),
              ids: [u.rowId],
            }),
          }),
        );
        const body = await res.json();
        assert.equal(res.status, 200, JSON.stringify(body));
        assert.equal(body.resync, resync, `skew ${skewMin} min, age ${ageMin}`);
      } finally {
        await deps.close();
      }
    }
  },
);

e2eTest(
  "presence: a cursor sealed under another service key (a key rotation) gets a full read flagged resync, never a 400",
  async () => {
    const u = await member();
    const [{ t, snap }] = await stack.sql`
      select (extract(epoch from now()) * 1000000)::bigint::text as t,
             pg_current_snapshot()::text as snap`;
    const rotated = await sealCursor(
      {
        time: BigInt(t),
        snapshot: snap,
        awayS: 300,
        offlineS: 900,
      },
      "the service key before the rotation",
      new CursorKeys(),
    );
    const res = await read(u.client, { cursor: rotated, ids: [u.rowId] });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.resync, true);
    assert.deepEqual(res.body.users.map((x: { id: number }) => x.id), [
      u.rowId,
    ]);
    const next = await read(u.client, { cursor: res.body.cursor });
    assert.equal(next.body.resync, false);
  },
);

e2eTest(
  "presence: changes-since follows up to CHANGES_BOUND_PAGES pages of limit; a bulk write past that answers a full read flagged resync",
  async () => {
    const u = await member();
    const limit = 2;
    const bound = limit * CHANGES_BOUND_PAGES;
    const bulk = (await stack.sql`
      insert into public.usuarios (nombre_usuario, presence_state)
      select ${unique("bulk")} || '-' || g, 'offline'
      from generate_series(1, ${bound + 5}) g
      returning id`).map((r) => Number(r.id));
    const touch = (ids: number[]) =>
      stack.sql`update public.usuarios set rol = 'bulk'
                where id = any(${ids}::bigint[])`;
    const first = await read(u.client, { limit });
    await touch(bulk.slice(0, bound));
    const within = await read(u.client, { limit, cursor: first.body.cursor });
    assert.equal(within.status, 200);
    assert.equal(within.body.resync, false);
    assert.deepEqual(
      within.body.users.map((x: { id: number }) => x.id),
      bulk.slice(0, limit),
    );
    await touch(bulk.slice(0, bound + 1));
    const past = await read(u.client, { limit, cursor: within.body.cursor });
    assert.equal(past.status, 200);
    assert.equal(past.body.resync, true);
    // The first page of a full read: the table's lowest ids.
    const [{ lowest }] = await stack.sql`
      select array(select id from public.usuarios order by id limit ${limit})
        as lowest`;
    assert.deepEqual(
      past.body.users.map((x: { id: number }) => x.id),
      lowest.map(Number),
    );
    const quiet = await read(u.client, { limit, cursor: past.body.cursor });
    assert.equal(quiet.body.resync, false);
    assert.deepEqual(quiet.body.users, []);
  },
);

e2eTest(
  "presence: a cursor issued under other thresholds gets a resync",
  async () => {
    const u = await member();
    const fastCursor = (await readFast(u.token, { ids: [u.rowId] })).body
      .cursor;
    const res = await read(u.client, { cursor: fastCursor, ids: [u.rowId] });
    assert.equal(res.status, 200);
    assert.equal(res.body.resync, true);
    assert.equal(res.body.users.length, 1);
  },
);

// ------------------------------------------------------------------ errors

e2eTest(
  "presence: bad query values give 400 validation_failed, never a 500",
  async () => {
    const u = await member();
    const good = (await read(u.client)).body.cursor as string;
    // The same cursor with one byte of its ciphertext flipped.
    const raw = Uint8Array.from(
      atob(good.replaceAll("-", "+").replaceAll("_", "/")),
      (c) => c.charCodeAt(0),
    );
    raw[raw.length - 5] ^= 1;
    const forged = btoa(String.fromCharCode(...raw)).replaceAll("+", "-")
      .replaceAll("/", "_").replace(/=+$/, "");
    const bodies: [string, Record<string, unknown> | unknown[], unknown[]][] = [
      ["unknown status", { status: ["busy"] }, ["status", 0]],
      ["status not a list", { status: "online" }, ["status"]],
      ["too many ids", {
        ids: Array.from({ length: 501 }, (_, i) => i + 1),
      }, ["ids"]],
      ["id not a number", { ids: ["1 or 1=1"] }, ["ids", 0]],
      ["limit 0", { limit: 0 }, ["limit"]],
      ["limit 501", { limit: 501 }, ["limit"]],
      ["after_id not a whole number", { after_id: 2.5 }, ["after_id"]],
      ["unknown member", { since: "yesterday" }, []],
      ["cursor with status", { cursor: good, status: ["online"] }, [
        "status",
      ]],
      ["malformed cursor", { cursor: "not-a-cursor" }, ["cursor"]],
      ["truncated cursor", { cursor: good.slice(0, -3) }, ["cursor"]],
      ["forged cursor", { cursor: forged }, ["cursor"]],
      ["body not an object", [1, 2], []],
    ];
    for (const [name, body, path] of bodies) {
      const res = await read(u.client, body);
      assert.equal(res.status, 400, name);
      assert.equal(res.body.code, "validation_failed", name);
      assert.equal(res.body.message, "Solicitud inválida", name);
      assert.deepEqual(res.body.issues[0].path, path, name);
      assert.ok(!JSON.stringify(res.body).includes("busy"), name);
    }
  },
);

e2eTest("presence: a body that is not JSON gives 400 bad_json", async () => {
  const u = await member();
  const res = await call(stack.apiUrl, "presence", {
    headers: {
      Authorization: `Bearer ${u.token}`,
      "Content-Type": "application/json",
    },
    body: "{not json",
  });
  assert.equal(res.status, 400);
  assert.deepEqual(res.body, { message: "JSON inválido", code: "bad_json" });
});

e2eTest(
  "presence: a bad threshold setting gives 500 invalid_env naming it",
  async () => {
    const bad = await stack.withFunctionEnv({
      PRESENCE_AWAY_AFTER_S: "600",
      PRESENCE_OFFLINE_AFTER_S: "300",
    });
    try {
      const u = await member();
      const res = await call(bad.apiUrl, "presence", {
        headers: { Authorization: `Bearer ${u.token}` },
      });
      assert.equal(res.status, 500);
      assert.equal(res.body.code, "invalid_env");
      assert.deepEqual(Object.keys(res.body.invalid), [
        "PRESENCE_OFFLINE_AFTER_S",
      ]);
    } finally {
      await bad.close();
    }
  },
);

// ------------------------------------------------------------------ legacy
// From here on the table has the legacy shape: no auth_user_id, no
// last_manual_logout_at.

e2eTest(
  "presence: legacy shape reads by correo; without auth_user_id a rol proves nothing, so an admin row reads only public fields",
  async () => {
    const u = await stack.createUser();
    const boss = await stack.createUser();
    await stack.sql`alter table public.usuarios drop column auth_user_id`;
    await stack
      .sql`alter table public.usuarios drop column last_manual_logout_at`;
    const [mine] = await stack.sql`
      insert into public.usuarios (correo, nombre_usuario)
      values (${u.email}, ${unique("legacy")}) returning id`;
    await stack.sql`insert into public.usuarios (correo, nombre_usuario, rol)
                    values (${boss.email}, ${unique("lboss")}, 'admin')`;
    const id = Number(mine.id);
    const plain = await read(u.client, { ids: [id] });
    assert.equal(plain.status, 200);
    assert.deepEqual(Object.keys(plain.body.users[0]).sort(), PUBLIC_FIELDS);
    // Rights need a row linked by auth_user_id (docs/security.md, "Security notes");
    // here only ADMIN_EMAILS makes administrators.
    const admin = await read(boss.client, { ids: [id] });
    assert.equal(admin.status, 200);
    assert.deepEqual(Object.keys(admin.body.users[0]).sort(), PUBLIC_FIELDS);
    await invoke(u.client, "presence-ping");
    const delta = await read(u.client, { cursor: plain.body.cursor });
    assert.deepEqual(
      delta.body.users.map((x: { id: number; status: string }) => [
        x.id,
        x.status,
      ]),
      [[id, "online"]],
    );
  },
);

e2eTest("presence: the served copy with fast thresholds closes", async () => {
  await fast.close();
  await assert.rejects(
    fetch(`${fast.apiUrl}/functions/v1/presence`, {
      signal: AbortSignal.timeout(2000),
    }),
  );
});

closeStackAfterAll("presence", stack);
