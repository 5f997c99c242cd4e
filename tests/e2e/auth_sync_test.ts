/**
 * auth-sync end to end: the real supabase-js client against the local stack
 * (PGlite, or PostgreSQL with TEST_DATABASE_URL), one test per rule of
 * docs/api.md "auth-sync" and docs/security.md "Administrator rights".
 *
 * Provider failures are simulated with a loopback proxy in front of the
 * stack's Auth that forwards everything but fails (or delays, or lets
 * through and then loses the answer to) the admin writes to
 * `/auth/v1/admin/users`; the function is served against it with
 * `withFunctionEnv({ SUPABASE_URL })`. Database failures after the provider
 * changed come from a test trigger that refuses `correo` values starting
 * with `explode-` once Auth holds them (so after the account changed, not
 * in auth-sync's trial write before it).
 */
import assert from "node:assert/strict";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { createClient } from "@supabase/supabase-js";
import {
  adminWriteProxy,
  authServerError,
  commitAnswerDroppingProxy,
  delayUnlessAborted,
  droppedConnection,
} from "../support/faults.ts";
import { call, invoke, type Invoked } from "../support/invoke.ts";
import { jsonLines, logLines } from "../support/logs.ts";
import {
  startTestStack,
  type TestStack,
  type TestUser,
} from "../support/stack.ts";
import { hs256Token } from "../support/tokens.ts";
import {
  LEASE_WAIT_MS,
  releaseLease,
  tryLease,
  withLease,
} from "../../supabase/functions/auth-sync/lease.ts";
import { ADMIN_STAMP } from "../../supabase/functions/_shared/email_proof.ts";
import { HttpError } from "../../supabase/functions/_shared/errors.ts";
import { LATEST_MIGRATION } from "../../supabase/functions/_shared/db_function.ts";

const BOSS_EMAIL = `boss-${crypto.randomUUID().slice(0, 8)}@test.local`;
const PENDING_EMAIL = `pending-${crypto.randomUUID().slice(0, 8)}@test.local`;

// Confirmations on: an email confirmed through its mailed link is then proof
// of the mailbox, and sync may link by it (security_test.ts covers the
// autoconfirm default). Accounts that must prove their address are created
// `confirmed: "by-mail"`; one created confirmed by the admin API stands for
// an account confirmed at once (as a sign-up while confirmations were off). The
// username strategy is on for every domain, so that rows reached through it
// are tested too.
const stack: TestStack = await startTestStack({
  emailConfirmations: true,
  functionEnv: {
    ADMIN_EMAILS: ` ${BOSS_EMAIL.toUpperCase()} , ${PENDING_EMAIL}`,
    USERNAME_MATCH_DOMAINS: "*",
  },
});

await stack.sql.unsafe(`
  create or replace function public.test_refuse_explode() returns trigger
  language plpgsql as $$
  begin
    -- Only once Auth holds the address: the write after the account
    -- changed fails, the trial write before it does not.
    if new.correo like 'explode-%' and exists (
      select 1 from auth.users a where lower(a.email) = lower(new.correo)
    ) then
      raise exception 'test trigger refuses this correo';
    end if;
    return new;
  end $$;
  create trigger test_refuse_explode before update on public.usuarios
    for each row execute function public.test_refuse_explode();
`);

/** Every password this file sends, to look for in audit rows at the end. */
const passwordsSent: string[] = [];

function pw(label: string): string {
  const password = `${label}-${crypto.randomUUID()}`;
  passwordsSent.push(password);
  return password;
}

function uniqueEmail(prefix = "u"): string {
  return `${prefix}-${crypto.randomUUID().slice(0, 10)}@test.local`;
}

/** An administrator by ADMIN_EMAILS, without a row. */
const boss: TestUser = await stack.createUser({
  email: BOSS_EMAIL,
  confirmed: "by-mail",
});

/** An administrator by rol, its row linked by auth_user_id. */
const admin: TestUser = await stack.createUser({
  row: { auth_user_id: true, rol: "admin" },
});

function authSync(user: TestUser, body: unknown): Promise<Invoked> {
  return invoke(user.client, "auth-sync", { body: body as object });
}

async function row(id: number) {
  const [r] = await stack.sql`
    select id, correo, nombre_usuario, auth_user_id::text, rol
    from public.usuarios where id = ${id}`;
  return r;
}

async function providerEmail(accountId: string): Promise<string | undefined> {
  const { data, error } = await stack.admin().auth.admin.getUserById(
    accountId,
  );
  if (error) throw error;
  return data.user.email;
}

async function canSignIn(email: string, password: string): Promise<boolean> {
  const { error } = await stack.anon().auth.signInWithPassword({
    email,
    password,
  });
  return error === null;
}

async function auditRows(targetId: number) {
  return await stack.sql`
    select actor_auth_user_id::text, actor_email, action, target_id, fields,
           outcome, detail
    from public.auth_sync_audit where target_id = ${targetId} order by id`;
}

/**
 * Serves the functions with `env` changed (e.g. `SUPABASE_URL` of a fault
 * proxy), runs `test` against them, and closes them and `proxies` however
 * the test ends.
 */
async function withServed(
  env: Record<string, string>,
  proxies: { close(): Promise<void> }[],
  test: (apiUrl: string) => Promise<void>,
): Promise<void> {
  const served = await stack.withFunctionEnv(env);
  try {
    await test(served.apiUrl);
  } finally {
    await served.close();
    for (const proxy of proxies) await proxy.close();
  }
}

/**
 * Auth and usuarios agree: the row's `correo` and its account's email are
 * both `email`; and the row's audit says `audit` (outcome, detail, fields).
 */
async function assertConverged(
  u: { id: string; rowId: number | null },
  email: string,
  audit: [string, string | null, string[]][],
): Promise<void> {
  assert.equal((await row(u.rowId!)).correo, email);
  assert.equal(await providerEmail(u.id), email);
  assert.deepEqual(
    (await auditRows(u.rowId!)).map((a) => [a.outcome, a.detail, a.fields]),
    audit,
  );
}

/** {@linkcode adminWriteProxy} in front of this file's stack. */
function authProxy(
  onWrite: Parameters<typeof adminWriteProxy>[1],
) {
  return adminWriteProxy(stack.apiUrl, onWrite);
}

/** Ways a proxy loses Auth's answer to a write it let through. */
const LOSSES = [
  "answers 500",
  "drops the connection",
  "answers after 10 s",
] as const;

/**
 * Lets the write through to Auth, then loses Auth's answer the `loss` way.
 * The 10 s answer comes after the functions' 5 s provider timeout.
 */
async function applyAndLose(
  loss: typeof LOSSES[number],
  req: Request,
  forward: () => Promise<Response>,
): Promise<Response> {
  const applied = await forward();
  assert.ok(applied.ok, `Auth refused the write: ${applied.status}`);
  await applied.body?.cancel();
  if (loss === "answers 500") {
    return authServerError("answer lost by test proxy");
  }
  if (loss === "drops the connection") return droppedConnection();
  await delayUnlessAborted(req, 10_000);
  return Response.json({}, { status: 200 });
}

/** Its first admin write: let through, its answer lost; later ones forwarded. */
function losingFirstWrite(loss: typeof LOSSES[number]) {
  let armed = true;
  return authProxy((req, forward) => {
    if (!armed) return Promise.resolve(null);
    armed = false;
    return applyAndLose(loss, req, forward);
  });
}

/**
 * A proxy that serves the function's token check, then stops listening:
 * the account change that follows finds the port closed (connection
 * refused), so it never leaves the function.
 */
function stoppingAfterTokenCheck() {
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    async (req) => {
      const url = new URL(req.url);
      const res = await fetch(`${stack.apiUrl}${url.pathname}${url.search}`, {
        method: req.method,
        headers: req.headers,
        body: req.body,
      });
      if (url.pathname !== "/auth/v1/user") return res;
      // Stops accepting at once; `Connection: close` keeps the function
      // from reusing this connection for its next call.
      server.shutdown();
      const headers = new Headers(res.headers);
      headers.set("Connection", "close");
      return new Response(res.body, { status: res.status, headers });
    },
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    close: () => server.finished,
  };
}

/** An update sent as `admin` to functions served at `apiUrl`. */
function updateVia(apiUrl: string, body: Record<string, unknown>) {
  return call(apiUrl, "auth-sync", {
    headers: {
      Authorization: `Bearer ${admin.token}`,
      "Content-Type": "application/json",
    },
    body: JSON.stringify({ action: "update", ...body }),
  });
}

/**
 * A served function's stderr, read as it comes: `listening` is the address
 * of Deno.serve's "Listening on" line, `seen()` what it has logged so far
 * (for a failure's message).
 */
function workerLog(stderr: ReadableStream<Uint8Array>) {
  let seen = "";
  let onListening!: (url: string) => void;
  let notListening!: (e: Error) => void;
  const listening = new Promise<string>((resolve, reject) => {
    onListening = resolve;
    notListening = reject;
  });
  (async () => {
    for await (const chunk of stderr.pipeThrough(new TextDecoderStream())) {
      seen += chunk;
      const url = /Listening on (http:\/\/[^/\s]+)/.exec(seen)?.[1];
      if (url) onListening(url);
    }
    notListening(new Error(`the worker never listened:\n${seen}`));
  })();
  return { listening, seen: () => seen };
}

/** A user whose row is linked and whose correo is its account's email. */
function linkedUser(prefix: string): Promise<TestUser> {
  const email = uniqueEmail(prefix);
  return stack.createUser({
    email,
    row: { auth_user_id: true, correo: email },
  });
}

// ---------------------------------------------------------------- requests

e2eTest("auth-sync: GET gives 405 with Allow: POST, OPTIONS", async () => {
  const res = await call(stack.apiUrl, "auth-sync", {
    method: "GET",
    headers: { Authorization: `Bearer ${admin.token}` },
  });
  assert.equal(res.status, 405);
  assert.equal(res.headers.get("allow"), "POST, OPTIONS");
  assert.deepEqual(res.body, {
    message: "Method Not Allowed",
    code: "method_not_allowed",
  });
});

e2eTest("auth-sync: a CORS preflight gets 204 with CORS headers", async () => {
  const res = await fetch(`${stack.apiUrl}/functions/v1/auth-sync`, {
    method: "OPTIONS",
    headers: {
      Origin: "https://app.example",
      "Access-Control-Request-Method": "POST",
    },
  });
  await res.body?.cancel();
  assert.equal(res.status, 204);
  assert.equal(res.headers.get("access-control-allow-origin"), "*");
});

e2eTest(
  "auth-sync: no Authorization header gives 401 with WWW-Authenticate",
  async () => {
    const res = await call(stack.apiUrl, "auth-sync", {
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ action: "sync" }),
    });
    assert.equal(res.status, 401);
    assert.equal(res.headers.get("www-authenticate"), "Bearer");
    assert.deepEqual(res.body, {
      message: "Authorization Bearer token requerido",
      code: "missing_bearer",
    });
  },
);

