/**
 * Nobody gets administrator rights, another user's account or another
 * user's row by signing up first: the attacks of the security review, end
 * to end through supabase-js against the local stack as `npm start` runs it
 * (email confirmations off, so every sign-up is confirmed at once), and the
 * review's other findings, each with its test.
 */
import assert from "node:assert/strict";
import type { SupabaseClient } from "@supabase/supabase-js";
import postgres from "postgres";
import { createTestDatabase } from "../../local/testing/database.ts";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { jsonLines, logLines } from "../support/logs.ts";
import { adminWriteProxy, authServerError } from "../support/faults.ts";
import { call, invoke } from "../support/invoke.ts";
import {
  startTestStack,
  type TestStack,
  type TestUser,
} from "../support/stack.ts";

const MIGRATIONS = new URL("../../supabase/migrations", import.meta.url)
  .pathname;
const listed = (prefix: string) =>
  `${prefix}-${crypto.randomUUID().slice(0, 8)}@test.local`;
// Listed, and its account created confirmed and stamped by the operator.
const BOSS_EMAIL = listed("boss");
// Listed, and its account created by an administrator before its owner
// confirmed it: the door a first sign-up opened.
const CLAIMED_EMAIL = listed("chief");
// Listed, with no account at all: whoever signs up first is confirmed at
// once, exactly like an account an administrator creates confirmed.
const FRESH_EMAIL = listed("new-boss");
const SELF_STAMP_EMAIL = listed("self-made");
// Listed both: a stamped administrator moves from one to the other.
const MOVER_EMAIL = listed("mover");
const MOVED_EMAIL = listed("moved");
const ADMIN_EMAILS = [
  BOSS_EMAIL,
  CLAIMED_EMAIL,
  FRESH_EMAIL,
  SELF_STAMP_EMAIL,
  MOVER_EMAIL,
  MOVED_EMAIL,
].join(",");
const stack: TestStack = await startTestStack({
  functionEnv: { ADMIN_EMAILS },
});
const boss: TestUser = await stack.createUser({
  email: BOSS_EMAIL,
  adminVerified: true,
});

function uniqueEmail(prefix: string, domain = "test.local"): string {
  return `${prefix}-${crypto.randomUUID().slice(0, 10)}@${domain}`;
}

/** Signs up through the public API, as an outsider with the anon key would. */
async function signUp(
  email: string,
  password = `pw-${crypto.randomUUID()}`,
): Promise<{ client: SupabaseClient; id: string; password: string }> {
  const client = stack.anon();
  const { data, error } = await client.auth.signUp({ email, password });
  if (error) throw error;
  assert.ok(data.session, "sign-ups are confirmed at once on this stack");
  return { client, id: data.user!.id, password };
}

async function canSignIn(email: string, password: string): Promise<boolean> {
  const { error } = await stack.anon().auth.signInWithPassword({
    email,
    password,
  });
  return error === null;
}

async function usuario(id: number) {
  const [r] = await stack.sql`
    select id, correo, nombre_usuario, auth_user_id::text, rol,
           presence_state, ultimo_acceso
    from public.usuarios where id = ${id}`;
  return r;
}

/**
 * Runs `run` against functions served behind {@linkcode adminWriteProxy},
 * whose `onAdminWrite` answers every Auth admin write.
 */
async function withAdminWriteProxy(
  onAdminWrite: (
    req: Request,
    forward: () => Promise<Response>,
  ) => Promise<Response>,
  run: (apiUrl: string) => Promise<void>,
): Promise<void> {
  const proxy = adminWriteProxy(stack.apiUrl, onAdminWrite);
  const served = await stack.withFunctionEnv({
    ADMIN_EMAILS,
    SUPABASE_URL: proxy.url,
  });
  try {
    await run(served.apiUrl);
  } finally {
    await served.close();
    await proxy.close();
  }
}

function updateAsBoss(apiUrl: string, body: Record<string, unknown>) {
  return call(apiUrl, "auth-sync", {
    headers: {
      Authorization: `Bearer ${boss.token}`,
      "Content-Type": "application/json",
    },
    body: JSON.stringify({ action: "update", ...body }),
  });
}

// --------------------------------------------------- rights need proof

e2eTest(
  "security: signing up first with an administrator row's email gives no rights (403), changes nothing, and is audited",
  async () => {
    const victim = await stack.createUser({
      row: { auth_user_id: true, correo: uniqueEmail("victim") },
    });
    const adminEmail = uniqueEmail("soporte");
    const [adminRow] = await stack.sql`
      insert into public.usuarios (correo, nombre_usuario, rol)
      values (${adminEmail}, ${adminEmail.split("@")[0]}, 'admin')
      returning id`;
    const attacker = await signUp(adminEmail);
    const before = await usuario(victim.rowId!);

    const res = await invoke(attacker.client, "auth-sync", {
      body: { action: "update", id: victim.rowId, password: "taken-over-1" },
    });
    assert.equal(res.status, 403);
    assert.deepEqual(res.body, {
      message: "Acceso denegado (se requiere administrador)",
      code: "admin_required",
    });
    assert.deepEqual(await usuario(victim.rowId!), before);
    assert.equal(await canSignIn(victim.email, victim.password), true);
    assert.equal(await canSignIn(victim.email, "taken-over-1"), false);
    // The admin row was not linked to the squatter either.
    assert.equal((await usuario(Number(adminRow.id))).auth_user_id, null);

    const audit = await stack.sql`
      select actor_auth_user_id::text, actor_email, action, target_id, fields,
             outcome, detail
      from public.auth_sync_audit where actor_auth_user_id = ${attacker.id}`;
    assert.deepEqual(audit.map((a) => ({ ...a })), [{
      actor_auth_user_id: attacker.id,
      actor_email: adminEmail,
      action: "update",
      target_id: String(victim.rowId),
      fields: ["password"],
      outcome: "failed",
      detail: "admin_required",
    }]);
    assert.ok(!JSON.stringify(audit).includes("taken-over-1"));
  },
);

