/**
 * What proves an address (docs/security.md "Administrator rights",
 * `_shared/email_proof.ts`), end to end with confirmations on: a mail
 * confirmation proves only the address the account's `email` identity
 * holds. An address the account got without a mail to it (Supabase Auth's
 * identity unlink promotes an OAuth provider's email and deletes the email
 * identity, `models/user.go` UpdateUserEmailFromIdentities, keeping both
 * times) earns no `ADMIN_EMAILS` rights and no link by `sync`; the flows
 * that do mail the address still prove it. Both readers of the rule are
 * covered: Auth's answer (`authenticate`, the caller's rights) and
 * auth-sync's read of `auth.users` (`accounts.ts`, the links `sync` makes).
 * PGlite, or PostgreSQL with `TEST_DATABASE_URL`.
 */
import assert from "node:assert/strict";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { follow, mails } from "../support/inbox.ts";
import { call, type Invoked } from "../support/invoke.ts";
import { startTestStack, type TestStack } from "../support/stack.ts";

function listed(tag: string): string {
  return `${tag}-${crypto.randomUUID().slice(0, 8)}@corp.test`;
}

const UNLINKED = listed("unlinked");
const DROPPED = listed("dropped");
const SIGNED_UP = listed("signedup");
const CHANGED = listed("changed");
const SET_BY_ADMIN = listed("adminset");
const INVITED = listed("invited");
const CLAIMED = listed("claimed");
const BOSS = listed("boss");
const STRANGER = listed("stranger");
const RESENT = listed("resent");
const WITHDRAWN = listed("withdrawn");
const BANNED = listed("banned");

const stack: TestStack = await startTestStack({
  emailConfirmations: true,
  functionEnv: {
    ADMIN_EMAILS: [
      UNLINKED,
      DROPPED,
      SIGNED_UP,
      CHANGED,
      SET_BY_ADMIN,
      INVITED,
      CLAIMED,
      BOSS,
      STRANGER,
      RESENT,
      WITHDRAWN,
      BANNED,
    ].join(","),
  },
});

/** An administrator by rol, who runs `sync` for the link tests. */
const rowAdmin = await stack.createUser({
  row: { auth_user_id: true, rol: "admin" },
});

async function authSync(token: string, body: unknown): Promise<Invoked> {
  return await call(stack.apiUrl, "auth-sync", {
    headers: {
      Authorization: `Bearer ${token}`,
      "Content-Type": "application/json",
    },
    body: JSON.stringify(body),
  });
}

/**
 * Whether the bearer of `token` has administrator rights: 200, or the
 * refusal of a user without them (403, or 404 without a row of their own).
 */
async function isAdministrator(token: string): Promise<boolean> {
  const res = await authSync(token, { action: "sync", dry_run: true });
  if (res.status === 200) return true;
  assert.ok(
    ["admin_required", "user_not_found"].includes(res.body?.code),
    JSON.stringify(res),
  );
  return false;
}

/** A fresh access token of `user`'s session (the account as it is now). */
async function freshToken(
  user: Awaited<ReturnType<TestStack["createUser"]>>,
): Promise<string> {
  const { data, error } = await user.client.auth.refreshSession();
  if (error) throw error;
  return data.session!.access_token;
}

/**
 * What Auth's unlink of the email identity leaves when the remaining
 * identity is an OAuth provider's with a verified email: that email becomes
 * the account's, `email_confirmed_at` and `confirmation_sent_at` stay, the
 * email identity is gone, the session lives on.
 */
async function unlinkToOAuthEmail(userId: string, email: string) {
  await stack.sql`
    insert into auth.identities
      (provider_id, user_id, identity_data, provider, created_at, updated_at)
    values (${`gh-${userId}`}, ${userId}::uuid,
            ${
    stack.sql.json({ sub: `gh-${userId}`, email, email_verified: true })
  },
            'github', now(), now())`;
  await stack.sql`delete from auth.identities
                  where user_id = ${userId}::uuid and provider = 'email'`;
  await stack.sql`update auth.users set email = ${email}
                  where id = ${userId}::uuid`;
}

e2eTest(
  "email proof: a listed address promoted from an OAuth identity on unlink (never mailed) earns no ADMIN_EMAILS rights and no link, though the account confirmed its first address by mail",
  async () => {
    const pest = await stack.createUser({
      email: listed("own"),
      confirmed: "by-mail",
    });
    const [victimRow] = await stack.sql`
      insert into public.usuarios (correo) values (${UNLINKED}) returning id`;
    assert.equal(await isAdministrator(pest.token), false);
    await unlinkToOAuthEmail(pest.id, UNLINKED);
    const [account] = await stack.sql`
      select email, email_confirmed_at > confirmation_sent_at as mailed_before
      from auth.users where id = ${pest.id}::uuid`;
    assert.deepEqual({ ...account }, { email: UNLINKED, mailed_before: true });

    assert.equal(await isAdministrator(await freshToken(pest)), false);
    const sync = await authSync(rowAdmin.token, {
      action: "sync",
      ids: [Number(victimRow.id)],
    });
    assert.equal(sync.status, 200, JSON.stringify(sync.body));
    assert.deepEqual(sync.body.results, [
      { id: Number(victimRow.id), status: "unverified", auth_user_id: null },
    ]);
  },
);

