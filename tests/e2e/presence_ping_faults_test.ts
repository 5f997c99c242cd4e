/**
 * presence-ping under a broken environment, a failing database, an
 * unreachable or slow identity provider, and the legacy `usuarios` shape
 * (no optional columns, duplicates), including columns dropped while the
 * function runs.
 */
import assert from "node:assert/strict";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { delayUnlessAborted } from "../support/faults.ts";
import { call, invoke } from "../support/invoke.ts";
import { startTestStack, type TestStack } from "../support/stack.ts";

// The username strategies are part of the legacy-shape test below.
const stack: TestStack = await startTestStack({
  functionEnv: { USERNAME_MATCH_DOMAINS: "test.local" },
});

e2eTest(
  "presence-ping: missing environment gives 500 with the missing object",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    // The anon key is missing only when neither it nor a publishable key
    // (SUPABASE_PUBLISHABLE_KEYS, which the stack also passes) is set.
    const served = await stack.withFunctionEnv({
      SUPABASE_ANON_KEY: "",
      SUPABASE_PUBLISHABLE_KEYS: "",
      SUPABASE_DB_URL: " ",
    });
    try {
      const res = await call(served.apiUrl, "presence-ping", {
        headers: { Authorization: `Bearer ${u.token}` },
      });
      assert.equal(res.status, 500);
      assert.equal(res.body.code, "missing_env");
      assert.match(res.body.message, /variables de entorno/);
      assert.deepEqual(res.body.missing, {
        SUPABASE_URL: false,
        SUPABASE_ANON_KEY: true,
        SUPABASE_SERVICE_ROLE_KEY_or_SUPABASE_SERVICE_KEY: false,
        SUPABASE_DB_URL: true,
      });
      const text = JSON.stringify(res.body);
      assert.ok(!text.includes(stack.serviceRoleKey));
    } finally {
      await served.close();
    }
  },
);

e2eTest(
  "presence-ping: a database failure gives 500 Error actualizando presencia with the detail",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const served = await stack.withFunctionEnv({
      SUPABASE_DB_URL:
        "postgresql://postgres:not-the-password@127.0.0.1:9/postgres",
    });
    try {
      const res = await call(served.apiUrl, "presence-ping", {
        headers: { Authorization: `Bearer ${u.token}` },
      });
      assert.equal(res.status, 500);
      assert.equal(res.body.message, "Error actualizando presencia");
      assert.equal(res.body.code, "presence_update_failed");
      assert.equal(typeof res.body.error, "string");
      assert.ok(!res.body.error.includes("not-the-password"));
    } finally {
      await served.close();
    }
  },
);

e2eTest(
  "presence-ping: a pooler string as the dashboard's Prisma tab writes it pings; another client's parameter is 500 invalid_env naming it, never the string",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const auth = { headers: { Authorization: `Bearer ${u.token}` } };
    const url = new URL(stack.dbUrl);
    for (
      const [name, value] of [
        ["pgbouncer", "true"],
        ["connect_timeout", "10"],
        ["application_name", "my-app-presence"],
        ["options", "-c search_path=public"],
      ]
    ) url.searchParams.set(name, value);
    const served = await stack.withFunctionEnv({
      PRESENCE_DB_URL: String(url),
    });
    try {
      const res = await call(served.apiUrl, "presence-ping", auth);
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.equal(res.body.user.presence_state, "online");
      // Before, each of the first two was sent to the server as a setting
      // and every connection was refused (42704). PGlite is one session
      // with no client list; PostgreSQL shows the name the URL gave.
      if (Deno.env.get("TEST_DATABASE_URL")) {
        const [seen] = await stack.sql`
          select count(*)::int as n from pg_stat_activity
          where application_name = 'my-app-presence'`;
        assert.ok(seen.n >= 1, "the functions' connections carry the name");
      }
    } finally {
      await served.close();
    }
    url.searchParams.set("connection_limit", "1");
    const limited = await stack.withFunctionEnv({
      PRESENCE_DB_URL: String(url),
    });
    try {
      const res = await call(limited.apiUrl, "presence-ping", auth);
      assert.equal(res.status, 500);
      assert.equal(res.body.code, "invalid_env");
      assert.match(
        res.body.invalid.PRESENCE_DB_URL,
        /"connection_limit" is not read.*DB_POOL_MAX/,
      );
      assert.ok(!JSON.stringify(res.body).includes(url.password));
    } finally {
      await limited.close();
    }
  },
);

e2eTest(
  "presence-ping: an unreachable identity provider gives 503 with Retry-After, not 401",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const served = await stack.withFunctionEnv({
      SUPABASE_URL: "http://127.0.0.1:9",
    });
    try {
      const res = await call(served.apiUrl, "presence-ping", {
        headers: { Authorization: `Bearer ${u.token}` },
      });
      assert.equal(res.status, 503);
      assert.deepEqual(res.body, {
        message: "Proveedor de identidad no disponible",
        code: "idp_unavailable",
      });
      assert.equal(res.headers.get("retry-after"), "5");
    } finally {
      await served.close();
    }
  },
);