e2eTest(
  "security: an administrator row linked by auth_user_id keeps its rights",
  async () => {
    const admin = await stack.createUser({
      row: { auth_user_id: true, rol: "administrador" },
    });
    const res = await invoke(admin.client, "auth-sync", {
      body: { action: "sync", ids: [admin.rowId], dry_run: true },
    });
    assert.equal(res.status, 200);
    assert.deepEqual(res.body.results, [
      { id: admin.rowId, status: "in_sync", auth_user_id: admin.id },
    ]);
  },
);

e2eTest(
  "security: an ADMIN_EMAILS address that has an account cannot be signed up again",
  async () => {
    const { error } = await stack.anon().auth.signUp({
      email: BOSS_EMAIL,
      password: "claimed-secret",
    });
    assert.equal(error?.status, 422);
    assert.equal(error?.code, "user_already_exists");
    const res = await invoke(boss.client, "auth-sync", {
      body: { action: "sync", ids: [1], dry_run: true },
    });
    assert.equal(res.status, 200);
  },
);

e2eTest(
  "security: a stranger who signs up first with an ADMIN_EMAILS address whose account an administrator created unconfirmed gets no rights and changes nothing",
  async () => {
    const victim = await stack.createUser({
      row: { auth_user_id: true, correo: uniqueEmail("victim") },
    });
    const created = await stack.admin().auth.admin.createUser({
      email: CLAIMED_EMAIL,
      password: `pw-${crypto.randomUUID()}`,
      email_confirm: false,
    });
    assert.equal(created.error, null);
    // Auth hands the unconfirmed account to the first sign-up, confirmed.
    const stranger = await signUp(CLAIMED_EMAIL);
    assert.equal(stranger.id, created.data.user!.id);
    const { data } = await stack.admin().auth.admin.getUserById(stranger.id);
    assert.ok(data.user?.email_confirmed_at);
    const before = await usuario(victim.rowId!);
    const [audited] = await stack.sql`
      select coalesce(max(id), 0) as id from public.auth_sync_audit`;

    const read = await invoke(stranger.client, "presence", { body: {} });
    assert.equal(read.status, 404);
    assert.equal(read.body.code, "user_not_found");
    assert.ok(!JSON.stringify(read.body).includes(victim.email));
    const write = await invoke(stranger.client, "auth-sync", {
      body: { action: "update", id: victim.rowId, password: "taken-over-2" },
    });
    assert.equal(write.status, 404);
    assert.equal(write.body.code, "user_not_found");
    const sync = await invoke(stranger.client, "auth-sync", {
      body: { action: "sync" },
    });
    assert.equal(sync.status, 404);

    assert.deepEqual(await usuario(victim.rowId!), before);
    assert.equal(await canSignIn(victim.email, victim.password), true);
    assert.equal(await canSignIn(victim.email, "taken-over-2"), false);
    // The attempts are on record as refusals; nothing else was written.
    const since = await stack.sql`
      select actor_auth_user_id::text as actor, action, target_id, outcome,
             detail
      from public.auth_sync_audit where id > ${audited.id} order by id`;
    assert.deepEqual(since.map((r) => Object.values(r)), [
      [stranger.id, "update", String(victim.rowId), "failed", "user_not_found"],
      [stranger.id, "sync", null, "failed", "user_not_found"],
    ]);
  },
);

/** `usuarios` rows, Auth accounts and audit rows, to compare before and after. */
async function everything() {
  return {
    rows: await stack.sql`
      select id, correo, nombre_usuario, auth_user_id::text, rol
      from public.usuarios order by id`,
    accounts: await stack.sql`
      select id::text, email, encrypted_password, raw_app_meta_data
      from auth.users order by id`,
  };
}

e2eTest(
  "security: a stranger who signs up first with an ADMIN_EMAILS address that has no account gets no rights: presence shows no emails, auth-sync 403, nothing changed",
  async () => {
    const victim = await stack.createUser({
      row: { auth_user_id: true, correo: uniqueEmail("victim"), rol: "admin" },
    });
    // The future administrator's row, matched by correo: the stranger
    // reaches it, and must get a standard user's view through it.
    const [row] = await stack.sql`
      insert into public.usuarios (correo, nombre_usuario)
      values (${FRESH_EMAIL}, ${FRESH_EMAIL.split("@")[0]}) returning id`;
    const stranger = await signUp(FRESH_EMAIL);
    const { data } = await stack.admin().auth.admin.getUserById(stranger.id);
    // Auth confirmed the sign-up at once, as it confirms an account an
    // administrator creates with email_confirm: true.
    assert.ok(data.user?.email_confirmed_at);
    const before = await everything();

    const read = await invoke(stranger.client, "presence", {
      body: { ids: [victim.rowId, Number(row.id)] },
    });
    assert.equal(read.status, 200);
    assert.equal(read.body.users.length, 2);
    for (const u of read.body.users) {
      assert.deepEqual(
        Object.keys(u).filter((k) =>
          ["correo", "auth_user_id", "rol"].includes(k)
        ),
        [],
      );
    }
    assert.ok(!JSON.stringify(read.body).includes(victim.email));
    const write = await invoke(stranger.client, "auth-sync", {
      body: { action: "update", id: victim.rowId, password: "taken-over-4" },
    });
    assert.equal(write.status, 403);
    assert.equal(write.body.code, "admin_required");
    const sync = await invoke(stranger.client, "auth-sync", {
      body: { action: "sync", ids: [Number(row.id)] },
    });
    assert.equal(sync.status, 403);

    assert.deepEqual(await everything(), before);
    assert.equal(await canSignIn(victim.email, victim.password), true);
    assert.equal(await canSignIn(victim.email, "taken-over-4"), false);
  },
);