e2eTest(
  "auth-sync: a token the provider rejects gives 401 Token inválido",
  async () => {
    const res = await call(stack.apiUrl, "auth-sync", {
      headers: { Authorization: "Bearer not.a.token" },
      body: JSON.stringify({ action: "sync" }),
    });
    assert.equal(res.status, 401);
    assert.equal(res.body.message, "Token inválido");
    assert.equal(res.body.code, "invalid_token");
    assert.equal(typeof res.body.error, "string");
  },
);

// ------------------------------------------------------------------ rights

e2eTest(
  "auth-sync: an administrator by rol, row matched by auth_user_id, is allowed",
  async () => {
    const res = await authSync(admin, {
      action: "sync",
      ids: [admin.rowId],
      dry_run: true,
    });
    assert.equal(res.status, 200);
    assert.deepEqual(res.body, {
      ok: true,
      results: [{ id: admin.rowId, status: "in_sync", auth_user_id: admin.id }],
      summary: {
        linked: 0,
        in_sync: 1,
        no_identity: 0,
        conflict: 0,
        no_email: 0,
        invalid_email: 0,
        unverified: 0,
      },
      next_after_id: null,
    });
  },
);

e2eTest(
  "auth-sync: an administrator by rol whose row is matched by correo gets 403 until the row is linked",
  async () => {
    const email = uniqueEmail("bycorreo");
    const u = await stack.createUser({
      email,
      confirmed: "by-mail",
      row: { correo: email.toUpperCase(), rol: " Super-Admin " },
    });
    const refused = await authSync(u, {
      action: "sync",
      ids: [u.rowId],
      dry_run: true,
    });
    assert.equal(refused.status, 403);
    assert.equal(refused.body.code, "admin_required");
    const linked = await authSync(boss, { action: "sync", ids: [u.rowId] });
    assert.deepEqual(linked.body.results, [
      { id: u.rowId, status: "linked", auth_user_id: u.id },
    ]);
    const allowed = await authSync(u, {
      action: "sync",
      ids: [u.rowId],
      dry_run: true,
    });
    assert.equal(allowed.status, 200);
    assert.deepEqual(allowed.body.results, [
      { id: u.rowId, status: "in_sync", auth_user_id: u.id },
    ]);
  },
);

e2eTest(
  "auth-sync: a user whose email's local part is an administrator's username gets 403",
  async () => {
    const username = `jefe${crypto.randomUUID().slice(0, 8)}`;
    await stack.sql`
    insert into public.usuarios (nombre_usuario, rol)
    values (${username}, 'administrador')`;
    const outsider = await stack.createUser({
      email: `${username}@elsewhere.test`,
    });
    const res = await authSync(outsider, { action: "sync", dry_run: true });
    assert.equal(res.status, 403);
    assert.deepEqual(res.body, {
      message: "Acceso denegado (se requiere administrador)",
      code: "admin_required",
    });
  },
);

e2eTest("auth-sync: a user without administrator rights gets 403", async () => {
  const u = await stack.createUser({
    row: { auth_user_id: true, rol: "usuario" },
  });
  const res = await authSync(u, { action: "sync", dry_run: true });
  assert.equal(res.status, 403);
  assert.deepEqual(res.body, {
    message: "Acceso denegado (se requiere administrador)",
    code: "admin_required",
  });
});

e2eTest(
  "auth-sync: rights are checked before the body, so a non-administrator's bad JSON gets 403",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const res = await call(stack.apiUrl, "auth-sync", {
      headers: {
        Authorization: `Bearer ${u.token}`,
        "Content-Type": "application/json",
      },
      body: "{not json",
    });
    assert.equal(res.status, 403);
    assert.equal(res.body.code, "admin_required");
  },
);

e2eTest("auth-sync: an identity without a usuarios row gets 404", async () => {
  const u = await stack.createUser();
  const res = await authSync(u, { action: "sync", dry_run: true });
  assert.equal(res.status, 404);
  assert.deepEqual(res.body, {
    message: "No se encontró el usuario en la tabla usuarios",
    code: "user_not_found",
  });
});

e2eTest(
  "auth-sync: a confirmed email in ADMIN_EMAILS is an administrator without a row",
  async () => {
    const res = await authSync(boss, {
      action: "sync",
      ids: [admin.rowId],
      dry_run: true,
    });
    assert.equal(res.status, 200);
    assert.equal(res.body.ok, true);
    assert.deepEqual(res.body.results, [
      { id: admin.rowId, status: "in_sync", auth_user_id: admin.id },
    ]);
  },
);

e2eTest(
  "auth-sync: an unconfirmed email in ADMIN_EMAILS gives no rights",
  async () => {
    const pending = await stack.createUser({
      email: PENDING_EMAIL,
      confirmed: false,
    });
    const token = await hs256Token(stack.apiUrl, {
      id: pending.id,
      email: PENDING_EMAIL,
    });
    const res = await call(stack.apiUrl, "auth-sync", {
      headers: {
        Authorization: `Bearer ${token}`,
        "Content-Type": "application/json",
      },
      body: JSON.stringify({ action: "sync", dry_run: true }),
    });
    assert.equal(res.status, 404);
    assert.deepEqual(res.body, {
      message: "No se encontró el usuario en la tabla usuarios",
      code: "user_not_found",
    });
  },
);

e2eTest(
  "auth-sync: where Auth confirms by mail, an ADMIN_EMAILS account confirmed without a mail (as a sign-up while confirmations were off leaves it) is no administrator until an operator stamps it",
  async () => {
    const [account] = await stack.sql`
      select id::text from auth.users where email = ${PENDING_EMAIL}`;
    assert.ok(account, "the previous test created the pending account");
    // Confirmed after its creation with no confirmation mail before it:
    // what Auth leaves when a stranger signs up first with the address
    // while confirmations are off (signup.go user.Confirm), and keeps after
    // they are turned on.
    const password = `Pw-${crypto.randomUUID()}`;
    const confirmed = await stack.admin().auth.admin.updateUserById(
      account.id,
      { email_confirm: true, password },
    );
    assert.equal(confirmed.error, null);
    const [mailed] = await stack.sql`
      select confirmation_sent_at from auth.users where id = ${account.id}`;
    assert.equal(mailed.confirmation_sent_at, null);
    const client = stack.anon();
    const signIn = await client.auth.signInWithPassword({
      email: PENDING_EMAIL,
      password,
    });
    assert.equal(signIn.error, null);
    const body = { action: "sync", ids: [admin.rowId], dry_run: true };
    const refused = await invoke(client, "auth-sync", { body });
    assert.equal(refused.status, 404);
    assert.equal(refused.body.code, "user_not_found");

    // The operator's word: the stamp, written with the service role.
    const stamped = await stack.admin().auth.admin.updateUserById(
      account.id,
      { app_metadata: { [ADMIN_STAMP]: PENDING_EMAIL } },
    );
    assert.equal(stamped.error, null);
    await client.auth.refreshSession();
    const res = await invoke(client, "auth-sync", { body });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body.results, [
      { id: admin.rowId, status: "in_sync", auth_user_id: admin.id },
    ]);
  },
);

// -------------------------------------------------------------------- body

e2eTest("auth-sync: a body that is not JSON gives 400 bad_json", async () => {
  const res = await call(stack.apiUrl, "auth-sync", {
    headers: {
      Authorization: `Bearer ${admin.token}`,
      "Content-Type": "application/json",
    },
    body: '{"action": "sync",',
  });
  assert.equal(res.status, 400);
  assert.deepEqual(res.body, { message: "JSON inválido", code: "bad_json" });
});

e2eTest(
  "auth-sync: a body failing the schema gives 400 validation_failed with issues and no password",
  async () => {
    const password = pw("too-long") + "x".repeat(40);
    passwordsSent.push(password);
    const res = await authSync(admin, {
      action: "update",
      id: -3,
      email: "nope",
      password,
    });
    assert.equal(res.status, 400);
    assert.equal(res.body.message, "Solicitud inválida");
    assert.equal(res.body.code, "validation_failed");
    assert.deepEqual(
      res.body.issues.map((i: { path: unknown[] }) => i.path),
      [["id"], ["email"], ["password"]],
    );
    for (const issue of res.body.issues) {
      assert.equal(typeof issue.message, "string");
    }
    assert.ok(!JSON.stringify(res.body).includes(password));

    const none = await authSync(admin, { action: "update", id: 1 });
    assert.equal(none.status, 400);
    assert.deepEqual(none.body.issues, [{
      path: [],
      message: "At least one of email, password or nombre_usuario is required",
    }]);

    const unknown = await authSync(admin, { action: "rename" });
    assert.equal(unknown.status, 400);
    assert.deepEqual(
      unknown.body.issues.map((i: { path: unknown[] }) => i.path),
      [["action"]],
    );
  },
);

e2eTest(
  "auth-sync: a NUL character in nombre_usuario, email or password gives 400 validation_failed and changes nothing",
  async () => {
    const u = await linkedUser("nul");
    const before = await row(u.rowId!);
    for (
      const [field, value] of [
        ["nombre_usuario", "a\u0000b"],
        ["email", "nul\u0000@test.local"],
        ["password", "pw-\u0000-nul"],
      ] as const
    ) {
      const res = await authSync(admin, {
        action: "update",
        id: u.rowId,
        [field]: value,
      });
      assert.equal(res.status, 400, field);
      assert.deepEqual(res.body, {
        message: "Solicitud inválida",
        code: "validation_failed",
        issues: [{
          path: [field],
          message: "Must not contain the NUL character (U+0000)",
        }],
      });
    }
    assert.deepEqual(await row(u.rowId!), before);
    assert.equal(await providerEmail(u.id), u.email);
    assert.equal(await canSignIn(u.email, u.password), true);
    // Refused before anything was tried: no audit row.
    assert.equal((await auditRows(u.rowId!)).length, 0);
  },
);

// ------------------------------------------------------------------ update

e2eTest(
  "auth-sync: update email moves sign-in to the new email and changes correo",
  async () => {
    const email = uniqueEmail("before");
    const u = await stack.createUser({
      email,
      row: { auth_user_id: true, correo: email },
    });
    const newEmail = uniqueEmail("moved");
    const res = await authSync(admin, {
      action: "update",
      id: u.rowId,
      email: ` ${newEmail.toUpperCase()} `,
    });
    assert.equal(res.status, 200);
    assert.deepEqual(res.body, {
      ok: true,
      user: {
        id: u.rowId,
        correo: newEmail,
        nombre_usuario: null,
        auth_user_id: u.id,
        rol: "usuario",
      },
      changed: ["email"],
      identity_created: false,
    });
    assert.equal((await row(u.rowId!)).correo, newEmail);
    assert.equal(await providerEmail(u.id), newEmail);
    assert.equal(await canSignIn(newEmail, u.password), true);
    assert.equal(await canSignIn(u.email, u.password), false);
    const audit = await auditRows(u.rowId!);
    assert.deepEqual(audit.map((a) => ({ ...a })), [{
      actor_auth_user_id: admin.id,
      actor_email: admin.email,
      action: "update",
      target_id: String(u.rowId),
      fields: ["email"],
      outcome: "ok",
      detail: null,
    }]);
  },
);