e2eTest(
  "email proof: an account whose email identity is deleted keeps no mail proof of its address",
  async () => {
    const u = await stack.createUser({ email: DROPPED, confirmed: "by-mail" });
    assert.equal(await isAdministrator(u.token), true);
    await stack.sql`delete from auth.identities
                    where user_id = ${u.id}::uuid and provider = 'email'`;
    assert.equal(await isAdministrator(await freshToken(u)), false);
  },
);

e2eTest(
  "email proof: a sign-up confirmed by mail proves its address (rights, and a link by sync)",
  async () => {
    const u = await stack.createUser({
      email: SIGNED_UP,
      confirmed: "by-mail",
      row: { correo: SIGNED_UP },
    });
    assert.equal(await isAdministrator(u.token), true);
    const sync = await authSync(rowAdmin.token, {
      action: "sync",
      ids: [u.rowId],
    });
    assert.deepEqual(sync.body.results, [
      { id: u.rowId, status: "linked", auth_user_id: u.id },
    ]);
  },
);

e2eTest(
  "email proof: an email change confirmed by mail proves the new address",
  async () => {
    const u = await stack.createUser({
      email: listed("before"),
      confirmed: "by-mail",
    });
    assert.equal(await isAdministrator(u.token), false);
    const change = await u.client.auth.updateUser({ email: CHANGED });
    assert.equal(change.error, null);
    // Secure email change: a link to each address, both followed.
    const [toOld] = (await mails(stack.apiUrl, u.email)).filter((m) =>
      m.type === "email_change"
    );
    const [toNew] = (await mails(stack.apiUrl, CHANGED)).filter((m) =>
      m.type === "email_change"
    );
    await follow(toOld.link);
    const done = await follow(toNew.link);
    assert.equal(done.get("type"), "email_change", `${done}`);
    assert.equal(await isAdministrator(done.get("access_token")!), true);
  },
);

e2eTest(
  "email proof: an email an operator sets through the admin API carries the account's mail proof over (the operator vouches for it)",
  async () => {
    const u = await stack.createUser({
      email: listed("moved"),
      confirmed: "by-mail",
    });
    const { error } = await stack.admin().auth.admin.updateUserById(u.id, {
      email: SET_BY_ADMIN,
      email_confirm: true,
    });
    assert.equal(error, null);
    assert.equal(await isAdministrator(await freshToken(u)), true);
  },
);

e2eTest(
  "email proof: an accepted invite holds an email identity for its address, and (docs/security.md) no mail proof: Auth clears confirmation_sent_at as it sets the first password, so an invited administrator is stamped",
  async () => {
    const { data, error } = await stack.admin().auth.admin.inviteUserByEmail(
      INVITED,
    );
    assert.equal(error, null);
    const [invite] = await mails(stack.apiUrl, INVITED);
    assert.equal(invite.type, "invite");
    const accepted = await follow(invite.link);
    const token = accepted.get("access_token")!;
    const [identity] = await stack.sql`
      select i.identity_data ->> 'email' as email, a.confirmation_sent_at
      from auth.identities i join auth.users a on a.id = i.user_id
      where i.user_id = ${data.user!.id}::uuid and i.provider = 'email'`;
    assert.deepEqual({ ...identity }, {
      email: INVITED,
      confirmation_sent_at: null,
    });
    assert.equal(await isAdministrator(token), false);
    await stack.admin().auth.admin.updateUserById(data.user!.id, {
      app_metadata: { admin_verified_email: INVITED },
    });
    assert.equal(await isAdministrator(token), true);
  },
);

/** An administrator by ADMIN_EMAILS (stamped), with a row of its own. */
const boss = await stack.createUser({
  email: BOSS,
  adminVerified: true,
  row: { auth_user_id: true },
});

/** The account's email and whether it is confirmed, as Auth holds them. */
async function accountOf(id: string) {
  const [a] = await stack.sql`
    select email, email_confirmed_at is not null as confirmed
    from auth.users where id = ${id}::uuid`;
  return { ...a };
}

/**
 * A stranger's sign-up with a listed address whose mail nobody follows,
 * and the row the app's own sign-up trigger would give it, linked by
 * `auth_user_id` (the usual profile pattern).
 */