e2eTest(
  "security: a user cannot stamp its own ADMIN_EMAILS address: user_metadata is not read, app_metadata is refused (403 not_admin)",
  async () => {
    const victim = await stack.createUser({
      row: { auth_user_id: true, correo: uniqueEmail("victim") },
    });
    const stranger = await signUp(SELF_STAMP_EMAIL);
    const own = await stranger.client.auth.updateUser({
      data: { admin_verified_email: SELF_STAMP_EMAIL },
    });
    assert.equal(own.error, null);
    assert.equal(
      own.data.user?.user_metadata.admin_verified_email,
      SELF_STAMP_EMAIL,
    );
    // supabase-js sends whatever it is given; Auth refuses app_metadata
    // from anyone but the service role.
    const forged = await stranger.client.auth.updateUser(
      {
        app_metadata: { admin_verified_email: SELF_STAMP_EMAIL },
      } as Parameters<SupabaseClient["auth"]["updateUser"]>[0],
    );
    assert.equal(forged.error?.status, 403);
    assert.equal(forged.error?.code, "not_admin");
    const { data } = await stack.admin().auth.admin.getUserById(stranger.id);
    assert.equal(data.user?.app_metadata.admin_verified_email, undefined);
    const before = await everything();

    const read = await invoke(stranger.client, "presence", { body: {} });
    assert.equal(read.status, 404);
    assert.equal(read.body.code, "user_not_found");
    const write = await invoke(stranger.client, "auth-sync", {
      body: { action: "update", id: victim.rowId, password: "taken-over-5" },
    });
    assert.equal(write.status, 404);
    assert.deepEqual(await everything(), before);
    assert.equal(await canSignIn(victim.email, "taken-over-5"), false);
  },
);

e2eTest(
  "security: a stamped ADMIN_EMAILS administrator whose email then changes loses its rights, even to another listed address",
  async () => {
    const mover = await stack.createUser({
      email: MOVER_EMAIL,
      adminVerified: true,
    });
    const asAdmin = await invoke(mover.client, "auth-sync", {
      body: { action: "sync", ids: [1], dry_run: true },
    });
    assert.equal(asAdmin.status, 200);
    // What completing an email change does (the mail link Auth sends for a
    // user's own change): the email changes, app_metadata stays.
    const moved = await stack.admin().auth.admin.updateUserById(mover.id, {
      email: MOVED_EMAIL,
      email_confirm: true,
    });
    assert.equal(moved.error, null);
    assert.equal(
      moved.data.user?.app_metadata.admin_verified_email,
      MOVER_EMAIL,
    );
    const read = await invoke(mover.client, "presence", { body: {} });
    assert.equal(read.status, 404);
    const write = await invoke(mover.client, "auth-sync", {
      body: { action: "sync", ids: [1], dry_run: true },
    });
    assert.equal(write.status, 404);
    assert.equal(write.body.code, "user_not_found");

    // The operator vouches for the new address: rights again.
    const restamped = await stack.admin().auth.admin.updateUserById(mover.id, {
      app_metadata: { admin_verified_email: MOVED_EMAIL },
    });
    assert.equal(restamped.error, null);
    const again = await invoke(mover.client, "auth-sync", {
      body: { action: "sync", ids: [1], dry_run: true },
    });
    assert.equal(again.status, 200);
  },
);

e2eTest(
  "security: an ADMIN_EMAILS address whose account an administrator created confirmed and stamped keeps its rights: it reads emails and roles",
  async () => {
    const other = await stack.createUser({
      row: { auth_user_id: true, correo: uniqueEmail("seen"), rol: "usuario" },
    });
    const res = await invoke(boss.client, "presence", {
      body: { ids: [other.rowId] },
    });
    assert.equal(res.status, 200);
    assert.equal(res.body.users.length, 1);
    assert.equal(
      res.body.users[0].correo,
      (await usuario(other.rowId!)).correo,
    );
    assert.equal(res.body.users[0].auth_user_id, other.id);
    assert.equal(res.body.users[0].rol, "usuario");
  },
);

// ------------------------------------------------------- refusals are bounded

// The refusal rows of one caller: each says who failed and why, at most six
// a minute, and together they count every refused call.
async function refusalRows(
  actor: TestUser,
  detail: string,
  sent: number,
  secret: string,
) {
  const rows = await stack.sql`
    select action, target_id, fields, attempts, refused_minute, outcome,
           detail, actor_email, actor_kind
    from public.auth_sync_audit where actor_auth_user_id = ${actor.id}
    order by id`;
  const perMinute = new Map<string, number>();
  for (const r of rows) {
    const key = String(r.refused_minute);
    perMinute.set(key, (perMinute.get(key) ?? 0) + 1);
    assert.deepEqual(
      [r.outcome, r.detail, r.actor_email, r.actor_kind],
      ["failed", detail, actor.email, "user"],
    );
  }
  for (const n of perMinute.values()) assert.ok(n <= 6, `${n} rows a minute`);
  assert.equal(rows.reduce((sum, r) => sum + r.attempts, 0), sent);
  assert.ok(!JSON.stringify(rows).includes(secret));
  return rows;
}