e2eTest(
  "auth-sync: update password makes the old one fail and the new one work",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const password = pw("new");
    const res = await authSync(admin, {
      action: "update",
      id: u.rowId,
      password,
    });
    assert.equal(res.status, 200);
    assert.deepEqual(res.body.changed, ["password"]);
    assert.equal(res.body.identity_created, false);
    assert.ok(!JSON.stringify(res.body).includes(password));
    assert.equal(await canSignIn(u.email, u.password), false);
    assert.equal(await canSignIn(u.email, password), true);
  },
);

e2eTest(
  "auth-sync: on a database the newest migration was not applied to (the audit's and intents' actor_key), update answers 500 migration_missing naming it, and changes nothing at Auth or in the row",
  async () => {
    const u = await stack.createUser({
      row: { auth_user_id: true, nombre_usuario: "before-name" },
    });
    const { sql } = stack;
    await sql`alter table public.auth_sync_intents drop column actor_key`;
    await sql`alter table public.auth_sync_audit drop column actor_key`;
    try {
      for (
        const change of [
          { nombre_usuario: "after-name" },
          { email: `moved-${crypto.randomUUID().slice(0, 8)}@test.local` },
        ]
      ) {
        const res = await authSync(admin, {
          action: "update",
          id: u.rowId,
          ...change,
        });
        assert.deepEqual(
          [res.status, res.body.code],
          [500, "migration_missing"],
          JSON.stringify(res.body),
        );
        assert.equal(
          res.body.error,
          `undefined column (SQLSTATE 42703): apply the migrations up to ${LATEST_MIGRATION}`,
        );
      }
      const [row] = await sql`select nombre_usuario, correo
                              from public.usuarios where id = ${u.rowId!}`;
      assert.deepEqual({ ...row }, {
        nombre_usuario: "before-name",
        correo: null,
      });
      assert.equal(await providerEmail(u.id), u.email);
    } finally {
      await sql`alter table public.auth_sync_audit
                add column if not exists actor_key text`;
      await sql`alter table public.auth_sync_intents
                add column if not exists actor_key text`;
    }
  },
);

e2eTest("auth-sync: update nombre_usuario changes only the row", async () => {
  const u = await stack.createUser({
    row: { auth_user_id: true, nombre_usuario: "old-name" },
  });
  const name = `name-${crypto.randomUUID().slice(0, 8)}`;
  const res = await authSync(admin, {
    action: "update",
    id: u.rowId,
    nombre_usuario: ` ${name} `,
  });
  assert.equal(res.status, 200);
  assert.deepEqual(res.body.user, {
    id: u.rowId,
    correo: null,
    nombre_usuario: name,
    auth_user_id: u.id,
    rol: "usuario",
  });
  assert.deepEqual(res.body.changed, ["nombre_usuario"]);
  assert.equal(await providerEmail(u.id), u.email);
});

e2eTest(
  "auth-sync: a username already taken gives 409 and changes nothing",
  async () => {
    const taken = `taken-${crypto.randomUUID().slice(0, 8)}`;
    await stack.createUser({ row: { nombre_usuario: taken } });
    const u = await stack.createUser({
      row: { auth_user_id: true, nombre_usuario: "mine" + taken },
    });
    const before = await row(u.rowId!);
    const res = await authSync(admin, {
      action: "update",
      id: u.rowId,
      nombre_usuario: taken.toUpperCase(),
      email: uniqueEmail("never"),
      password: pw("never"),
    });
    assert.equal(res.status, 409);
    assert.deepEqual(res.body, {
      message: "El nombre de usuario ya está en uso",
      code: "username_exists",
    });
    assert.deepEqual(await row(u.rowId!), before);
    assert.equal(await providerEmail(u.id), u.email);
    assert.equal(await canSignIn(u.email, u.password), true);
    const audit = await auditRows(u.rowId!);
    assert.deepEqual(audit.map((a) => [a.outcome, a.detail, a.fields]), [
      ["failed", "username_exists", ["email", "password", "nombre_usuario"]],
    ]);
  },
);

e2eTest(
  "auth-sync: an email already in another row gives 409 and changes nothing",
  async () => {
    const other = uniqueEmail("other");
    await stack.createUser({ email: other, row: { correo: other } });
    const u = await stack.createUser({
      row: { auth_user_id: true, correo: "x-" + other },
    });
    const before = await row(u.rowId!);
    const res = await authSync(admin, {
      action: "update",
      id: u.rowId,
      email: other.toUpperCase(),
    });
    assert.equal(res.status, 409);
    assert.deepEqual(res.body, {
      message: "El correo ya está en uso",
      code: "email_exists",
    });
    assert.deepEqual(await row(u.rowId!), before);
    assert.equal(await providerEmail(u.id), u.email);
  },
);

e2eTest(
  "auth-sync: an email of another provider account gives 409 and changes nothing",
  async () => {
    const loner = await stack.createUser();
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const before = await row(u.rowId!);
    const res = await authSync(admin, {
      action: "update",
      id: u.rowId,
      email: loner.email,
    });
    assert.equal(res.status, 409);
    assert.equal(res.body.code, "email_exists");
    assert.deepEqual(await row(u.rowId!), before);
    assert.equal(await providerEmail(u.id), u.email);
  },
);

e2eTest(
  "auth-sync: a password the provider finds weak gives 422 and changes nothing",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const before = await row(u.rowId!);
    const res = await authSync(admin, {
      action: "update",
      id: u.rowId,
      password: "12",
      nombre_usuario: `weak-${crypto.randomUUID().slice(0, 8)}`,
    });
    assert.equal(res.status, 422);
    assert.equal(res.body.message, "La contraseña es demasiado débil");
    assert.equal(res.body.code, "weak_password");
    assert.equal(typeof res.body.error, "string");
    assert.deepEqual(res.body.reasons, ["length"]);
    assert.deepEqual(await row(u.rowId!), before);
    assert.equal(await canSignIn(u.email, u.password), true);
  },
);

e2eTest(
  "auth-sync: update of a row that does not exist gives 404 target_not_found",
  async () => {
    const res = await authSync(admin, {
      action: "update",
      id: 987654321,
      nombre_usuario: "ghost",
    });
    assert.equal(res.status, 404);
    assert.deepEqual(res.body, {
      message: "No se encontró el usuario indicado",
      code: "target_not_found",
    });
  },
);

e2eTest(
  "auth-sync: a row with no account gets one created and linked, and can sign in",
  async () => {
    const email = uniqueEmail("fresh");
    const [inserted] = await stack.sql`
    insert into public.usuarios (correo, nombre_usuario)
    values (${email}, 'fresh') returning id`;
    const id = Number(inserted.id);
    const password = pw("created");
    const res = await authSync(admin, { action: "update", id, password });
    assert.equal(res.status, 200);
    assert.equal(res.body.ok, true);
    assert.equal(res.body.identity_created, true);
    assert.deepEqual(res.body.changed, ["password", "auth_user_id"]);
    const accountId = res.body.user.auth_user_id;
    assert.match(accountId, /^[0-9a-f-]{36}$/);
    assert.deepEqual(res.body.user, {
      id,
      correo: email,
      nombre_usuario: "fresh",
      auth_user_id: accountId,
      rol: "usuario",
    });
    assert.equal((await row(id)).auth_user_id, accountId);
    assert.equal(await providerEmail(accountId), email);
    assert.equal(await canSignIn(email, password), true);
  },
);

e2eTest(
  "auth-sync: a row with no account and no password gives 400 and creates nothing",
  async () => {
    const [inserted] = await stack.sql`
    insert into public.usuarios (correo) values (${uniqueEmail("nopw")})
    returning id`;
    const id = Number(inserted.id);
    const newEmail = uniqueEmail("nopw-new");
    const res = await authSync(admin, {
      action: "update",
      id,
      email: newEmail,
    });
    assert.equal(res.status, 400);
    assert.equal(res.body.code, "validation_failed");
    assert.deepEqual(res.body.issues.map((i: { path: unknown[] }) => i.path), [[
      "password",
    ]]);
    const { data } = await stack.admin().auth.admin.listUsers({
      perPage: 1000,
    });
    assert.ok(!data.users.some((user) => user.email === newEmail));
    assert.equal((await row(id)).auth_user_id, null);
  },
);

e2eTest(
  "auth-sync: an unlinked row whose correo has an account updates and links that account",
  async () => {
    const email = uniqueEmail("unlinked");
    const u = await stack.createUser({
      email,
      confirmed: "by-mail",
      row: { correo: email },
    });
    const password = pw("linked");
    const res = await authSync(admin, {
      action: "update",
      id: u.rowId,
      password,
    });
    assert.equal(res.status, 200);
    assert.equal(res.body.identity_created, false);
    assert.deepEqual(res.body.changed, ["password", "auth_user_id"]);
    assert.equal(res.body.user.auth_user_id, u.id);
    assert.equal((await row(u.rowId!)).auth_user_id, u.id);
    assert.equal(await canSignIn(u.email, password), true);
  },
);

// ---------------------------------------------------------------- failures

e2eTest(
  "auth-sync: a provider down during the update gives 503 and changes nothing",
  async () => {
    const proxy = authProxy(() =>
      Promise.resolve(
        Response.json({ code: 503, msg: "unavailable" }, { status: 503 }),
      )
    );
    await withServed({ SUPABASE_URL: proxy.url }, [proxy], async (apiUrl) => {
      const u = await stack.createUser({ row: { auth_user_id: true } });
      const before = await row(u.rowId!);
      const res = await updateVia(apiUrl, {
        id: u.rowId,
        email: uniqueEmail("down"),
        nombre_usuario: "down",
      });
      assert.equal(res.status, 503);
      assert.deepEqual(res.body, {
        message: "Proveedor de identidad no disponible",
        code: "idp_unavailable",
      });
      assert.equal(res.headers.get("retry-after"), "5");
      assert.deepEqual(await row(u.rowId!), before);
      assert.equal(await providerEmail(u.id), u.email);
      const audit = await auditRows(u.rowId!);
      assert.deepEqual(audit.map((a) => [a.outcome, a.detail]), [
        ["failed", "idp_unavailable"],
      ]);
    });
  },
);

