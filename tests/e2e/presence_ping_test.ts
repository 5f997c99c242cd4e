/**
 * presence-ping end to end: the real supabase-js client against the local
 * stack (PGlite, or PostgreSQL with TEST_DATABASE_URL), one test per rule of
 * docs/api.md "presence-ping".
 */
import assert from "node:assert/strict";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { call, invoke } from "../support/invoke.ts";
import { startTestStack, type TestStack } from "../support/stack.ts";
import { hs256Token } from "../support/tokens.ts";

const ISO_MS_Z = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

// The username strategy is allowed for the tests' own domain, so that every
// spec strategy is exercised (security_test.ts covers the default, off).
const stack: TestStack = await startTestStack({
  functionEnv: { USERNAME_MATCH_DOMAINS: "test.local" },
});

async function row(id: number) {
  const [r] = await stack.sql`
    select id, correo, nombre_usuario, presence_state, ultimo_acceso,
           last_manual_logout_at
    from public.usuarios where id = ${id}`;
  return r;
}

function assertCors(headers: Headers) {
  assert.equal(headers.get("access-control-allow-origin"), "*");
  assert.match(
    headers.get("access-control-allow-headers") ?? "",
    /authorization/,
  );
}

e2eTest(
  "presence-ping: no body gives online and the 200 body has exactly ok and user",
  async () => {
    const u = await stack.createUser({
      row: { correo: "x", auth_user_id: true },
    });
    const res = await invoke(u.client, "presence-ping");
    assert.equal(res.status, 200);
    assert.deepEqual(Object.keys(res.body).sort(), ["ok", "user"]);
    assert.equal(res.body.ok, true);
    assert.deepEqual(Object.keys(res.body.user).sort(), [
      "id",
      "presence_state",
      "ultimo_acceso",
    ]);
    assert.equal(res.body.user.id, u.rowId);
    assert.equal(typeof res.body.user.id, "number");
    assert.equal(res.body.user.presence_state, "online");
    assert.match(res.body.user.ultimo_acceso, ISO_MS_Z);
    assertCors(res.headers);
  },
);

e2eTest("presence-ping: body state offline sets offline", async () => {
  const u = await stack.createUser({ row: { auth_user_id: true } });
  const res = await invoke(u.client, "presence-ping", {
    body: { state: "offline" },
  });
  assert.equal(res.status, 200);
  assert.equal(res.body.user.presence_state, "offline");
  assert.equal((await row(u.rowId!)).presence_state, "offline");
});

e2eTest("presence-ping: query state is used without a body", async () => {
  const u = await stack.createUser({ row: { auth_user_id: true } });
  const res = await invoke(u.client, "presence-ping?state=offline");
  assert.equal(res.status, 200);
  assert.equal(res.body.user.presence_state, "offline");
});

e2eTest("presence-ping: body state wins over query state", async () => {
  const u = await stack.createUser({ row: { auth_user_id: true } });
  const a = await invoke(u.client, "presence-ping?state=offline", {
    body: { state: "online" },
  });
  assert.equal(a.body.user.presence_state, "online");
  const b = await invoke(u.client, "presence-ping?state=online", {
    body: { state: "offline" },
  });
  assert.equal(b.body.user.presence_state, "offline");
});

e2eTest(
  "presence-ping: an unknown or non-string state gives online",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    await invoke(u.client, "presence-ping", { body: { state: "offline" } });
    for (const state of ["away", 5, true, ["offline"], { s: "offline" }]) {
      const res = await invoke(u.client, "presence-ping?state=offline", {
        body: { state },
      });
      assert.equal(res.status, 200);
      assert.equal(
        res.body.user.presence_state,
        "online",
        JSON.stringify(state),
      );
    }
  },
);

e2eTest("presence-ping: state is trimmed and case-insensitive", async () => {
  const u = await stack.createUser({ row: { auth_user_id: true } });
  const res = await invoke(u.client, "presence-ping", {
    body: { state: "  OffLine " },
  });
  assert.equal(res.body.user.presence_state, "offline");
  const q = await invoke(u.client, "presence-ping?state=%20OFFLINE");
  assert.equal(q.body.user.presence_state, "offline");
});

e2eTest(
  "presence-ping: a body that is not JSON counts as a body without state",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const res = await call(stack.apiUrl, "presence-ping", {
      headers: {
        Authorization: `Bearer ${u.token}`,
        "Content-Type": "application/json",
      },
      body: "{not json",
    }, "?state=offline");
    assert.equal(res.status, 200);
    assert.equal(res.body.user.presence_state, "offline");
  },
);