e2eTest(
  "security: a standard user's refused auth-sync calls add at most six audit rows a minute, and every attempt is counted",
  async () => {
    const pest = await stack.createUser({ row: { auth_user_id: true } });
    const targets = Array.from({ length: 20 }, (_, i) => 1_000_000 + i);
    let sent = 0;
    for (let round = 0; round < 2; round++) {
      for (const id of targets) {
        const res = await invoke(pest.client, "auth-sync", {
          body: { action: "update", id, password: "nope-nope-1" },
        });
        assert.equal(res.status, 403);
        sent++;
      }
    }
    const sync = await invoke(pest.client, "auth-sync", {
      body: { action: "sync" },
    });
    assert.equal(sync.status, 403);
    sent++;
    const rows = await refusalRows(pest, "admin_required", sent, "nope-nope-1");
    // Who tried what stays on record: the first target, with its fields.
    assert.deepEqual(
      [rows[0].action, rows[0].target_id, rows[0].fields],
      ["update", String(targets[0]), ["password"]],
    );
  },
);

e2eTest(
  "security: a signed-in caller with no usuarios row (any fresh sign-up) probing auth-sync gets 404, and its probes are on record like a 403's: detail user_not_found, at most six rows a minute, every attempt counted",
  async () => {
    const stranger = await stack.createUser();
    const secret = "probe-pass-9";
    let sent = 0;
    for (let id = 2_000_000; id < 2_000_008; id++) {
      const res = await invoke(stranger.client, "auth-sync", {
        body: { action: "update", id, password: secret },
      });
      assert.equal(res.status, 404);
      assert.equal(res.body.code, "user_not_found");
      sent++;
    }
    for (const body of ['{"action":"sync"}', "{not json"]) {
      const res = await call(stack.apiUrl, "auth-sync", {
        headers: {
          Authorization: `Bearer ${stranger.token}`,
          "Content-Type": "application/json",
        },
        body,
      });
      assert.equal(res.status, 404);
      sent++;
    }
    const rows = await refusalRows(stranger, "user_not_found", sent, secret);
    assert.deepEqual(
      [rows[0].action, rows[0].target_id, rows[0].fields],
      ["update", "2000000", ["password"]],
    );
  },
);

// ------------------------------------------- no address reaches a user

e2eTest(
  "security: presence shows a standard user no address inside any nombre_usuario; an administrator sees them as stored",
  async () => {
    const names = [
      "elena@corp.test;elena.old@gmail.test",
      "Elena Ruiz <elena.r@corp.test> (@elena)",
      "elena.r2@corp.test / @elena2",
      "carla@example.com",
    ];
    const ids: number[] = [];
    for (const name of names) {
      const [r] = await stack.sql`
        insert into public.usuarios (nombre_usuario) values (${
        name + crypto.randomUUID().slice(0, 4)
      }) returning id, nombre_usuario`;
      ids.push(Number(r.id));
    }
    const reader = await stack.createUser({ row: { auth_user_id: true } });
    const seen = await invoke(reader.client, "presence", { body: { ids } });
    assert.equal(seen.status, 200);
    const shown = seen.body.users.map((u: { nombre_usuario: string }) =>
      u.nombre_usuario
    );
    assert.equal(shown.length, names.length);
    for (const name of shown) {
      assert.doesNotMatch(name, /[^\s<>();,/]+@[^\s<>();,/]*\./, name);
    }
    assert.match(shown[0], /^elena;elena\.old/);
    assert.match(shown[1], /^Elena Ruiz <elena\.r> \(@elena\)/);
    assert.match(shown[2], /^elena\.r2 \/ @elena2/);
    assert.match(shown[3], /^carla$/);
    const admin = await invoke(boss.client, "presence", { body: { ids } });
    assert.deepEqual(
      admin.body.users.map((u: { nombre_usuario: string }) => u.nombre_usuario),
      (await stack.sql`
        select nombre_usuario from public.usuarios where id in ${
        stack.sql(ids)
      } order by id`).map((r) => r.nombre_usuario),
    );
  },
);

// ------------------------------------------------ nothing links a squatter

e2eTest(
  "security: sync does not link a row to the account that signed up first with its email: unverified",
  async () => {
    const email = uniqueEmail("squatted");
    const [r] = await stack.sql`
      insert into public.usuarios (correo) values (${email}) returning id`;
    const squatter = await signUp(email);
    const res = await invoke(boss.client, "auth-sync", {
      body: { action: "sync", ids: [Number(r.id)] },
    });
    assert.equal(res.status, 200);
    assert.deepEqual(res.body.results, [
      { id: Number(r.id), status: "unverified", auth_user_id: null },
    ]);
    assert.equal(res.body.summary.unverified, 1);
    assert.equal((await usuario(Number(r.id))).auth_user_id, null);
    assert.ok(squatter.id);
  },
);

e2eTest(
  "security: update refuses to change or link the account that signed up first with a row's email: 409 identity_unverified",
  async () => {
    const email = uniqueEmail("squatted-update");
    const [r] = await stack.sql`
      insert into public.usuarios (correo) values (${email}) returning id`;
    const squatter = await signUp(email);
    const before = await usuario(Number(r.id));
    const res = await invoke(boss.client, "auth-sync", {
      body: { action: "update", id: Number(r.id), password: "for-the-owner-1" },
    });
    assert.equal(res.status, 409);
    assert.equal(res.body.code, "identity_unverified");
    assert.deepEqual(await usuario(Number(r.id)), before);
    assert.equal(await canSignIn(email, squatter.password), true);
    assert.equal(await canSignIn(email, "for-the-owner-1"), false);

    // A username change touches no account and still works.
    const renamed = await invoke(boss.client, "auth-sync", {
      body: {
        action: "update",
        id: Number(r.id),
        nombre_usuario: `owner-${r.id}`,
      },
    });
    assert.equal(renamed.status, 200);
    assert.deepEqual(renamed.body.changed, ["nombre_usuario"]);
    assert.equal((await usuario(Number(r.id))).auth_user_id, null);
  },
);

// ------------------------------------------- matching cannot be borrowed