for (const loss of LOSSES) {
  e2eTest(
    `auth-sync: a provider that changes the email and then ${loss} has it set back: 503, row and account keep the old email`,
    async () => {
      const proxy = losingFirstWrite(loss);
      await withServed({ SUPABASE_URL: proxy.url }, [proxy], async (apiUrl) => {
        const u = await linkedUser("lost-email");
        const before = await row(u.rowId!);
        const res = await updateVia(apiUrl, {
          id: u.rowId,
          email: uniqueEmail("never"),
        });
        assert.equal(res.status, 503);
        assert.deepEqual(res.body, {
          message: "Proveedor de identidad no disponible",
          code: "idp_unavailable",
        });
        assert.equal(res.headers.get("retry-after"), "5");
        assert.deepEqual(await row(u.rowId!), before);
        assert.equal(await providerEmail(u.id), u.email);
        assert.equal(await canSignIn(u.email, u.password), true);
        const audit = await auditRows(u.rowId!);
        assert.deepEqual(audit.map((a) => [a.outcome, a.detail, a.fields]), [
          ["failed", "idp_unavailable_undone", ["email"]],
        ]);
      });
    },
  );

  e2eTest(
    `auth-sync: a provider that changes the password and then ${loss} gives 500 partial_failure, audited`,
    async () => {
      const proxy = losingFirstWrite(loss);
      await withServed({ SUPABASE_URL: proxy.url }, [proxy], async (apiUrl) => {
        const u = await linkedUser("lost-password");
        const before = await row(u.rowId!);
        const password = pw("lost");
        const res = await updateVia(apiUrl, { id: u.rowId, password });
        assert.equal(res.status, 500);
        assert.equal(
          res.body.message,
          "Cambio aplicado en el proveedor de identidad pero no en la base de datos",
        );
        assert.equal(res.body.code, "partial_failure");
        assert.deepEqual(res.body.provider_changed, ["password"]);
        assert.equal(res.body.provider_state, undefined);
        assert.match(res.body.error, /answer to the account change was lost/);
        assert.ok(!JSON.stringify(res.body).includes(password));
        assert.deepEqual(await row(u.rowId!), before);
        // The password did change: the answer says so.
        assert.equal(await providerEmail(u.id), u.email);
        assert.equal(await canSignIn(u.email, password), true);
        const audit = await auditRows(u.rowId!);
        assert.deepEqual(audit.map((a) => [a.outcome, a.detail, a.fields]), [
          ["partial_failure", "idp_answer_lost:password", ["password"]],
        ]);
      });
    },
  );
}

e2eTest(
  "auth-sync: a lost answer to an email, password and username change sets the email back and reports the password",
  async () => {
    const proxy = losingFirstWrite("answers 500");
    await withServed({ SUPABASE_URL: proxy.url }, [proxy], async (apiUrl) => {
      const u = await linkedUser("lost-all");
      const before = await row(u.rowId!);
      const password = pw("lost-all");
      const res = await updateVia(apiUrl, {
        id: u.rowId,
        email: uniqueEmail("never"),
        password,
        nombre_usuario: `never-${u.rowId}`,
      });
      assert.equal(res.status, 500);
      assert.equal(res.body.code, "partial_failure");
      assert.deepEqual(res.body.provider_changed, ["password"]);
      assert.deepEqual(await row(u.rowId!), before);
      assert.equal(await providerEmail(u.id), u.email);
      assert.equal(await canSignIn(u.email, password), true);
      const audit = await auditRows(u.rowId!);
      assert.deepEqual(audit.map((a) => [a.outcome, a.detail, a.fields]), [
        [
          "partial_failure",
          "idp_answer_lost:password",
          ["email", "password", "nombre_usuario"],
        ],
      ]);
    });
  },
);

e2eTest(
  "auth-sync: an email change whose answer is lost and whose undo fails gives 500 partial_failure with provider_changed email; the next update settles its intent",
  async () => {
    // The first PUT is applied and its answer lost; every later one (the
    // undo) is answered 500 without reaching Auth.
    let first = true;
    const proxy = authProxy((req, forward) => {
      if (first) {
        first = false;
        return applyAndLose("answers 500", req, forward);
      }
      return Promise.resolve(
        Response.json({ code: 500, msg: "down" }, { status: 500 }),
      );
    });
    await withServed({ SUPABASE_URL: proxy.url }, [proxy], async (apiUrl) => {
      const u = await linkedUser("lost-undo");
      const before = await row(u.rowId!);
      const newEmail = uniqueEmail("stuck");
      const res = await updateVia(apiUrl, {
        id: u.rowId,
        email: newEmail,
      });
      assert.equal(res.status, 500);
      assert.equal(res.body.code, "partial_failure");
      assert.deepEqual(res.body.provider_changed, ["email"]);
      assert.equal(typeof res.body.error, "string");
      // Row and account differ, and the answer and the audit say so.
      assert.deepEqual(await row(u.rowId!), before);
      assert.equal(await providerEmail(u.id), newEmail);
      const audit = await auditRows(u.rowId!);
      assert.deepEqual(audit.map((a) => [a.outcome, a.detail, a.fields]), [
        ["partial_failure", "idp_answer_lost:email", ["email"]],
      ]);
      // The intent stays open; the row's next update settles it first: the
      // row follows the account, which holds what the lost call set.
      const name = `next-${u.rowId}`;
      const next = await authSync(admin, {
        action: "update",
        id: u.rowId,
        nombre_usuario: name,
      });
      assert.equal(next.status, 200);
      assert.equal(next.body.user.correo, newEmail);
      assert.equal(next.body.user.nombre_usuario, name);
      await assertConverged(u, newEmail, [
        ["partial_failure", "idp_answer_lost:email", ["email"]],
        ["ok", "settled_applied", ["email"]],
        ["ok", null, ["nombre_usuario"]],
      ]);
    });
  },
);

e2eTest(
  "auth-sync: an account creation whose answer is lost deletes the account again: 503 and nothing created",
  async () => {
    const proxy = losingFirstWrite("answers 500");
    await withServed({ SUPABASE_URL: proxy.url }, [proxy], async (apiUrl) => {
      const [inserted] = await stack.sql`
        insert into public.usuarios (correo) values (${uniqueEmail("lost-new")})
        returning id`;
      const id = Number(inserted.id);
      const before = await row(id);
      const email = uniqueEmail("lost-created");
      const res = await updateVia(apiUrl, {
        id,
        email,
        password: pw("lost-created"),
      });
      assert.equal(res.status, 503);
      assert.deepEqual(res.body, {
        message: "Proveedor de identidad no disponible",
        code: "idp_unavailable",
      });
      assert.deepEqual(await row(id), before);
      const { data } = await stack.admin().auth.admin.listUsers({
        perPage: 1000,
      });
      assert.ok(!data.users.some((user) => user.email === email));
      const audit = await auditRows(id);
      assert.deepEqual(audit.map((a) => [a.outcome, a.detail, a.fields]), [
        ["failed", "idp_unavailable_undone", ["email", "password"]],
      ]);
    });
  },
);

e2eTest(
  "auth-sync: a change that never reaches the provider (connection refused) gives 503 and changes nothing, a password included",
  async () => {
    const proxy = stoppingAfterTokenCheck();
    await withServed({ SUPABASE_URL: proxy.url }, [proxy], async (apiUrl) => {
      const u = await linkedUser("refused");
      const before = await row(u.rowId!);
      const password = pw("refused");
      const res = await updateVia(apiUrl, {
        id: u.rowId,
        email: uniqueEmail("never"),
        password,
      });
      assert.equal(res.status, 503);
      assert.deepEqual(res.body, {
        message: "Proveedor de identidad no disponible",
        code: "idp_unavailable",
      });
      assert.equal(res.headers.get("retry-after"), "5");
      assert.deepEqual(await row(u.rowId!), before);
      assert.equal(await providerEmail(u.id), u.email);
      assert.equal(await canSignIn(u.email, u.password), true);
      assert.equal(await canSignIn(u.email, password), false);
      const audit = await auditRows(u.rowId!);
      assert.deepEqual(audit.map((a) => [a.outcome, a.detail, a.fields]), [
        ["failed", "idp_unavailable", ["email", "password"]],
      ]);
    });
  },
);

e2eTest(
  "auth-sync: a provider refusing the update for another reason gives 502 and changes nothing",
  async () => {
    const proxy = authProxy(() =>
      Promise.resolve(
        Response.json({
          code: 400,
          error_code: "unexpected_refusal",
          msg: "refused by test proxy",
        }, { status: 400 }),
      )
    );
    await withServed({ SUPABASE_URL: proxy.url }, [proxy], async (apiUrl) => {
      const u = await stack.createUser({ row: { auth_user_id: true } });
      const before = await row(u.rowId!);
      const res = await updateVia(apiUrl, {
        id: u.rowId,
        password: pw("refused"),
        nombre_usuario: "refused",
      });
      assert.equal(res.status, 502);
      assert.deepEqual(res.body, {
        message: "Error del proveedor de identidad",
        code: "idp_error",
        error: "refused by test proxy",
        error_code: "unexpected_refusal",
      });
      assert.deepEqual(await row(u.rowId!), before);
      assert.equal(await canSignIn(u.email, u.password), true);
    });
  },
);

e2eTest(
  "auth-sync: a value the row itself refuses (an adopted table's varchar(100)) is 422 row_refused before Auth changes anything, with or without a password",
  async () => {
    await stack.sql`
      alter table public.usuarios alter column nombre_usuario type varchar(100)`;
    try {
      const u = await linkedUser("narrow");
      const before = await row(u.rowId!);
      const long = `long-${"x".repeat(115)}`;
      const password = pw("never-set");
      for (
        const body of [
          { nombre_usuario: long },
          { nombre_usuario: long, password },
          { nombre_usuario: long, email: uniqueEmail("never") },
        ]
      ) {
        const res = await authSync(admin, {
          action: "update",
          id: u.rowId,
          ...body,
        });
        assert.equal(res.status, 422, JSON.stringify(res.body));
        assert.deepEqual(res.body, {
          message: "La base de datos rechaza esos valores",
          code: "row_refused",
          error: "database error class 22 (SQLSTATE 22001)",
        });
      }
      assert.deepEqual(await row(u.rowId!), before);
      assert.equal(await providerEmail(u.id), u.email);
      assert.equal(await canSignIn(u.email, u.password), true);
      assert.equal(await canSignIn(u.email, password), false);
      assert.deepEqual(
        (await auditRows(u.rowId!)).map((a) => [a.outcome, a.detail]),
        [
          ["failed", "row_refused"],
          ["failed", "row_refused"],
          ["failed", "row_refused"],
        ],
      );
    } finally {
      await stack.sql`
        alter table public.usuarios alter column nombre_usuario type text`;
    }
  },
);