e2eTest(
  "presence-ping: ultimo_acceso is the database clock in milliseconds, stored as returned",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const [{ before }] = await stack
      .sql`select date_trunc('milliseconds', now()) as before`;
    const res = await invoke(u.client, "presence-ping");
    const [{ after }] = await stack.sql`select now() as after`;
    const stored = (await row(u.rowId!)).ultimo_acceso as Date;
    assert.equal(res.body.user.ultimo_acceso, stored.toISOString());
    const returned = Date.parse(res.body.user.ultimo_acceso);
    assert.ok(
      returned >= (before as Date).getTime() &&
        returned <= (after as Date).getTime(),
    );
    const [{ micros }] = await stack.sql`
    select extract(microseconds from ultimo_acceso)::bigint % 1000 as micros
    from public.usuarios where id = ${u.rowId!}`;
    assert.equal(Number(micros), 0);
  },
);

e2eTest(
  "presence-ping: offline also sets last_manual_logout_at, online leaves it",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    await invoke(u.client, "presence-ping");
    assert.equal((await row(u.rowId!)).last_manual_logout_at, null);
    const off = await invoke(u.client, "presence-ping", {
      body: { state: "offline" },
    });
    const r = await row(u.rowId!);
    assert.equal(
      (r.last_manual_logout_at as Date).toISOString(),
      off.body.user.ultimo_acceso,
    );
    await invoke(u.client, "presence-ping", { body: { state: "online" } });
    assert.equal(
      ((await row(u.rowId!)).last_manual_logout_at as Date).toISOString(),
      off.body.user.ultimo_acceso,
    );
  },
);

e2eTest("presence-ping: auth_user_id is matched before correo", async () => {
  const u = await stack.createUser();
  const [byCorreo] = await stack.sql`
    insert into public.usuarios (correo) values (${u.email}) returning id`;
  const [byId] = await stack.sql`
    insert into public.usuarios (correo, auth_user_id)
    values (${"other-" + u.email}, ${u.id}) returning id`;
  const res = await invoke(u.client, "presence-ping");
  assert.equal(res.body.user.id, Number(byId.id));
  assert.equal((await row(Number(byCorreo.id))).presence_state, "offline");
});

e2eTest(
  "presence-ping: correo is matched before nombre_usuario = email",
  async () => {
    const u = await stack.createUser();
    const [byName] = await stack.sql`
    insert into public.usuarios (nombre_usuario) values (${u.email}) returning id`;
    const [byCorreo] = await stack.sql`
    insert into public.usuarios (correo) values (${u.email}) returning id`;
    const res = await invoke(u.client, "presence-ping");
    assert.equal(res.body.user.id, Number(byCorreo.id));
    assert.notEqual(res.body.user.id, Number(byName.id));
  },
);

e2eTest(
  "presence-ping: nombre_usuario = email is matched before the part before @",
  async () => {
    const u = await stack.createUser();
    const local = u.email.split("@")[0];
    const [byLocal] = await stack.sql`
    insert into public.usuarios (nombre_usuario) values (${local}) returning id`;
    const [byEmail] = await stack.sql`
    insert into public.usuarios (nombre_usuario) values (${u.email}) returning id`;
    const res = await invoke(u.client, "presence-ping");
    assert.equal(res.body.user.id, Number(byEmail.id));
    assert.notEqual(res.body.user.id, Number(byLocal.id));
  },
);

e2eTest(
  "presence-ping: nombre_usuario = the part before @ is matched last",
  async () => {
    const u = await stack.createUser();
    const [byLocal] = await stack.sql`
    insert into public.usuarios (nombre_usuario)
    values (${u.email.split("@")[0]}) returning id`;
    const res = await invoke(u.client, "presence-ping");
    assert.equal(res.status, 200);
    assert.equal(res.body.user.id, Number(byLocal.id));
  },
);

e2eTest(
  "presence-ping: emails and usernames compare case-insensitively",
  async () => {
    const u = await stack.createUser();
    const [r] = await stack.sql`
    insert into public.usuarios (correo) values (${u.email.toUpperCase()}) returning id`;
    const res = await invoke(u.client, "presence-ping");
    assert.equal(res.body.user.id, Number(r.id));
  },
);

e2eTest(
  "presence-ping: a row linked to another identity is never matched by email or username",
  async () => {
    const owner = await stack.createUser();
    const u = await stack.createUser();
    await stack.sql`
    insert into public.usuarios (correo, nombre_usuario, auth_user_id)
    values (${u.email}, ${u.email.split("@")[0]}, ${owner.id})`;
    const res = await invoke(u.client, "presence-ping");
    assert.equal(res.status, 404);
    assert.deepEqual(res.body, {
      message: "No se encontró el usuario en la tabla usuarios",
      code: "user_not_found",
    });
  },
);