e2eTest(
  "security: an outsider signing up as <username>@anywhere cannot set the presence of row <username> (default settings)",
  async () => {
    const username = `bruno${crypto.randomUUID().slice(0, 8)}`;
    const [r] = await stack.sql`
      insert into public.usuarios (nombre_usuario) values (${username})
      returning id`;
    const before = await usuario(Number(r.id));
    const outsider = await signUp(`${username}@any-domain.test`);
    const res = await invoke(outsider.client, "presence-ping", {
      body: { state: "online" },
    });
    assert.equal(res.status, 404);
    assert.equal(res.body.code, "user_not_found");
    assert.deepEqual(await usuario(Number(r.id)), before);
  },
);

e2eTest(
  "security: USERNAME_MATCH_DOMAINS lets the username strategy match listed domains only, and * every domain",
  async () => {
    const username = `carla${crypto.randomUUID().slice(0, 8)}`;
    const [r] = await stack.sql`
      insert into public.usuarios (nombre_usuario) values (${username})
      returning id`;
    const insider = await signUp(`${username}@corp.test`);
    const outsider = await signUp(`${username}@elsewhere.test`);
    const ping = (apiUrl: string, token: string) =>
      call(apiUrl, "presence-ping", {
        headers: { Authorization: `Bearer ${token}` },
      });
    const tokenOf = async (c: SupabaseClient) =>
      (await c.auth.getSession()).data.session!.access_token;
    const listed = await stack.withFunctionEnv({
      USERNAME_MATCH_DOMAINS: "corp.test",
    });
    const every = await stack.withFunctionEnv({ USERNAME_MATCH_DOMAINS: "*" });
    try {
      const ok = await ping(listed.apiUrl, await tokenOf(insider.client));
      assert.equal(ok.status, 200);
      assert.equal(ok.body.user.id, Number(r.id));
      const refused = await ping(listed.apiUrl, await tokenOf(outsider.client));
      assert.equal(refused.status, 404);
      const anyDomain = await ping(
        every.apiUrl,
        await tokenOf(outsider.client),
      );
      assert.equal(anyDomain.status, 200);
      assert.equal(anyDomain.body.user.id, Number(r.id));
    } finally {
      await listed.close();
      await every.close();
    }
  },
);

// ------------------------------------------------- the review's findings

e2eTest(
  "security: after a lost createUser answer, a stranger's account with that email is not deleted",
  async () => {
    const email = uniqueEmail("lost-create");
    const [r] = await stack.sql`
      insert into public.usuarios (correo) values (${email}) returning id`;
    let stranger: { id: string; password: string } | null = null;
    await withAdminWriteProxy(async (req) => {
      // The call never reaches Auth, its answer is lost, and meanwhile a
      // stranger signs up with the address.
      await req.body?.cancel();
      stranger = await signUp(email);
      return authServerError("answer lost by test proxy");
    }, async (apiUrl) => {
      const res = await updateAsBoss(apiUrl, {
        id: Number(r.id),
        password: "for-the-owner-2",
      });
      assert.equal(res.status, 503);
      assert.equal(res.body.code, "idp_unavailable");
    });
    assert.ok(stranger);
    const s = stranger as { id: string; password: string };
    const { data } = await stack.admin().auth.admin.getUserById(s.id);
    assert.equal(data.user?.id, s.id);
    assert.equal(await canSignIn(email, s.password), true);
    assert.equal((await usuario(Number(r.id))).auth_user_id, null);
  },
);

e2eTest(
  "security: after a lost createUser answer, the account the call created is deleted again",
  async () => {
    const email = uniqueEmail("lost-own");
    const [r] = await stack.sql`
      insert into public.usuarios (correo) values (${email}) returning id`;
    await withAdminWriteProxy(async (req, forward) => {
      if (req.method !== "POST") return await forward();
      const applied = await forward();
      assert.equal(applied.status, 200);
      await applied.body?.cancel();
      return authServerError("answer lost by test proxy");
    }, async (apiUrl) => {
      const res = await updateAsBoss(apiUrl, {
        id: Number(r.id),
        password: "for-the-owner-3",
      });
      assert.equal(res.status, 503);
    });
    const [left] = await stack.sql`
      select count(*)::int as n from auth.users where lower(email) = ${email}`;
    assert.equal(left.n, 0);
  },
);

e2eTest(
  "security: a lease taken over before the write refuses the write and never calls Auth again: 500 partial_failure, the intent left open",
  async () => {
    const u = await stack.createUser({
      row: { auth_user_id: true },
    });
    await stack.sql`update public.usuarios set correo = ${u.email}
                    where id = ${u.rowId}`;
    const before = await usuario(u.rowId!);
    let tookOver = false;
    let writes = 0;
    const late = uniqueEmail("late");
    await withAdminWriteProxy(async (req, forward) => {
      writes++;
      const answer = await forward();
      if (req.method === "PUT" && !tookOver) {
        // While Auth answered, the lease lapsed and another call took it.
        tookOver = true;
        await stack.sql`
          update public.auth_sync_leases
          set holder = ${crypto.randomUUID()}::uuid
          where target_id = ${u.rowId}`;
      }
      return answer;
    }, async (apiUrl) => {
      const res = await updateAsBoss(apiUrl, { id: u.rowId, email: late });
      assert.equal(res.status, 500);
      assert.equal(res.body.code, "partial_failure");
      assert.deepEqual(res.body.provider_changed, ["email"]);
    });
    assert.ok(tookOver);
    // No undo: the row is another call's now, and so is the account.
    assert.equal(writes, 1);
    assert.deepEqual(await usuario(u.rowId!), before);
    const { data } = await stack.admin().auth.admin.getUserById(u.id);
    assert.equal(data.user?.email, late);
    const open = await stack.sql`
      select fields from public.auth_sync_intents
      where target_id = ${u.rowId} and settled_at is null`;
    assert.deepEqual(open.map((i) => i.fields), [["email"]]);
  },
);