// PostgreSQL only: PGlite is one session, where a held lock holds everyone.
if (Deno.env.get("TEST_DATABASE_URL")) {
  e2eTest(
    "auth-sync: while the app's own transaction holds the row, an email or username change is 503 db_timeout before Auth changes anything, and a password change does not wait for it",
    async () => {
      const u = await linkedUser("app-holds");
      const before = await row(u.rowId!);
      const holder = await stack.sql.reserve();
      try {
        // The app's own UPDATE, its transaction still open.
        await holder`begin`;
        await holder`update public.usuarios set rol = rol where id = ${u.rowId}`;
        for (
          const body of [
            { nombre_usuario: `held-${u.rowId}` },
            { email: uniqueEmail("held"), password: pw("held") },
          ]
        ) {
          const res = await authSync(admin, {
            action: "update",
            id: u.rowId,
            ...body,
          });
          assert.equal(res.status, 503, JSON.stringify(res.body));
          assert.equal(res.body.code, "db_timeout");
          assert.equal(res.headers.get("retry-after"), "1");
        }
        assert.equal(await providerEmail(u.id), u.email);
        assert.equal(await canSignIn(u.email, u.password), true);
        const password = pw("not-waiting");
        const res = await authSync(admin, {
          action: "update",
          id: u.rowId,
          password,
        });
        assert.equal(res.status, 200, JSON.stringify(res.body));
        assert.deepEqual(res.body.changed, ["password"]);
        assert.equal(await canSignIn(u.email, password), true);
      } finally {
        await holder`rollback`;
        holder.release();
      }
      assert.deepEqual(await row(u.rowId!), before);
    },
  );
}

e2eTest(
  "auth-sync: a database failure after an email change sets the email back at the provider",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const before = await row(u.rowId!);
    const res = await authSync(admin, {
      action: "update",
      id: u.rowId,
      email: uniqueEmail("explode"),
    });
    assert.equal(res.status, 500);
    assert.equal(res.body.message, "Error sincronizando usuarios");
    assert.equal(res.body.code, "sync_failed");
    assert.equal(res.body.error, "database error class P0 (SQLSTATE P0001)");
    assert.deepEqual(await row(u.rowId!), before);
    assert.equal(await providerEmail(u.id), u.email);
    assert.equal(await canSignIn(u.email, u.password), true);
    const audit = await auditRows(u.rowId!);
    assert.deepEqual(audit.map((a) => [a.outcome, a.detail]), [
      ["failed", "sync_failed"],
    ]);
  },
);

e2eTest(
  "auth-sync: a database failure after a password change is reported as partial_failure and audited",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const before = await row(u.rowId!);
    const password = pw("partial");
    const res = await authSync(admin, {
      action: "update",
      id: u.rowId,
      email: uniqueEmail("explode"),
      password,
    });
    assert.equal(res.status, 500);
    assert.equal(
      res.body.message,
      "Cambio aplicado en el proveedor de identidad pero no en la base de datos",
    );
    assert.equal(res.body.code, "partial_failure");
    assert.deepEqual(res.body.provider_changed, ["password"]);
    assert.ok(!JSON.stringify(res.body).includes(password));
    assert.deepEqual(await row(u.rowId!), before);
    // The email was set back; the password could not be.
    assert.equal(await providerEmail(u.id), u.email);
    assert.equal(await canSignIn(u.email, password), true);
    const audit = await auditRows(u.rowId!);
    assert.deepEqual(audit.map((a) => [a.outcome, a.detail, a.fields]), [
      ["partial_failure", "partial_failure", ["email", "password"]],
    ]);
  },
);

e2eTest(
  "auth-sync: a database failure after creating an account deletes that account again",
  async () => {
    const [inserted] = await stack.sql`
    insert into public.usuarios (correo) values (${uniqueEmail("orphan")})
    returning id`;
    const id = Number(inserted.id);
    const email = uniqueEmail("explode");
    const res = await authSync(admin, {
      action: "update",
      id,
      email,
      password: pw("orphan"),
    });
    assert.equal(res.status, 500);
    assert.equal(res.body.code, "sync_failed");
    assert.equal((await row(id)).auth_user_id, null);
    const { data } = await stack.admin().auth.admin.listUsers({
      perPage: 1000,
    });
    assert.ok(!data.users.some((user) => user.email === email));
  },
);

e2eTest(
  "auth-sync: two concurrent updates of one row both land, in order",
  async () => {
    // The first update's provider call is held for a second, so the second
    // request certainly arrives while the first is under way.
    const proxy = authProxy(async () => {
      await new Promise((r) => setTimeout(r, 1000));
      return null;
    });
    await withServed({ SUPABASE_URL: proxy.url }, [proxy], async (apiUrl) => {
      const u = await stack.createUser({ row: { auth_user_id: true } });
      const send = (email: string, name: string) =>
        updateVia(apiUrl, {
          id: u.rowId,
          email,
          nombre_usuario: name,
        });
      const first = uniqueEmail("first");
      const second = uniqueEmail("second");
      const a = send(first, `first-${u.rowId}`);
      await new Promise((r) => setTimeout(r, 200));
      const b = send(second, `second-${u.rowId}`);
      const [ra, rb] = await Promise.all([a, b]);
      assert.equal(ra.status, 200);
      assert.equal(rb.status, 200);
      assert.equal(ra.body.user.correo, first);
      assert.equal(rb.body.user.correo, second);
      const final = await row(u.rowId!);
      assert.equal(final.correo, second);
      assert.equal(final.nombre_usuario, `second-${u.rowId}`);
      assert.equal(await providerEmail(u.id), second);
      const audit = await auditRows(u.rowId!);
      assert.deepEqual(audit.map((x) => x.outcome), ["ok", "ok"]);
    });
  },
);

// -------------------------------------------------------------------- sync

/** Rows covering every sync status; returns their ids by name. */
async function syncFixture() {
  const inSync = await stack.createUser({ row: { auth_user_id: true } });
  const toLinkEmail = uniqueEmail("tolink");
  const toLink = await stack.createUser({
    email: toLinkEmail,
    confirmed: "by-mail",
    row: { correo: toLinkEmail.toUpperCase() },
  });
  const [noIdentity] = await stack.sql`
    insert into public.usuarios (correo) values (${uniqueEmail("none")})
    returning id`;
  const [noEmail] = await stack.sql`
    insert into public.usuarios (nombre_usuario)
    values (${`noemail-${crypto.randomUUID().slice(0, 8)}`}) returning id`;
  // Its correo's account never confirmed the address.
  const unverifiedEmail = uniqueEmail("unverified");
  const unverified = await stack.createUser({
    email: unverifiedEmail,
    confirmed: false,
    row: { correo: unverifiedEmail },
  });
  // Its correo is an account's address with spaces around it (legacy
  // data): no account can have it as it stands.
  const padded = await stack.createUser({ confirmed: "by-mail" });
  const [paddedRow] = await stack.sql`
    insert into public.usuarios (correo) values (${` ${padded.email} `})
    returning id`;
  // Linked to one account while its correo is another account's.
  const other = await stack.createUser();
  const mismatched = await stack.createUser({ row: { auth_user_id: true } });
  await stack
    .sql`update public.usuarios set correo = ${other.email} where id = ${mismatched.rowId}`;
  return {
    inSync,
    toLink,
    noIdentity: Number(noIdentity.id),
    noEmail: Number(noEmail.id),
    unverified,
    padded: Number(paddedRow.id),
    mismatched,
  };
}

e2eTest(
  "auth-sync: sync reports each status (a correo with spaces around it: invalid_email, not no_identity), and dry_run writes nothing",
  async () => {
    const f = await syncFixture();
    const ids = [
      f.inSync.rowId!,
      f.toLink.rowId!,
      f.noIdentity,
      f.noEmail,
      f.unverified.rowId!,
      f.padded,
      f.mismatched.rowId!,
    ];
    const expected = [
      { id: f.inSync.rowId, status: "in_sync", auth_user_id: f.inSync.id },
      { id: f.toLink.rowId, status: "linked", auth_user_id: f.toLink.id },
      { id: f.noIdentity, status: "no_identity", auth_user_id: null },
      { id: f.noEmail, status: "no_email", auth_user_id: null },
      { id: f.unverified.rowId, status: "unverified", auth_user_id: null },
      { id: f.padded, status: "invalid_email", auth_user_id: null },
      {
        id: f.mismatched.rowId,
        status: "conflict",
        auth_user_id: f.mismatched.id,
      },
    ];
    const dry = await authSync(admin, { action: "sync", ids, dry_run: true });
    assert.equal(dry.status, 200);
    assert.deepEqual(dry.body, {
      ok: true,
      results: expected,
      summary: {
        linked: 1,
        in_sync: 1,
        no_identity: 1,
        conflict: 1,
        no_email: 1,
        invalid_email: 1,
        unverified: 1,
      },
      next_after_id: null,
    });
    assert.equal((await row(f.toLink.rowId!)).auth_user_id, null);
    assert.equal((await auditRows(f.toLink.rowId!)).length, 0);

    const real = await authSync(admin, { action: "sync", ids });
    assert.equal(real.status, 200);
    assert.deepEqual(real.body.results, expected);
    assert.equal((await row(f.toLink.rowId!)).auth_user_id, f.toLink.id);
    const audit = await auditRows(f.toLink.rowId!);
    assert.deepEqual(audit.map((a) => [a.action, a.fields, a.outcome]), [
      ["sync", ["auth_user_id"], "ok"],
    ]);

    // Once linked, the row is in sync; nothing else changed.
    const again = await authSync(admin, { action: "sync", ids });
    assert.equal(again.status, 200);
    assert.deepEqual(again.body.summary, {
      linked: 0,
      in_sync: 2,
      no_identity: 1,
      conflict: 1,
      no_email: 1,
      invalid_email: 1,
      unverified: 1,
    });
    assert.equal((await row(f.unverified.rowId!)).auth_user_id, null);
    assert.equal(
      (await row(f.mismatched.rowId!)).auth_user_id,
      f.mismatched.id,
    );
  },
);

e2eTest(
  "auth-sync: where Auth confirms by mail, sync does not link a row to an account confirmed without a mail (as a sign-up while confirmations were off leaves it), nor update change it; it links once an operator stamps the address",
  async () => {
    const email = uniqueEmail("at-once");
    const taken = await stack.createUser({ email });
    const [r] = await stack.sql`
      insert into public.usuarios (correo, rol) values (${email}, 'admin')
      returning id`;
    const id = Number(r.id);
    const sync = await authSync(admin, { action: "sync", ids: [id] });
    assert.deepEqual(sync.body.results, [
      { id, status: "unverified", auth_user_id: null },
    ]);
    const update = await authSync(admin, {
      action: "update",
      id,
      password: pw("at-once"),
    });
    assert.equal(update.status, 409);
    assert.equal(update.body.code, "identity_unverified");
    assert.equal((await row(id)).auth_user_id, null);

    const stamped = await stack.admin().auth.admin.updateUserById(taken.id, {
      app_metadata: { [ADMIN_STAMP]: email },
    });
    assert.equal(stamped.error, null);
    const linked = await authSync(admin, { action: "sync", ids: [id] });
    assert.deepEqual(linked.body.results, [
      { id, status: "linked", auth_user_id: taken.id },
    ]);
  },
);