e2eTest("presence-ping: no matching row gives 404", async () => {
  const u = await stack.createUser();
  const res = await invoke(u.client, "presence-ping");
  assert.equal(res.status, 404);
  assert.equal(res.body.code, "user_not_found");
  assertCors(res.headers);
});

e2eTest(
  "presence-ping: no Authorization header gives 401 missing_bearer",
  async () => {
    const res = await call(stack.apiUrl, "presence-ping");
    assert.equal(res.status, 401);
    assert.deepEqual(res.body, {
      message: "Authorization Bearer token requerido",
      code: "missing_bearer",
    });
    assert.equal(res.headers.get("www-authenticate"), "Bearer");
    assertCors(res.headers);
  },
);

e2eTest(
  "presence-ping: a header not starting with 'Bearer ' gives 401 missing_bearer",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    for (
      const value of [
        `Basic ${u.token}`,
        `bearer ${u.token}`,
        u.token,
        "Bearer ",
      ]
    ) {
      const res = await call(stack.apiUrl, "presence-ping", {
        headers: { Authorization: value },
      });
      assert.equal(res.status, 401, value.slice(0, 10));
      assert.equal(res.body.code, "missing_bearer");
    }
  },
);

e2eTest(
  "presence-ping: a token the provider rejects gives 401 Token inválido with its detail",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const [h, p] = u.token.split(".");
    const forged = `${h}.${p}.${"A".repeat(86)}`;
    const res = await call(stack.apiUrl, "presence-ping", {
      headers: { Authorization: `Bearer ${forged}` },
    });
    assert.equal(res.status, 401);
    assert.equal(res.body.message, "Token inválido");
    assert.equal(res.body.code, "invalid_token");
    assert.equal(typeof res.body.error, "string");
    assert.ok(res.body.error.length > 0);
    assert.equal(res.headers.get("www-authenticate"), "Bearer");
  },
);

e2eTest(
  "presence-ping: an expired token gives 401 with error exactly 'JWT expired'",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const now = Math.floor(Date.now() / 1000);
    const expired = await hs256Token(stack.apiUrl, u, {
      iat: now - 7200,
      exp: now - 60,
    });
    const res = await call(stack.apiUrl, "presence-ping", {
      headers: { Authorization: `Bearer ${expired}` },
    });
    assert.equal(res.status, 401);
    assert.equal(res.body.message, "Token inválido");
    assert.equal(res.body.error, "JWT expired");
  },
);

e2eTest(
  "presence-ping: the token of a signed-out session gives 401",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    assert.equal((await invoke(u.client, "presence-ping")).status, 200);
    const token = u.token;
    const { error } = await u.client.auth.signOut();
    assert.equal(error, null);
    const res = await call(stack.apiUrl, "presence-ping", {
      headers: { Authorization: `Bearer ${token}` },
    });
    assert.equal(res.status, 401);
    assert.equal(res.body.code, "invalid_token");
  },
);

e2eTest("presence-ping: the token of a deleted user gives 401", async () => {
  const u = await stack.createUser({ row: { auth_user_id: true } });
  const { error } = await stack.admin().auth.admin.deleteUser(u.id);
  assert.equal(error, null);
  const res = await call(stack.apiUrl, "presence-ping", {
    headers: { Authorization: `Bearer ${u.token}` },
  });
  assert.equal(res.status, 401);
  assert.equal(res.body.code, "invalid_token");
});

e2eTest("presence-ping: the token of a banned user gives 401", async () => {
  const u = await stack.createUser({ row: { auth_user_id: true } });
  const { error } = await stack.admin().auth.admin.updateUserById(u.id, {
    ban_duration: "24h",
  });
  assert.equal(error, null);
  const res = await call(stack.apiUrl, "presence-ping", {
    headers: { Authorization: `Bearer ${u.token}` },
  });
  assert.equal(res.status, 401);
  assert.equal(res.body.code, "invalid_token");
  assert.equal((await row(u.rowId!)).ultimo_acceso, null);
});

e2eTest(
  "presence-ping: methods other than POST give 405 with Allow",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    for (const method of ["GET", "PUT", "PATCH", "DELETE"]) {
      const res = await invoke(u.client, "presence-ping", {
        method: method as "GET",
      });
      assert.equal(res.status, 405, method);
      assert.deepEqual(res.body, {
        message: "Method Not Allowed",
        code: "method_not_allowed",
      });
      assert.equal(res.headers.get("allow"), "POST, OPTIONS");
      assertCors(res.headers);
    }
  },
);