if (Deno.env.get("TEST_DATABASE_URL")) {
  // PGlite is one session: a transaction held here would stop every other
  // connection, the Auth stand-in's included, so a lock wait cannot arise.
  e2eTest(
    "security: an update whose row is locked longer than lock_timeout is refused (503 db_timeout) before Auth changes anything",
    async () => {
      const u = await stack.createUser({ row: { auth_user_id: true } });
      await stack.sql`update public.usuarios set correo = ${u.email}
                      where id = ${u.rowId}`;
      const holder = await stack.sql.reserve();
      try {
        await holder`begin`;
        await holder`select 1 from public.usuarios where id = ${u.rowId}
                     for update`;
        const started = Date.now();
        const res = await updateAsBoss(stack.apiUrl, {
          id: u.rowId,
          email: uniqueEmail("locked"),
        });
        const waited = Date.now() - started;
        assert.equal(res.status, 503);
        assert.equal(res.body.code, "db_timeout");
        assert.equal(res.body.error, "lock not available (SQLSTATE 55P03)");
        assert.equal(res.headers.get("retry-after"), "1");
        assert.ok(waited < 60_000, `waited ${waited} ms, past the lease`);
      } finally {
        await holder`rollback`;
        holder.release();
      }
      const { data } = await stack.admin().auth.admin.getUserById(u.id);
      assert.equal(data.user?.email, u.email);
    },
  );
}

e2eTest(
  "security: refused auth-sync calls are logged with their code and the account's id, never its token or email",
  async () => {
    const nobody = await stack.createUser({ row: { auth_user_id: true } });
    const lines = await logLines(async () => {
      const unauthenticated = await call(stack.apiUrl, "auth-sync", {
        headers: { Authorization: "Bearer not.a.token" },
      });
      assert.equal(unauthenticated.status, 401);
      const forbidden = await invoke(nobody.client, "auth-sync", {
        body: { action: "sync" },
      });
      assert.equal(forbidden.status, 403);
    });
    const refused = jsonLines(lines).filter((l) => l.fn === "auth-sync");
    assert.deepEqual(refused.map((l) => [l.level, l.status, l.code]), [
      ["warn", 401, "invalid_token"],
      ["warn", 403, "admin_required"],
    ], "one line per call, at warn");
    assert.equal(refused[1].actor_auth_user_id, nobody.id);
    assert.ok(!lines.join("\n").includes(nobody.token));
    assert.ok(!lines.join("\n").includes(nobody.email));
  },
);

e2eTest(
  "security: a database failure keeps the spec's error field (presence_update_failed; internal_error in presence and auth-sync) and names no host, port, user or database",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const closed = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const port = (closed.addr as Deno.NetAddr).port;
    closed.close();
    const served = await stack.withFunctionEnv({
      SUPABASE_DB_URL:
        `postgresql://secretuser:secretpw@127.0.0.1:${port}/secretdb`,
    });
    try {
      for (
        const [fn, message, code] of [
          [
            "presence-ping",
            "Error actualizando presencia",
            "presence_update_failed",
          ],
          ["presence", "Error interno", "internal_error"],
          ["auth-sync", "Error interno", "internal_error"],
        ]
      ) {
        const res = await call(served.apiUrl, fn, {
          headers: { Authorization: `Bearer ${u.token}` },
        });
        assert.equal(res.status, 500, fn);
        assert.equal(res.body.message, message, fn);
        assert.equal(res.body.code, code, fn);
        assert.equal(res.body.error, "database unreachable (ECONNREFUSED)", fn);
        const text = JSON.stringify(res.body);
        for (
          const secret of ["secretuser", "secretpw", "secretdb", "127.0.0.1"]
        ) {
          assert.ok(!text.includes(secret), secret);
        }
        assert.ok(!text.includes(String(port)));
      }
    } finally {
      await served.close();
    }
  },
);

e2eTest(
  "security: when the fast path cannot read the auth schema, pings are answered through Auth and it is logged once",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const served = await stack.withFunctionEnv({});
    // A changed Auth schema: the column the fast path reads is gone (the
    // stand-in reads sessions as whole rows and does not mind).
    await stack
      .sql`alter table auth.sessions rename column not_after to not_after_moved`;
    try {
      const lines = await logLines(async () => {
        for (let i = 0; i < 3; i++) {
          const res = await call(served.apiUrl, "presence-ping", {
            headers: { Authorization: `Bearer ${u.token}` },
          });
          assert.equal(res.status, 200);
          assert.equal(res.body.user.id, u.rowId);
        }
      });
      const warnings = lines.filter((l) =>
        l.includes("Fast path cannot read the auth schema")
      );
      assert.equal(warnings.length, 1);
      assert.equal(JSON.parse(warnings[0]).sqlstate, "42703");
    } finally {
      await stack
        .sql`alter table auth.sessions rename column not_after_moved to not_after`;
      await served.close();
    }
  },
);

e2eTest(
  "security: one normalisation (lower, no trim): a padded correo is matched neither by presence-ping nor by sync",
  async () => {
    const u = await stack.createUser();
    const [r] = await stack.sql`
      insert into public.usuarios (correo) values (${`  ${u.email.toUpperCase()} `})
      returning id`;
    const ping = await invoke(u.client, "presence-ping");
    assert.equal(ping.status, 404);
    const sync = await invoke(boss.client, "auth-sync", {
      body: { action: "sync", ids: [Number(r.id)], dry_run: true },
    });
    // Not linked, and told why: the row's correo is not an address as it
    // stands (no_identity would say no account has it).
    assert.deepEqual(sync.body.results, [
      { id: Number(r.id), status: "invalid_email", auth_user_id: null },
    ]);
  },
);