e2eTest(
  "auth-sync: sync reports conflict for a row whose correo's account is linked to another row",
  async () => {
    const owner = await stack.createUser({
      confirmed: "by-mail",
      row: { auth_user_id: true },
    });
    const [other] = await stack.sql`
    insert into public.usuarios (correo) values (${owner.email})
    returning id`;
    const res = await authSync(admin, {
      action: "sync",
      ids: [Number(other.id), owner.rowId],
    });
    assert.equal(res.status, 200);
    assert.deepEqual(res.body.results, [
      { id: owner.rowId, status: "in_sync", auth_user_id: owner.id },
      { id: Number(other.id), status: "conflict", auth_user_id: null },
    ]);
    assert.equal((await row(Number(other.id))).auth_user_id, null);
  },
);

e2eTest(
  "auth-sync: sync pages with after_id, limit and next_after_id",
  async () => {
    const ids: number[] = [];
    for (let i = 0; i < 5; i++) {
      const [r] = await stack.sql`
      insert into public.usuarios (correo) values (${uniqueEmail("page")})
      returning id`;
      ids.push(Number(r.id));
    }
    const seen: number[] = [];
    let after: number | undefined;
    const nexts: (number | null)[] = [];
    for (let page = 0; page < 4; page++) {
      const res = await authSync(admin, {
        action: "sync",
        ids,
        limit: 2,
        ...(after === undefined ? {} : { after_id: after }),
      });
      assert.equal(res.status, 200);
      seen.push(...res.body.results.map((r: { id: number }) => r.id));
      nexts.push(res.body.next_after_id);
      if (res.body.next_after_id === null) break;
      after = res.body.next_after_id;
    }
    assert.deepEqual(seen, ids);
    assert.deepEqual(nexts, [ids[1], ids[3], null]);

    // Without ids: rows after after_id, in id order.
    const tail = await authSync(admin, {
      action: "sync",
      after_id: ids[2],
      limit: 500,
      dry_run: true,
    });
    assert.equal(tail.status, 200);
    assert.deepEqual(tail.body.results.map((r: { id: number }) => r.id), [
      ids[3],
      ids[4],
    ]);
    assert.equal(tail.body.next_after_id, null);
  },
);

// --------------------------------------------------------- server callers

/** A supabase-js client created with `key` alone, as a back-office job. */
function keyClient(key: string) {
  return createClient(stack.apiUrl, key, {
    auth: {
      persistSession: false,
      autoRefreshToken: false,
      detectSessionInUrl: false,
    },
  });
}

async function actorOf(targetId: number) {
  return (await stack.sql`
    select actor_kind, actor_key, actor_auth_user_id::text, actor_email
    from public.auth_sync_audit where target_id = ${targetId} order by id`)
    .map((a) => ({ ...a }));
}

e2eTest(
  "auth-sync: a back-office call with the secret key (supabase-js, apikey only) is served and audited as secret_key, with the key's name",
  async () => {
    const u = await linkedUser("backoffice");
    const name = `office-${crypto.randomUUID().slice(0, 8)}`;
    const res = await invoke(keyClient(stack.secretKey), "auth-sync", {
      body: { action: "update", id: u.rowId, nombre_usuario: name },
    });
    assert.equal(res.status, 200);
    assert.equal(res.body.user.nombre_usuario, name);
    assert.deepEqual(res.body.changed, ["nombre_usuario"]);
    assert.equal((await row(u.rowId!)).nombre_usuario, name);
    // Which key: the name SUPABASE_SECRET_KEYS gives it, never the key.
    assert.deepEqual(await actorOf(u.rowId!), [{
      actor_kind: "secret_key",
      actor_key: "default",
      actor_auth_user_id: null,
      actor_email: null,
    }]);
  },
);

e2eTest(
  "auth-sync: the secret key or the legacy service_role key as bearer token makes a trusted caller, audited as such",
  async () => {
    const u = await linkedUser("bearer-key");
    for (
      const [key, kind] of [
        [stack.secretKey, "secret_key"],
        [stack.serviceRoleKey, "service_role_key"],
      ] as const
    ) {
      const res = await call(stack.apiUrl, "auth-sync", {
        headers: {
          Authorization: `Bearer ${key}`,
          "Content-Type": "application/json",
        },
        body: JSON.stringify({
          action: "update",
          id: u.rowId,
          nombre_usuario: `${kind}-${u.rowId}`,
        }),
      });
      assert.equal(res.status, 200, kind);
    }
    assert.deepEqual(
      (await actorOf(u.rowId!)).map((a) => [a.actor_kind, a.actor_key]),
      [["secret_key", "default"], ["service_role_key", "service_role"]],
    );
  },
);

e2eTest(
  "auth-sync: an unknown sb_ key is refused with 401 Invalid API key, the publishable key as bearer with missing sub claim",
  async () => {
    const unknown = "sb_secret_" + "x".repeat(31);
    for (
      const headers of [
        { apikey: unknown } as Record<string, string>,
        { Authorization: `Bearer ${unknown}` },
        { Authorization: `Bearer sb_publishable_${"y".repeat(31)}` },
      ]
    ) {
      const res = await call(stack.apiUrl, "auth-sync", {
        headers: { ...headers, "Content-Type": "application/json" },
        body: JSON.stringify({ action: "sync", dry_run: true }),
      });
      assert.equal(res.status, 401);
      assert.equal(res.headers.get("www-authenticate"), "Bearer");
      assert.deepEqual(res.body, {
        message: "Token inválido",
        code: "invalid_token",
        error: "Invalid API key",
      });
    }
    const publishable = await call(stack.apiUrl, "auth-sync", {
      headers: {
        Authorization: `Bearer ${stack.publishableKey}`,
        apikey: stack.publishableKey,
      },
      body: JSON.stringify({ action: "sync", dry_run: true }),
    });
    assert.equal(publishable.status, 401);
    assert.deepEqual(publishable.body, {
      message: "Token inválido",
      code: "invalid_token",
      error: "invalid claim: missing sub claim",
      error_code: "bad_jwt",
    });
    // supabase-js with the publishable key and no session sends no bearer.
    const anonymous = await invoke(
      keyClient(stack.publishableKey),
      "auth-sync",
      {
        body: { action: "sync", dry_run: true },
      },
    );
    assert.equal(anonymous.status, 401);
    assert.equal(anonymous.body.code, "missing_bearer");
  },
);

// ------------------------------------------------------------ convergence

/**
 * A dead call's trace: Auth holds the email `newEmail` the call set on
 * `u`'s account, and its intent is open (its holder gone), the row as it was.
 */
async function deadCallTrace(u: TestUser, newEmail: string): Promise<void> {
  await stack.admin().auth.admin.updateUserById(u.id, {
    email: newEmail,
    email_confirm: true,
  });
  await stack.sql`
    insert into public.auth_sync_intents
      (id, target_id, holder, kind, account_id, fields, old_email, new_email,
       row_set, actor_kind, actor_auth_user_id, actor_email)
    values (${crypto.randomUUID()}::uuid, ${u.rowId}, ${crypto.randomUUID()}::uuid,
            'update', ${u.id}::uuid, array['email'], ${u.email}, ${newEmail},
            ${stack.sql.json({ correo: newEmail })}, 'user', ${admin.id}::uuid,
            ${admin.email})`;
}

async function intents(targetId: number) {
  return (await stack.sql`
    select outcome, settled_at is not null as settled, fields
    from public.auth_sync_intents where target_id = ${targetId}
    order by created_at`).map((i) => ({ ...i }));
}

e2eTest(
  "auth-sync: an update whose caller goes away while Auth changes the account still writes the row, settles its intent, audits it once and frees the lease",
  async () => {
    const tab = new AbortController();
    const proxy = authProxy(async (_req, forward) => {
      const applied = await forward();
      // The administrator's tab closes while Auth answers; the answer
      // reaches the function after its server has seen the connection go.
      tab.abort();
      await new Promise((r) => setTimeout(r, 300));
      return applied;
    });
    await withServed({ SUPABASE_URL: proxy.url }, [proxy], async (apiUrl) => {
      const u = await linkedUser("abandoned");
      const newEmail = uniqueEmail("abandoned-new");
      await fetch(`${apiUrl}/functions/v1/auth-sync`, {
        method: "POST",
        signal: tab.signal,
        headers: {
          Authorization: `Bearer ${admin.token}`,
          "Content-Type": "application/json",
        },
        body: JSON.stringify({
          action: "update",
          id: u.rowId,
          email: newEmail,
        }),
      }).then((res) => res.body?.cancel(), () => {});
      assert.ok(tab.signal.aborted, "the caller left before the answer");
      // Nobody is told when the function is done: wait for its last step.
      const released = async () =>
        (await stack.sql`
          select 1 from public.auth_sync_leases where target_id = ${u.rowId}`)
            .length === 0 && (await auditRows(u.rowId!)).length > 0;
      for (let i = 0; i < 100 && !(await released()); i++) {
        await new Promise((r) => setTimeout(r, 100));
      }
      await assertConverged(u, newEmail, [["ok", null, ["email"]]]);
      assert.deepEqual(await intents(u.rowId!), [
        { outcome: "applied", settled: true, fields: ["email"] },
      ]);
    });
  },
);

e2eTest(
  "auth-sync: a row write whose COMMIT answer is lost is read back, not undone: 200, row and account hold the new email",
  async () => {
    const db = commitAnswerDroppingProxy(stack.dbUrl);
    await withServed({ SUPABASE_DB_URL: db.url }, [db], async (apiUrl) => {
      const u = await linkedUser("commit-lost");
      const newEmail = uniqueEmail("committed");
      const dropped = db.arm();
      const res = await updateVia(apiUrl, { id: u.rowId, email: newEmail });
      await dropped;
      assert.equal(res.status, 200);
      assert.equal(res.body.user.correo, newEmail);
      assert.deepEqual(res.body.changed, ["email"]);
      await assertConverged(u, newEmail, [["ok", null, ["email"]]]);
      assert.deepEqual(await intents(u.rowId!), [
        { outcome: "applied", settled: true, fields: ["email"] },
      ]);
    });
  },
);