e2eTest(
  "presence-ping: a CORS preflight gets 204 with CORS headers",
  async () => {
    const res = await fetch(`${stack.apiUrl}/functions/v1/presence-ping`, {
      method: "OPTIONS",
      headers: {
        Origin: "https://app.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
      },
    });
    await res.body?.cancel();
    assert.equal(res.status, 204);
    assertCors(res.headers);
    assert.equal(res.headers.get("access-control-allow-credentials"), null);
  },
);

e2eTest("presence-ping: a body over 64 KiB gives 413", async () => {
  const u = await stack.createUser({ row: { auth_user_id: true } });
  const res = await invoke(u.client, "presence-ping", {
    body: { state: "offline", pad: "x".repeat(70_000) },
  });
  assert.equal(res.status, 413);
  assert.equal(res.body.code, "payload_too_large");
  assert.equal((await row(u.rowId!)).ultimo_acceso, null);
});

/** Runs `work` with an app's BEFORE UPDATE trigger on usuarios doing `body`. */
async function withAppTrigger(body: string, work: () => Promise<void>) {
  await stack.sql.unsafe(`
    create function public.app_rule() returns trigger language plpgsql
    as $$ begin ${body} end $$;
    create trigger app_rule before update on public.usuarios
      for each row execute function public.app_rule()`);
  try {
    await work();
  } finally {
    await stack.sql.unsafe(`
      drop trigger app_rule on public.usuarios;
      drop function public.app_rule()`);
  }
}

e2eTest(
  "presence-ping: a serialization failure or a deadlock (here raised by the app's trigger) is 503 db_conflict with Retry-After, nothing written (appwrite M2)",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    for (const code of ["40001", "40P01"]) {
      await withAppTrigger(
        `raise exception 'conflict' using errcode = '${code}';`,
        async () => {
          const res = await invoke(u.client, "presence-ping");
          assert.equal(res.status, 503, JSON.stringify(res.body));
          assert.equal(res.body.code, "db_conflict");
          assert.equal(res.headers.get("retry-after"), "1");
          assert.match(res.body.error, new RegExp(`SQLSTATE ${code}`));
        },
      );
    }
    assert.equal((await row(u.rowId!)).ultimo_acceso, null);
  },
);

e2eTest(
  "presence-ping: where the app's own trigger leaves ultimo_acceso null (a privacy rule), the write stands and the answer says so: 200, ultimo_acceso null (appwrite L1)",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    await withAppTrigger(
      "new.ultimo_acceso := null; return new;",
      async () => {
        const res = await invoke(u.client, "presence-ping");
        assert.equal(res.status, 200, JSON.stringify(res.body));
        assert.deepEqual(res.body.user, {
          id: u.rowId,
          presence_state: "online",
          ultimo_acceso: null,
        });
      },
    );
    const stored = await row(u.rowId!);
    assert.equal(stored.presence_state, "online");
    assert.equal(stored.ultimo_acceso, null);
  },
);

if (Deno.env.get("TEST_DATABASE_URL")) {
  e2eTest(
    "presence-ping: on a database whose default isolation is repeatable read (the app's choice), a ping that meets the app's concurrent write of the row is 503 db_conflict with Retry-After, and its retry passes (appwrite M2)",
    async () => {
      const u = await stack.createUser({ row: { auth_user_id: true } });
      const [{ db }] = await stack.sql`select current_database() as db`;
      await stack.sql.unsafe(
        `alter database "${db}" set default_transaction_isolation = 'repeatable read'`,
      );
      await stack.reopenFunctionPools();
      try {
        let answered: Promise<Awaited<ReturnType<typeof invoke>>>;
        await stack.sql.begin(async (tx) => {
          await tx`update public.usuarios set rol = rol where id = ${u.rowId!}`;
          answered = invoke(u.client, "presence-ping");
          // The ping waits for the row (its lock_timeout is 1 s).
          await new Promise((r) => setTimeout(r, 300));
        });
        const res = await answered!;
        assert.equal(res.status, 503, JSON.stringify(res.body));
        assert.equal(res.body.code, "db_conflict");
        assert.equal(res.headers.get("retry-after"), "1");
        const again = await invoke(u.client, "presence-ping");
        assert.equal(again.status, 200, JSON.stringify(again.body));
      } finally {
        await stack.sql.unsafe(
          `alter database "${db}" reset default_transaction_isolation`,
        );
        await stack.reopenFunctionPools();
      }
    },
  );
}

closeStackAfterAll("presence-ping", stack);