e2eTest(
  "presence-ping: a provider slower than 5 s gives 503 after the timeout",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const slow = Deno.serve({
      hostname: "127.0.0.1",
      port: 0,
      onListen: () => {},
    }, async (req) => {
      await delayUnlessAborted(req, 10_000);
      return new Response("{}");
    });
    const served = await stack.withFunctionEnv({
      SUPABASE_URL: `http://127.0.0.1:${slow.addr.port}`,
    });
    try {
      const started = Date.now();
      const res = await call(served.apiUrl, "presence-ping", {
        headers: { Authorization: `Bearer ${u.token}` },
      });
      const elapsed = Date.now() - started;
      assert.equal(res.status, 503);
      assert.equal(res.body.code, "idp_unavailable");
      assert.ok(
        elapsed >= 4_500 && elapsed < 9_000,
        `answered after ${elapsed} ms`,
      );
    } finally {
      await served.close();
      await slow.shutdown();
    }
  },
);

e2eTest(
  "presence-ping: a provider answering 500 gives 503, not 401",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const broken = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen: () => {} },
      () =>
        Response.json({
          code: 500,
          error_code: "unexpected_failure",
          msg: "boom",
        }, { status: 500 }),
    );
    const served = await stack.withFunctionEnv({
      SUPABASE_URL: `http://127.0.0.1:${broken.addr.port}`,
    });
    try {
      const res = await call(served.apiUrl, "presence-ping", {
        headers: { Authorization: `Bearer ${u.token}` },
      });
      assert.equal(res.status, 503);
      assert.equal(res.headers.get("retry-after"), "5");
    } finally {
      await served.close();
      await broken.shutdown();
    }
  },
);

e2eTest(
  "presence-ping: a column dropped while running is noticed and the ping still succeeds",
  async () => {
    const u = await stack.createUser({
      row: { correo: null, auth_user_id: true },
    });
    await stack
      .sql`update public.usuarios set correo = ${u.email} where id = ${u
      .rowId!}`;
    const first = await invoke(u.client, "presence-ping", {
      body: { state: "offline" },
    });
    assert.equal(first.status, 200);
    await stack
      .sql`alter table public.usuarios drop column last_manual_logout_at`;
    const second = await invoke(u.client, "presence-ping", {
      body: { state: "offline" },
    });
    assert.equal(second.status, 200);
    assert.equal(second.body.user.presence_state, "offline");
    await stack.sql`alter table public.usuarios drop column auth_user_id`;
    const third = await invoke(u.client, "presence-ping", {
      body: { state: "online" },
    });
    assert.equal(third.status, 200);
    assert.equal(third.body.user.id, u.rowId);
    assert.equal(third.body.user.presence_state, "online");
  },
);

// From here on the table has the legacy shape: no auth_user_id, no
// last_manual_logout_at, and no unique indexes, so duplicates exist.
e2eTest(
  "presence-ping: legacy shape matches by correo, then usernames, lowest id on a tie",
  async () => {
    await stack.sql`drop index if exists public.usuarios_correo_lower_key`;
    await stack
      .sql`drop index if exists public.usuarios_nombre_usuario_lower_key`;
    const [{ count }] = await stack.sql`
    select count(*)::int as count from information_schema.columns
    where table_schema = 'public' and table_name = 'usuarios'
      and column_name in ('auth_user_id', 'last_manual_logout_at')`;
    assert.equal(count, 0);
    const u = await stack.createUser();
    const local = u.email.split("@")[0];
    const ids = await stack.sql`
    insert into public.usuarios (correo, nombre_usuario) values
      (null, ${local}), (null, ${u.email}), (${u.email.toUpperCase()}, null), (${u.email}, null)
    returning id`;
    const [byLocal, byName, firstCorreo, secondCorreo] = ids.map((r) =>
      Number(r.id)
    );
    const a = await invoke(u.client, "presence-ping", {
      body: { state: "offline" },
    });
    assert.equal(a.status, 200);
    assert.equal(a.body.user.id, firstCorreo);
    assert.equal(a.body.user.presence_state, "offline");
    await stack
      .sql`delete from public.usuarios where id in (${firstCorreo}, ${secondCorreo})`;
    assert.equal(
      (await invoke(u.client, "presence-ping")).body.user.id,
      byName,
    );
    await stack.sql`delete from public.usuarios where id = ${byName}`;
    assert.equal(
      (await invoke(u.client, "presence-ping")).body.user.id,
      byLocal,
    );
  },
);

e2eTest(
  "presence-ping: legacy shape with duplicate usernames takes the lowest id",
  async () => {
    const u = await stack.createUser();
    const [a, b] = await stack.sql`
    insert into public.usuarios (nombre_usuario) values (${u.email}), (${u.email})
    returning id`;
    const res = await invoke(u.client, "presence-ping", {
      body: { state: "offline" },
    });
    assert.equal(res.status, 200);
    assert.equal(res.body.user.id, Math.min(Number(a.id), Number(b.id)));
  },
);

closeStackAfterAll("presence-ping faults", stack);