e2eTest(
  "auth-sync: an update whose lease lapsed while Auth answered undoes nothing of the competing update: row and account agree",
  async () => {
    const u = await linkedUser("lapsed");
    let applied!: () => void;
    const appliedAtAuth = new Promise<void>((r) => (applied = r));
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let first = true;
    // The first write reaches Auth at once; its answer is held until the
    // competing update is done.
    const proxy = authProxy(async (_req, forward) => {
      if (!first) return null;
      first = false;
      const answer = await forward();
      const body = await answer.arrayBuffer();
      applied();
      await released;
      return new Response(body, {
        status: answer.status,
        headers: answer.headers,
      });
    });
    await withServed({ SUPABASE_URL: proxy.url }, [proxy], async (apiUrl) => {
      const late = uniqueEmail("late");
      const winner = uniqueEmail("winner");
      const a = updateVia(apiUrl, { id: u.rowId, email: late });
      await appliedAtAuth;
      // As after LEASE_TTL_S: the first update's lease lapses.
      await stack.sql`
        update public.auth_sync_leases set expires_at = now() - interval '1 second'
        where target_id = ${u.rowId}`;
      const b = await authSync(admin, {
        action: "update",
        id: u.rowId,
        email: winner,
      });
      assert.equal(b.status, 200);
      release();
      const ra = await a;
      assert.equal(ra.status, 409);
      assert.equal(ra.body.code, "target_busy");
      // The late call's change was settled by the competing call (the row
      // followed Auth), then replaced by it; nothing set it back.
      await assertConverged(u, winner, [
        ["ok", "settled_applied", ["email"]],
        ["ok", null, ["email"]],
      ]);
      assert.deepEqual((await intents(u.rowId!)).map((i) => i.outcome), [
        "applied",
        "applied",
      ]);
    });
  },
);

e2eTest(
  "auth-sync: a worker killed between the Auth call and the row write leaves an open intent that reconcile settles, keeping what the app wrote to the row since",
  async () => {
    const u = await linkedUser("killed");
    const appName = `app-${u.rowId}`;
    const newEmail = uniqueEmail("after-kill");
    let worker: Deno.ChildProcess | null = null;
    // Auth applies the change; then the worker dies before it can answer.
    const proxy = authProxy(async (_req, forward) => {
      const answer = await forward();
      await answer.body?.cancel();
      worker?.kill("SIGKILL");
      return authServerError("worker killed");
    });
    try {
      // Port 0: the worker takes a free port itself and names it in its
      // "Listening on" line, so no other listener can take it in between.
      worker = new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "-A",
          "--no-check",
          "supabase/functions/auth-sync/index.ts",
        ],
        env: {
          DENO_SERVE_ADDRESS: "tcp:127.0.0.1:0",
          SUPABASE_URL: proxy.url,
          SUPABASE_DB_URL: stack.dbUrl,
          SUPABASE_PUBLISHABLE_KEYS: JSON.stringify({
            default: stack.publishableKey,
          }),
          SUPABASE_SECRET_KEYS: JSON.stringify({ default: stack.secretKey }),
        },
        stdout: "null",
        stderr: "piped",
      }).spawn();
      const log = workerLog(worker.stderr);
      const workerUrl = await log.listening;
      await updateVia(workerUrl, {
        id: u.rowId,
        email: newEmail,
        nombre_usuario: `dead-${u.rowId}`,
      }).then(
        (r) =>
          assert.fail(
            `the killed worker answered ${r.status} ${
              JSON.stringify(r.body)
            }; its log:\n${log.seen()}`,
          ),
        () => {},
      );
      await worker.status;
    } finally {
      // A failure before the kill leaves no worker behind.
      try {
        worker?.kill("SIGKILL");
      } catch { /* already ended */ }
      await proxy.close();
    }
    // Apart, with no audit row, but the intent says what was under way.
    assert.equal((await row(u.rowId!)).correo, u.email);
    assert.equal(await providerEmail(u.id), newEmail);
    assert.equal((await auditRows(u.rowId!)).length, 0);
    assert.deepEqual(await intents(u.rowId!), [
      { outcome: null, settled: false, fields: ["email"] },
    ]);

    // The app renames the row meanwhile, with its own SQL.
    await stack.sql`
      update public.usuarios set nombre_usuario = ${appName}
      where id = ${u.rowId}`;
    // The dead worker's lease lapses (LEASE_TTL_S) before anyone settles.
    await stack.sql`
      update public.auth_sync_leases set expires_at = now() - interval '1 second'
      where target_id = ${u.rowId}`;
    const office = keyClient(stack.secretKey);
    const page = { after_id: u.rowId! - 1, limit: 1 };
    // A dry run lists the open intent and the mismatch, and changes nothing.
    const dry = await invoke(office, "auth-sync", {
      body: { action: "reconcile", ...page, dry_run: true },
    });
    assert.equal(dry.status, 200);
    const mine = (settled: { target_id: number; outcome: string }[]) =>
      settled.filter((s) => s.target_id === u.rowId).map((s) => ({ ...s }));
    assert.deepEqual(
      mine(dry.body.settled).map((s) => s.outcome),
      ["open"],
    );
    assert.deepEqual(dry.body.mismatches, [{
      id: u.rowId,
      correo: u.email,
      auth_user_id: u.id,
      account_email: newEmail,
    }]);
    assert.equal((await row(u.rowId!)).correo, u.email);

    const real = await invoke(office, "auth-sync", {
      body: { action: "reconcile", ...page },
    });
    assert.equal(real.status, 200);
    assert.deepEqual(
      mine(real.body.settled).map((s) => s.outcome),
      ["applied"],
    );
    assert.deepEqual(real.body.mismatches, []);
    // The row follows Auth's email; the app's newer name is not overwritten
    // by the dead call's, and the audit names only what was written.
    assert.equal((await row(u.rowId!)).nombre_usuario, appName);
    await assertConverged(u, newEmail, [["ok", "settled_applied", ["email"]]]);
    // The dead call's actor, not the key that settled it.
    assert.deepEqual(await actorOf(u.rowId!), [{
      actor_kind: "user",
      actor_key: null,
      actor_auth_user_id: admin.id,
      actor_email: admin.email,
    }]);
  },
);

// PostgreSQL only: PGlite is one session, where a held lock holds everyone.
if (Deno.env.get("TEST_DATABASE_URL")) {
  e2eTest(
    "auth-sync: an open intent whose row the app holds locked while reconcile settles it is reported open and left for the next reconcile, which applies it; the other rows' intents are settled all the same (authsync2 L1)",
    async () => {
      const u = await linkedUser("held-intent");
      const v = await linkedUser("free-intent");
      const newEmail = uniqueEmail("held-new");
      const freeEmail = uniqueEmail("free-new");
      await deadCallTrace(u, newEmail);
      await deadCallTrace(v, freeEmail);
      const page = { action: "reconcile", after_id: u.rowId! - 1, limit: 1 };
      // The app's own transaction holds the row past the 1 s lock wait.
      let locked!: () => void;
      const isLocked = new Promise<void>((r) => locked = r);
      let release!: () => void;
      const released = new Promise<void>((r) => release = r);
      const app = stack.sql.begin(async (tx) => {
        await tx`select 1 from public.usuarios where id = ${u.rowId} for update`;
        locked();
        await released;
      });
      await isLocked;
      const lines = await logLines(async () => {
        const busy = await authSync(admin, page).finally(release);
        assert.equal(busy.status, 200, JSON.stringify(busy.body));
        const outcomes = Object.fromEntries(
          busy.body.settled.map((
            s: { target_id: number; outcome: string },
          ) => [s.target_id, s.outcome]),
        );
        assert.equal(outcomes[u.rowId!], "open");
        assert.equal(outcomes[v.rowId!], "applied");
      });
      await app;
      const line = jsonLines(lines).find((l) => l.msg === "Request handled");
      assert.equal(line?.level, "warn", lines.join("\n"));
      assert.deepEqual(line?.targets_busy, [u.rowId]);
      assert.equal((await row(u.rowId!)).correo, u.email);
      assert.deepEqual(await intents(u.rowId!), [
        { outcome: null, settled: false, fields: ["email"] },
      ]);
      await assertConverged(v, freeEmail, [["ok", "settled_applied", [
        "email",
      ]]]);
      const settled = await authSync(admin, page);
      assert.equal(settled.status, 200, JSON.stringify(settled.body));
      await assertConverged(u, newEmail, [["ok", "settled_applied", [
        "email",
      ]]]);
      assert.deepEqual(await intents(u.rowId!), [
        { outcome: "applied", settled: true, fields: ["email"] },
      ]);
    },
  );
}

e2eTest(
  "auth-sync: an open intent whose row can no longer take the account's email is settled left_changed, audited, and stops blocking the row",
  async () => {
    const u = await linkedUser("stuck-intent");
    const taken = uniqueEmail("taken");
    // Meanwhile another row took the email the dead call set, so the row
    // cannot follow.
    await deadCallTrace(u, taken);
    await stack.sql`insert into public.usuarios (correo) values (${taken})`;
    const name = `unblocked-${u.rowId}`;
    const res = await authSync(admin, {
      action: "update",
      id: u.rowId,
      nombre_usuario: name,
    });
    assert.equal(res.status, 200);
    assert.equal(res.body.user.correo, u.email);
    assert.deepEqual(await intents(u.rowId!), [
      { outcome: "left_changed", settled: true, fields: ["email"] },
    ]);
    assert.deepEqual(
      (await auditRows(u.rowId!)).map((a) => [a.outcome, a.detail, a.fields]),
      [
        ["partial_failure", "settled_left_changed", ["email"]],
        ["ok", null, ["nombre_usuario"]],
      ],
    );
    // The report lists the row, whose correo and account now differ.
    const report = await authSync(admin, {
      action: "reconcile",
      after_id: u.rowId! - 1,
      limit: 1,
      dry_run: true,
    });
    assert.deepEqual(report.body.mismatches, [{
      id: u.rowId,
      correo: u.email,
      auth_user_id: u.id,
      account_email: taken,
    }]);
  },
);

e2eTest(
  "auth-sync: reconcile reports linked rows whose correo differs from the account's email, a page at a time",
  async () => {
    const inStep = await linkedUser("in-step");
    const apart = await linkedUser("apart");
    const edited = uniqueEmail("edited");
    await stack.sql`
      update public.usuarios set correo = ${edited} where id = ${apart.rowId}`;
    const first = await authSync(admin, {
      action: "reconcile",
      after_id: inStep.rowId! - 1,
      limit: 1,
      dry_run: true,
    });
    assert.equal(first.status, 200);
    assert.deepEqual(first.body.mismatches, []);
    assert.equal(first.body.next_after_id, inStep.rowId);
    const second = await authSync(admin, {
      action: "reconcile",
      after_id: first.body.next_after_id,
      limit: 1,
      dry_run: true,
    });
    assert.deepEqual(second.body.mismatches, [{
      id: apart.rowId,
      correo: edited,
      auth_user_id: apart.id,
      account_email: apart.email,
    }]);
    assert.equal(second.body.next_after_id, null);
    const bad = await authSync(admin, { action: "reconcile", limit: 0 });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.code, "validation_failed");
  },
);

