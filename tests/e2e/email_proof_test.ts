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

const stack: TestStack = await startTestStack({
  emailConfirmations: true,
  functionEnv: {
    ADMIN_EMAILS: [UNLINKED, DROPPED, SIGNED_UP, CHANGED, SET_BY_ADMIN, INVITED]
      .join(","),
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

closeStackAfterAll("email proof", stack);