// ----------------------------------------------------- smaller findings

e2eTest(
  "security: two administrators setting the same new email at once: one 200, one 409 email_exists, never 503",
  async () => {
    const a = await stack.createUser({
      row: { auth_user_id: true, correo: uniqueEmail("race-a") },
    });
    const b = await stack.createUser({
      row: { auth_user_id: true, correo: uniqueEmail("race-b") },
    });
    const wanted = uniqueEmail("race-target");
    const [first, second] = await Promise.all([
      updateAsBoss(stack.apiUrl, { id: a.rowId, email: wanted }),
      updateAsBoss(stack.apiUrl, { id: b.rowId, email: wanted }),
    ]);
    assert.deepEqual(
      [first.status, second.status].sort(),
      [200, 409],
      JSON.stringify([first.body, second.body]),
    );
    const lost = first.status === 409 ? first : second;
    assert.equal(lost.body.code, "email_exists");
  },
);

e2eTest(
  "security: when Auth's unique index refuses an email another update took meanwhile (500), auth-sync answers 409 email_exists and changes nothing",
  async () => {
    const winner = await stack.createUser({
      row: { auth_user_id: true, correo: uniqueEmail("winner") },
    });
    const loser = await stack.createUser({
      row: { auth_user_id: true, correo: uniqueEmail("loser") },
    });
    const wanted = uniqueEmail("contested");
    const before = await usuario(loser.rowId!);
    await withAdminWriteProxy(async (req, forward) => {
      if (req.method === "PUT" && req.url.includes(loser.id)) {
        // The concurrent update lands first, between auth-sync's own check
        // and its call: Auth then fails on its unique index with a 500.
        const { error } = await stack.admin().auth.admin.updateUserById(
          winner.id,
          { email: wanted, email_confirm: true },
        );
        assert.equal(error, null);
        const res = await forward();
        assert.equal(res.status, 500);
        return res;
      }
      return await forward();
    }, async (apiUrl) => {
      const res = await updateAsBoss(apiUrl, {
        id: loser.rowId,
        email: wanted,
        password: "Loser-pw-123",
      });
      assert.equal(res.status, 409, JSON.stringify(res.body));
      assert.equal(res.body.code, "email_exists");
    });
    assert.deepEqual(await usuario(loser.rowId!), before);
    assert.equal(await canSignIn(loser.email, loser.password), true);
    const [audit] = await stack.sql`
      select outcome, detail from public.auth_sync_audit
      where target_id = ${loser.rowId} order by id desc limit 1`;
    assert.deepEqual({ ...audit }, {
      outcome: "failed",
      detail: "email_exists",
    });
  },
);

e2eTest(
  "security: a weak password keeps Auth's message word for word, and the password itself is logged nowhere",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    let res: Awaited<ReturnType<typeof updateAsBoss>> | null = null;
    const lines = await logLines(async () => {
      res = await updateAsBoss(stack.apiUrl, {
        id: u.rowId,
        password: "Zq!9x",
      });
    });
    assert.equal(res!.status, 422);
    assert.equal(res!.body.code, "weak_password");
    assert.equal(res!.body.error, "Password should be at least 6 characters.");
    assert.ok(!lines.join("\n").includes("Zq!9x"));
  },
);

e2eTest(
  "startTestStack: refuses a stack it did not start (E2E_SUPABASE_URL) before touching it",
  async () => {
    let requests = 0;
    const foreign = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen: () => {} },
      () => {
        requests++;
        return new Response("{}");
      },
    );
    Deno.env.set("E2E_SUPABASE_URL", `http://127.0.0.1:${foreign.addr.port}`);
    try {
      await assert.rejects(
        startTestStack(),
        /"E2E_SUPABASE_URL" set: the tests run only against a stack they start themselves/,
      );
    } finally {
      Deno.env.delete("E2E_SUPABASE_URL");
      await foreign.shutdown();
    }
    assert.equal(requests, 0);
  },
);

const ROL_COMMENT = "Role; administrador, admin, superadmin and super-admin " +
  "grant administrator rights only on a row linked to the caller by " +
  "auth_user_id, never on a row matched by correo or nombre_usuario.";

async function rolComment(sql: postgres.Sql): Promise<string | null> {
  const [r] = await sql`
    select col_description('public.usuarios'::regclass, a.attnum) as c
    from pg_attribute a
    where a.attrelid = 'public.usuarios'::regclass and a.attname = 'rol'`;
  return r.c;
}

e2eTest(
  "migrations: the comment on usuarios.rol says only a row linked by auth_user_id grants rights",
  async () => {
    assert.equal(await rolComment(stack.sql), ROL_COMMENT);
  },
);

e2eTest(
  "migrations: the rol comment fix leaves an owner's own comment alone",
  async () => {
    const db = await createTestDatabase();
    const sql = postgres(db.url, {
      max: 1,
      prepare: false,
      onnotice: () => {},
    });
    try {
      await sql.unsafe(
        await Deno.readTextFile(
          `${MIGRATIONS}/20261122080000_create_usuarios.sql`,
        ),
      );
      await sql`comment on column public.usuarios.rol is 'Our own words.'`;
      await sql.unsafe(
        await Deno.readTextFile(
          `${MIGRATIONS}/20261124010100_comment_usuarios_rol.sql`,
        ),
      );
      assert.equal(await rolComment(sql), "Our own words.");
    } finally {
      await sql.end();
      await db.close();
    }
  },
);

// ------------------------------------------------- legacy keys turned off