async function unconfirmedSignUp(email: string) {
  const client = stack.anon();
  const password = `Str4nger-${crypto.randomUUID()}`;
  const { data, error } = await client.auth.signUp({ email, password });
  assert.equal(error, null);
  const id = data.user!.id;
  const [row] = await stack.sql`
    insert into public.usuarios (correo, auth_user_id)
    values (${email}, ${id}::uuid) returning id`;
  const signIn = async () =>
    (await client.auth.signInWithPassword({ email, password })).error?.code ??
      "signed in";
  assert.equal(await signIn(), "email_not_confirmed");
  return { id, rowId: Number(row.id), signIn };
}

e2eTest(
  "listed addresses: an administrator by rol can neither move an account onto a listed address nor change a listed account's password (403 listed_account, nothing changed); a username change still goes, and an ADMIN_EMAILS administrator may do both",
  async () => {
    const climber = await stack.createUser({
      confirmed: "by-mail",
      row: { rol: "admin", auth_user_id: true },
    });
    assert.equal(await isAdministrator(climber.token), true);
    const moved = await authSync(climber.token, {
      action: "update",
      id: climber.rowId,
      email: CLAIMED,
    });
    assert.equal(moved.status, 403, JSON.stringify(moved.body));
    assert.equal(moved.body.code, "listed_account");
    assert.deepEqual(await accountOf(climber.id), {
      email: climber.email,
      confirmed: true,
    });
    const [row] = await stack.sql`
      select correo from public.usuarios where id = ${climber.rowId!}`;
    assert.equal(row.correo, null);

    const password = `Taken-${crypto.randomUUID()}`;
    const takeover = await authSync(climber.token, {
      action: "update",
      id: boss.rowId,
      password,
    });
    assert.equal(takeover.status, 403, JSON.stringify(takeover.body));
    assert.equal(takeover.body.code, "listed_account");
    const signIn = await stack.anon().auth.signInWithPassword({
      email: BOSS,
      password,
    });
    assert.equal(signIn.error?.code, "invalid_credentials");
    const audit = await stack.sql`
      select target_id, fields, outcome, detail from public.auth_sync_audit
      where actor_auth_user_id = ${climber.id}::uuid order by id`;
    assert.deepEqual(audit.map((a) => ({ ...a })), [
      {
        target_id: String(climber.rowId),
        fields: ["email"],
        outcome: "failed",
        detail: "listed_account",
      },
      {
        target_id: String(boss.rowId),
        fields: ["password"],
        outcome: "failed",
        detail: "listed_account",
      },
    ]);

    const renamed = await authSync(climber.token, {
      action: "update",
      id: boss.rowId,
      nombre_usuario: `boss-${boss.rowId}`,
    });
    assert.equal(renamed.status, 200, JSON.stringify(renamed.body));

    // The operator's own administrator vouches for the address.
    const vouched = await authSync(boss.token, {
      action: "update",
      id: climber.rowId,
      email: CLAIMED,
    });
    assert.equal(vouched.status, 200, JSON.stringify(vouched.body));
    assert.deepEqual(await accountOf(climber.id), {
      email: CLAIMED,
      confirmed: true,
    });
  },
);

e2eTest(
  "listed addresses: an account an administrator by rol moved onto an address the operator lists later is no ADMIN_EMAILS administrator (its mail proof was of its earlier address: authsync2 M1); the operator's stamp makes it one",
  async () => {
    const future = listed("future");
    const climber = await stack.createUser({
      row: { rol: "admin", auth_user_id: true },
    });
    // An account the climber controls: signed up and confirmed by mail at
    // its own mailbox, an ordinary row.
    const pawn = await stack.createUser({
      confirmed: "by-mail",
      row: { auth_user_id: true },
    });
    const moved = await authSync(climber.token, {
      action: "update",
      id: pawn.rowId,
      email: future,
    });
    assert.equal(moved.status, 200, JSON.stringify(moved.body));
    // The climber's rol is revoked; the operator lists the address.
    await stack.sql`update public.usuarios set rol = 'usuario'
                    where id = ${climber.rowId!}`;
    const served = await stack.withFunctionEnv({ ADMIN_EMAILS: future });
    try {
      const asPawn = async () =>
        (await call(served.apiUrl, "auth-sync", {
          headers: { Authorization: `Bearer ${await freshToken(pawn)}` },
          body: JSON.stringify({ action: "sync", dry_run: true }),
        })).status;
      assert.equal(await asPawn(), 403);
      await stack.admin().auth.admin.updateUserById(pawn.id, {
        app_metadata: { admin_verified_email: future },
      });
      assert.equal(await asPawn(), 200);
    } finally {
      await served.close();
    }
  },
);