e2eTest(
  "auth-sync: a row with no account whose correo Auth would refuse as it stands (legacy spaces around it) gets 400 naming email, not Auth's refusal as a 502; with an email sent, the account is made",
  async () => {
    const email = uniqueEmail("padded");
    const [padded] = await stack.sql`
      insert into public.usuarios (correo) values (${`  ${email} `})
      returning id`;
    const id = Number(padded.id);
    const refused = await authSync(boss, {
      action: "update",
      id,
      password: pw("padded"),
    });
    assert.equal(refused.status, 400, JSON.stringify(refused.body));
    assert.equal(refused.body.code, "validation_failed");
    assert.deepEqual(
      refused.body.issues.map((i: { path: unknown[] }) => i.path),
      [["email"]],
    );
    const [{ n }] = await stack.sql`
      select count(*)::int as n from auth.users where lower(email) = ${email}`;
    assert.equal(n, 0);
    const made = await authSync(boss, {
      action: "update",
      id,
      email,
      password: pw("padded"),
    });
    assert.equal(made.status, 200, JSON.stringify(made.body));
    assert.equal(made.body.identity_created, true);
    assert.equal((await row(id)).correo, email);
  },
);

// ------------------------------------------------------------------ legacy

e2eTest(
  "auth-sync: without the auth_user_id column, update and sync match accounts by correo",
  async () => {
    // Last but the audit scan: the column stays dropped for the rest of the
    // file. The administrator is the ADMIN_EMAILS one, who needs no row.
    const withAccountEmail = uniqueEmail("legacy");
    const withAccount = await stack.createUser({
      email: withAccountEmail,
      confirmed: "by-mail",
      row: { correo: withAccountEmail },
    });
    const bareEmail = uniqueEmail("legacy-bare");
    const [bare] = await stack.sql`
    insert into public.usuarios (correo) values (${bareEmail}) returning id`;
    const [noEmail] = await stack.sql`
    insert into public.usuarios (nombre_usuario)
    values (${`legacy-${crypto.randomUUID().slice(0, 8)}`}) returning id`;
    await stack.sql`alter table public.usuarios drop column auth_user_id`;

    // Sync first: a password change clears Auth's record of the
    // confirmation mail (UpdatePassword), the account's proof of its address.
    const sync = await authSync(boss, {
      action: "sync",
      ids: [withAccount.rowId, Number(bare.id), Number(noEmail.id)],
    });
    assert.equal(sync.status, 200);
    assert.deepEqual(sync.body.results, [
      {
        id: withAccount.rowId,
        status: "in_sync",
        auth_user_id: withAccount.id,
      },
      { id: Number(bare.id), status: "no_identity", auth_user_id: null },
      { id: Number(noEmail.id), status: "no_email", auth_user_id: null },
    ]);

    const password = pw("legacy");
    const updated = await authSync(boss, {
      action: "update",
      id: withAccount.rowId,
      password,
    });
    assert.equal(updated.status, 200);
    assert.deepEqual(updated.body, {
      ok: true,
      user: {
        id: withAccount.rowId,
        correo: withAccountEmail,
        nombre_usuario: null,
        auth_user_id: withAccount.id,
        rol: "usuario",
      },
      changed: ["password"],
      identity_created: false,
    });
    assert.equal(await canSignIn(withAccountEmail, password), true);

    const created = await authSync(boss, {
      action: "update",
      id: Number(bare.id),
      password: pw("legacy-created"),
    });
    assert.equal(created.status, 200);
    assert.equal(created.body.identity_created, true);
    assert.deepEqual(created.body.changed, ["password"]);
    assert.equal(
      await providerEmail(created.body.user.auth_user_id),
      bareEmail,
    );
  },
);

e2eTest(
  "auth-sync: without the auth_user_id column, an account auth-sync created (or gave its email) is the row's account on later updates and in sync; an address changed since by anyone else is not",
  async () => {
    // The column is gone (dropped by the test above, or here when run
    // alone). The row finds its account by correo only, and an account
    // auth-sync made was neither mailed nor stamped: what auth-sync
    // recorded of the address is its proof.
    await stack
      .sql`alter table public.usuarios drop column if exists auth_user_id`;
    const email = uniqueEmail("legacy-made");
    const [made] = await stack.sql`
      insert into public.usuarios (correo) values (${email}) returning id`;
    const id = Number(made.id);
    const created = await authSync(boss, {
      action: "update",
      id,
      password: pw("made"),
    });
    assert.equal(created.status, 200);
    assert.equal(created.body.identity_created, true);
    const accountId = created.body.user.auth_user_id;

    const password = pw("made-again");
    const again = await authSync(boss, { action: "update", id, password });
    assert.equal(again.status, 200, JSON.stringify(again.body));
    assert.equal(await canSignIn(email, password), true);

    const moved = uniqueEmail("legacy-moved");
    const renamed = await authSync(boss, {
      action: "update",
      id,
      email: moved,
    });
    assert.equal(renamed.status, 200, JSON.stringify(renamed.body));
    assert.equal(await providerEmail(accountId), moved);
    const sync = await authSync(boss, { action: "sync", ids: [id] });
    assert.deepEqual(sync.body.results, [
      { id, status: "in_sync", auth_user_id: accountId },
    ]);

    // The account's address changed outside auth-sync (its owner, an
    // operator): what auth-sync recorded no longer names it.
    const elsewhere = uniqueEmail("legacy-elsewhere");
    await stack.admin().auth.admin.updateUserById(accountId, {
      email: elsewhere,
      email_confirm: true,
    });
    await stack.sql`update public.usuarios set correo = ${elsewhere}
                    where id = ${id}`;
    const refused = await authSync(boss, {
      action: "update",
      id,
      password: pw("refused"),
    });
    assert.equal(refused.status, 409);
    assert.equal(refused.body.code, "identity_unverified");
  },
);

e2eTest(
  "auth-sync: without the auth_user_id column, a row whose correo another row repeats (a legacy duplicate, in another case) gets 409 shared_account for an email or password change, which would move the other row's account too; its username still changes",
  async () => {
    await stack
      .sql`alter table public.usuarios drop column if exists auth_user_id`;
    // The adopted shape of a table with duplicates: no unique index.
    await stack.sql`drop index if exists public.usuarios_correo_lower_key`;
    const email = uniqueEmail("legacy-dup");
    const ana = await stack.createUser({
      email,
      adminVerified: true,
      row: { correo: email },
    });
    const [dup] = await stack.sql`
      insert into public.usuarios (correo) values (${email.toUpperCase()})
      returning id`;
    const password = pw("dup");
    for (
      const body of [{ email: uniqueEmail("legacy-dup-moved") }, { password }]
    ) {
      const res = await authSync(boss, {
        action: "update",
        id: Number(dup.id),
        ...body,
      });
      assert.equal(res.status, 409, JSON.stringify(res.body));
      assert.equal(res.body.code, "shared_account");
    }
    assert.equal(await providerEmail(ana.id), email);
    assert.equal(await canSignIn(email, password), false);
    const renamed = await authSync(boss, {
      action: "update",
      id: Number(dup.id),
      nombre_usuario: `dup-${dup.id}`,
    });
    assert.equal(renamed.status, 200, JSON.stringify(renamed.body));
    // Nor does the other row decide for both.
    const other = await authSync(boss, {
      action: "update",
      id: ana.rowId,
      password,
    });
    assert.equal(other.status, 409, JSON.stringify(other.body));
    assert.equal(other.body.code, "shared_account");
    // Once the duplicate is gone, the account is the row's alone again.
    await stack.sql`delete from public.usuarios where id = ${dup.id}`;
    const alone = await authSync(boss, {
      action: "update",
      id: ana.rowId,
      password,
    });
    assert.equal(alone.status, 200, JSON.stringify(alone.body));
    assert.equal(await canSignIn(email, password), true);
  },
);

e2eTest(
  "auth-sync: a row's own username sent back unchanged (an admin form sent whole) is not refused as taken where a legacy duplicate repeats it in another case; a real change to the duplicate's value still is (authsync2 L2)",
  async () => {
    await stack
      .sql`drop index if exists public.usuarios_nombre_usuario_lower_key`;
    const name = `pepe-${crypto.randomUUID().slice(0, 8)}`;
    const email = uniqueEmail("form");
    const ana = await stack.createUser({
      email,
      adminVerified: true,
      row: { correo: email, nombre_usuario: name },
    });
    const [dup] = await stack.sql`
      insert into public.usuarios (nombre_usuario) values (${name.toUpperCase()})
      returning id`;
    const password = pw("form");
    const form = await authSync(boss, {
      action: "update",
      id: ana.rowId,
      nombre_usuario: name,
      password,
    });
    assert.equal(form.status, 200, JSON.stringify(form.body));
    assert.deepEqual(form.body.changed, ["password"]);
    assert.equal(await canSignIn(ana.email, password), true);
    const taken = await authSync(boss, {
      action: "update",
      id: Number(dup.id),
      nombre_usuario: name,
    });
    assert.equal(taken.status, 409, JSON.stringify(taken.body));
    assert.equal(taken.body.code, "username_exists");
  },
);

e2eTest("auth-sync: audit rows hold no password", async () => {
  const rows = await stack.sql`
    select row_to_json(a)::text as text from public.auth_sync_audit a`;
  assert.ok(rows.length > 0);
  const all = rows.map((r) => r.text).join("\n");
  for (const password of passwordsSent) {
    assert.ok(!all.includes(password), "an audit row holds a password");
  }
});

e2eTest(
  "withLease: the wait for a row another update holds ends in 409 target_busy at LEASE_WAIT_MS by the injected clock",
  async () => {
    const targetId = 900_000_000 + Math.floor(Math.random() * 1_000_000);
    const held = await tryLease(stack.sql, targetId);
    assert.ok(held);
    // Every reading of this clock moves it half the wait on: the deadline
    // is read once, then passed at the second check, with no real wait.
    let clock = Date.now();
    let reads = 0;
    const now = () => {
      reads++;
      const t = clock;
      clock += LEASE_WAIT_MS / 2;
      return t;
    };
    let ran = false;
    try {
      await assert.rejects(
        withLease(stack.sql, targetId, now, () => {
          ran = true;
          return Promise.resolve();
        }),
        (error) => error instanceof HttpError && error.code === "target_busy",
      );
      assert.equal(ran, false);
      assert.equal(reads, 3);
    } finally {
      await releaseLease(stack.sql, held);
    }
    // Free again: the same clock lets the work run.
    assert.equal(
      await withLease(stack.sql, targetId, now, () => {
        ran = true;
        return Promise.resolve("done");
      }),
      "done",
    );
    assert.equal(ran, true);
  },
);

closeStackAfterAll("auth-sync", stack);