e2eTest(
  "security: once the project turns its legacy API keys off, the service_role JWT still in the functions' environment makes no trusted caller (401, nothing changed); the secret key still does",
  async () => {
    // The platform keeps injecting SUPABASE_SERVICE_ROLE_KEY after legacy
    // keys are turned off (the usual answer to that key leaking).
    const off = await startTestStack({ legacyApiKeys: false });
    try {
      const u = await off.createUser({
        row: { correo: null, nombre_usuario: "kept", auth_user_id: true },
      });
      const attempt = (headers: Record<string, string>) =>
        call(off.apiUrl, "auth-sync", {
          headers: { ...headers, "Content-Type": "application/json" },
          body: JSON.stringify({
            action: "update",
            id: u.rowId,
            nombre_usuario: "taken-over",
            password: "attacker-password-1",
          }),
        });
      const bearer = `Bearer ${off.serviceRoleKey}`;
      const ways: Record<string, string>[] = [
        { Authorization: bearer },
        { apikey: off.serviceRoleKey },
        { apikey: off.serviceRoleKey, Authorization: bearer },
      ];
      for (const headers of ways) {
        const res = await attempt(headers);
        assert.equal(res.status, 401, JSON.stringify(headers).slice(0, 20));
        assert.equal(res.body.code, "invalid_token");
        assert.equal(res.body.error, "Legacy API keys are disabled");
      }
      const [row] = await off.sql`
        select nombre_usuario from public.usuarios where id = ${u.rowId}`;
      assert.equal(row.nombre_usuario, "kept");
      const signIn = await off.anon().auth.signInWithPassword({
        email: u.email,
        password: "attacker-password-1",
      });
      assert.ok(signIn.error, "the password was not changed");

      // The project's secret key is still a trusted caller, and the
      // functions serve users through the publishable key.
      const office = await call(off.apiUrl, "auth-sync", {
        headers: { apikey: off.secretKey, "Content-Type": "application/json" },
        body: JSON.stringify({
          action: "update",
          id: u.rowId,
          nombre_usuario: "renamed",
        }),
      });
      assert.equal(office.status, 200, JSON.stringify(office.body));
      const ping = await invoke(u.client, "presence-ping", {
        body: { state: "online" },
      });
      assert.equal(ping.status, 200);
      assert.equal(ping.body.user.id, u.rowId);
    } finally {
      await off.close();
    }
  },
);

// ------------------------------------------------- a deleted secret key

e2eTest(
  "security: a secret key the project deleted, still in a running function's SUPABASE_SECRET_KEYS, makes no trusted caller (401 Invalid API key, nothing changed); the key kept still does",
  async () => {
    assert.ok(stack.secretKey, "the stack has the new API keys");
    // The isolate started while both keys existed; the project's gateway
    // (and Auth behind it) no longer knows the deleted one.
    const deleted = `sb_secret_${crypto.randomUUID().replaceAll("-", "")}`;
    const running = await stack.withFunctionEnv({
      SUPABASE_SECRET_KEYS: JSON.stringify({
        default: stack.secretKey,
        leaked: deleted,
      }),
    });
    try {
      const u = await stack.createUser({
        row: {
          correo: null,
          nombre_usuario: `kept-${crypto.randomUUID().slice(0, 8)}`,
          auth_user_id: true,
        },
      });
      const [{ nombre_usuario: name }] = await stack.sql`
        select nombre_usuario from public.usuarios where id = ${u.rowId}`;
      const attempt = (headers: Record<string, string>) =>
        call(running.apiUrl, "auth-sync", {
          headers: { ...headers, "Content-Type": "application/json" },
          body: JSON.stringify({
            action: "update",
            id: u.rowId,
            nombre_usuario: `taken-${crypto.randomUUID().slice(0, 8)}`,
            password: "attacker-password-1",
          }),
        });
      for (
        const headers of [
          { apikey: deleted },
          { Authorization: `Bearer ${deleted}` },
        ] as Record<string, string>[]
      ) {
        const res = await attempt(headers);
        assert.equal(res.status, 401, JSON.stringify(res.body));
        assert.equal(res.body.code, "invalid_token");
        assert.equal(res.body.error, "Invalid API key");
      }
      const [row] = await stack.sql`
        select nombre_usuario from public.usuarios where id = ${u.rowId}`;
      assert.equal(row.nombre_usuario, name);
      const signIn = await stack.anon().auth.signInWithPassword({
        email: u.email,
        password: "attacker-password-1",
      });
      assert.ok(signIn.error, "the password was not changed");
      const kept = await call(running.apiUrl, "auth-sync", {
        headers: {
          apikey: stack.secretKey,
          "Content-Type": "application/json",
        },
        body: JSON.stringify({
          action: "update",
          id: u.rowId,
          nombre_usuario: `renamed-${crypto.randomUUID().slice(0, 8)}`,
        }),
      });
      assert.equal(kept.status, 200, JSON.stringify(kept.body));
    } finally {
      await running.close();
    }
  },
);

// ------------------------------------------------- legacy shape, last

e2eTest(
  "security: without the auth_user_id column rol grants no rights, ADMIN_EMAILS still does",
  async () => {
    // Last: the column stays dropped for the rest of the file.
    const email = uniqueEmail("legacy-admin");
    await stack.sql`insert into public.usuarios (correo, rol)
                    values (${email}, 'superadmin')`;
    await stack.sql`alter table public.usuarios drop column auth_user_id`;
    const claimant = await signUp(email);
    const refused = await invoke(claimant.client, "auth-sync", {
      body: { action: "sync", dry_run: true },
    });
    assert.equal(refused.status, 403);
    const allowed = await invoke(boss.client, "auth-sync", {
      body: { action: "sync", dry_run: true, limit: 1 },
    });
    assert.equal(allowed.status, 200);
  },
);

closeStackAfterAll("security", stack);