e2eTest(
  "withdrawing a listed administrator as docs/security.md says: removing the stamp leaves an address proven by mail too; a password change ends the mail's proof and the account's sessions; a ban refuses the account at once (authsync2 M2)",
  async () => {
    const withdrawn = await stack.createUser({
      email: WITHDRAWN,
      confirmed: "by-mail",
      adminVerified: true,
    });
    assert.equal(await isAdministrator(withdrawn.token), true);
    const admin = stack.admin().auth.admin;
    await admin.updateUserById(withdrawn.id, {
      app_metadata: { admin_verified_email: null },
    });
    assert.equal(await isAdministrator(await freshToken(withdrawn)), true);
    const password = `New-${crypto.randomUUID()}`;
    await admin.updateUserById(withdrawn.id, { password });
    // Auth ends every session of the account as it sets a password.
    const stale = await authSync(withdrawn.token, { action: "sync" });
    assert.equal(stale.status, 401, JSON.stringify(stale.body));
    const signIn = await stack.anon().auth.signInWithPassword({
      email: WITHDRAWN,
      password,
    });
    assert.equal(signIn.error, null);
    assert.equal(
      await isAdministrator(signIn.data.session!.access_token),
      false,
    );

    const banned = await stack.createUser({
      email: BANNED,
      adminVerified: true,
    });
    assert.equal(await isAdministrator(banned.token), true);
    await admin.updateUserById(banned.id, { ban_duration: "876000h" });
    // The access token it holds is still unexpired.
    const res = await authSync(banned.token, { action: "sync", dry_run: true });
    assert.equal(res.status, 401, JSON.stringify(res.body));
  },
);

e2eTest(
  "unconfirmed accounts: an update that re-sends a linked account's own email (an admin form sent as it is) changes nothing at Auth: a stranger's unfollowed sign-up at a listed address stays unconfirmed and cannot sign in",
  async () => {
    const stranger = await unconfirmedSignUp(RESENT);
    const res = await authSync(boss.token, {
      action: "update",
      id: stranger.rowId,
      email: RESENT,
      nombre_usuario: `resent-${stranger.rowId}`,
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    // Only what changed is reported and audited.
    assert.deepEqual(res.body.changed, ["nombre_usuario"]);
    const again = await authSync(boss.token, {
      action: "update",
      id: stranger.rowId,
      email: RESENT,
      nombre_usuario: `resent-${stranger.rowId}`,
    });
    assert.deepEqual(again.body.changed, []);
    const audit = await stack.sql`
      select fields from public.auth_sync_audit
      where target_id = ${stranger.rowId} order by id`;
    assert.deepEqual(audit.map((a) => a.fields), [["nombre_usuario"], []]);
    assert.deepEqual(await accountOf(stranger.id), {
      email: RESENT,
      confirmed: false,
    });
    assert.equal(await stranger.signIn(), "email_not_confirmed");
    assert.deepEqual(
      (await stack.sql`
        select count(*)::int as n from public.auth_sync_intents
        where target_id = ${stranger.rowId}`)[0].n,
      0,
    );
  },
);

e2eTest(
  "unconfirmed accounts: an email change of a linked unconfirmed account leaves it unconfirmed, and so does its undo after the row write fails",
  async () => {
    const stranger = await unconfirmedSignUp(STRANGER);
    const elsewhere = listed("elsewhere");
    const changed = await authSync(boss.token, {
      action: "update",
      id: stranger.rowId,
      email: elsewhere,
    });
    assert.equal(changed.status, 200, JSON.stringify(changed.body));
    assert.deepEqual(await accountOf(stranger.id), {
      email: elsewhere,
      confirmed: false,
    });
    // Back to the listed address, where the row write fails once Auth
    // holds it (the app's trigger): auth-sync puts the account back.
    await stack.sql.unsafe(`
      create function public.refuse_after_auth() returns trigger
      language plpgsql as $$
      begin
        if new.correo = '${STRANGER}' and exists (
          select 1 from auth.users a where lower(a.email) = new.correo
        ) then raise exception 'refused after Auth changed'; end if;
        return new;
      end $$;
      create trigger refuse_after_auth before update on public.usuarios
      for each row execute function public.refuse_after_auth();`);
    try {
      const back = await authSync(boss.token, {
        action: "update",
        id: stranger.rowId,
        email: STRANGER,
      });
      assert.equal(back.status, 500, JSON.stringify(back.body));
      assert.equal(back.body.code, "sync_failed");
    } finally {
      await stack.sql.unsafe(`
        drop trigger refuse_after_auth on public.usuarios;
        drop function public.refuse_after_auth();`);
    }
    assert.deepEqual(await accountOf(stranger.id), {
      email: elsewhere,
      confirmed: false,
    });
    const intents = await stack.sql`
      select outcome from public.auth_sync_intents
      where target_id = ${stranger.rowId} order by created_at`;
    assert.deepEqual(intents.map((i) => i.outcome), ["applied", "undone"]);
  },
);

closeStackAfterAll("email proof", stack);
