import assert from "node:assert/strict";
import {
  isAuthApiError,
  isAuthError,
  type SupabaseClient,
} from "@supabase/supabase-js";
import {
  confirmedUser,
  freshEmail,
  type Harness,
  json,
  withHarness,
} from "./_harness.ts";
import { LOCAL_ANON_KEY, LOCAL_SERVICE_ROLE_KEY } from "./keys.ts";

/** Follows a link as a browser would: 303, the session in the fragment. */
async function follow(link: string): Promise<URLSearchParams> {
  const res = await fetch(link, { redirect: "manual" });
  assert.equal(res.status, 303);
  await res.body?.cancel();
  const location = new URL(res.headers.get("location")!);
  return new URLSearchParams(location.hash.slice(1));
}

/** Who an access token belongs to, asked of the stand-in. */
async function whoIs(h: Harness, accessToken: string) {
  const { data, error } = await h.anon().auth.getUser(accessToken);
  assert.equal(error, null);
  return data.user!;
}

const SITE = "http://127.0.0.1:3000";

Deno.test("auth generate_link: signup makes an unconfirmed user, answers the link, code and hash as supabase-js parses them, mails nothing; the link confirms and signs in", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    const { data, error } = await h.admin().auth.admin.generateLink({
      type: "signup",
      email,
      password: "secret123",
      options: { data: { plan: "pro" }, redirectTo: `${SITE}/welcome` },
    });
    assert.equal(error, null);
    const p = data.properties!;
    assert.equal(p.verification_type, "signup");
    assert.equal(p.redirect_to, `${SITE}/welcome`);
    assert.match(p.email_otp, /^\d{6}$/);
    assert.match(p.hashed_token, /^[0-9a-f]{56}$/);
    const link = new URL(p.action_link);
    assert.equal(link.origin + link.pathname, `${h.authUrl}/verify`);
    assert.equal(link.searchParams.get("token"), p.hashed_token);
    assert.equal(link.searchParams.get("type"), "signup");
    assert.equal(link.searchParams.get("redirect_to"), `${SITE}/welcome`);
    // data.user is the user alone, none of the link's fields.
    const user = data.user!;
    assert.equal(user.email, email);
    assert.equal(user.email_confirmed_at, undefined);
    assert.ok(user.confirmation_sent_at);
    assert.deepEqual(user.user_metadata, { plan: "pro" });
    assert.deepEqual(user.app_metadata, {
      provider: "email",
      providers: ["email"],
    });
    assert.equal(user.identities?.length, 1);
    assert.ok(!("action_link" in user) && !("hashed_token" in user));
    assert.equal(h.inbox.list().length, 0);

    const session = await follow(p.action_link);
    assert.equal(session.get("type"), "signup");
    const signedIn = await whoIs(h, session.get("access_token")!);
    assert.equal(signedIn.id, user.id);
    assert.ok(signedIn.email_confirmed_at);
    // The password given to generateLink is the account's.
    const login = await h.anon().auth.signInWithPassword({
      email,
      password: "secret123",
    });
    assert.equal(login.error, null);
  });
});

Deno.test("auth generate_link: magiclink for an account answers a sign-in link; verifyOtp takes its hashed_token or its email_otp", async () => {
  await withHarness(async (h) => {
    const { email, user } = await confirmedUser(h);
    const admin = h.admin().auth.admin;
    const first = await admin.generateLink({ type: "magiclink", email });
    assert.equal(first.error, null);
    assert.equal(first.data.properties!.verification_type, "magiclink");
    // No redirect asked for: site_url.
    assert.equal(first.data.properties!.redirect_to, SITE);
    assert.equal(first.data.user!.id, user.id);
    assert.ok(first.data.user!.recovery_sent_at);
    const session = await follow(first.data.properties!.action_link);
    assert.equal(session.get("type"), "magiclink");
    assert.equal((await whoIs(h, session.get("access_token")!)).id, user.id);

    const second = await admin.generateLink({ type: "magiclink", email });
    const byHash = await h.anon().auth.verifyOtp({
      token_hash: second.data.properties!.hashed_token,
      type: "magiclink",
    });
    assert.equal(byHash.error, null);
    assert.equal(byHash.data.user!.id, user.id);

    const third = await admin.generateLink({ type: "magiclink", email });
    const byCode = await h.anon().auth.verifyOtp({
      email,
      token: third.data.properties!.email_otp,
      type: "email",
    });
    assert.equal(byCode.error, null);
    assert.equal(byCode.data.user!.id, user.id);
    assert.equal(h.inbox.list().length, 0);
  });
});

Deno.test("auth generate_link: magiclink for an unknown address is a signup link (a password nobody knows); its link confirms and signs in", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    const { data, error } = await h.admin().auth.admin.generateLink({
      type: "magiclink",
      email,
    });
    assert.equal(error, null);
    assert.equal(data.properties!.verification_type, "signup");
    assert.equal(
      new URL(data.properties!.action_link).searchParams.get("type"),
      "signup",
    );
    const [row] = await h.sql`
      select encrypted_password from auth.users where email = ${email}`;
    assert.match(row.encrypted_password, /^\$2a\$10\$/);
    const session = await follow(data.properties!.action_link);
    assert.equal(session.get("type"), "signup");
    assert.equal(
      (await whoIs(h, session.get("access_token")!)).id,
      data.user!.id,
    );
  });
});

Deno.test("auth generate_link: recovery answers a recovery link that signs in with type=recovery; updateUser then sets the password", async () => {
  await withHarness(async (h) => {
    const { email, user } = await confirmedUser(h);
    const { data, error } = await h.admin().auth.admin.generateLink({
      type: "recovery",
      email,
      options: { redirectTo: `${SITE}/reset` },
    });
    assert.equal(error, null);
    assert.equal(data.properties!.verification_type, "recovery");
    const session = await follow(data.properties!.action_link);
    assert.equal(session.get("type"), "recovery");
    const client = h.anon();
    await client.auth.setSession({
      access_token: session.get("access_token")!,
      refresh_token: session.get("refresh_token")!,
    });
    const changed = await client.auth.updateUser({ password: "new-secret" });
    assert.equal(changed.error, null);
    const login = await h.anon().auth.signInWithPassword({
      email,
      password: "new-secret",
    });
    assert.equal(login.data.user!.id, user.id);
  });
});

Deno.test("auth generate_link: email_change_current and email_change_new answer links that switch the email (autoconfirm: at once)", async () => {
  await withHarness(async (h) => {
    const admin = h.admin().auth.admin;
    for (const type of ["email_change_current", "email_change_new"] as const) {
      const { email, user } = await confirmedUser(h);
      const newEmail = freshEmail("new");
      const { data, error } = await admin.generateLink({
        type,
        email,
        newEmail,
      });
      assert.equal(error, null);
      assert.equal(data.properties!.verification_type, type);
      assert.equal(data.user!.new_email, newEmail);
      const link = new URL(data.properties!.action_link).searchParams;
      assert.equal(link.get("type"), "email_change");
      // As in Supabase Auth, hashed_token is hashed with the current
      // address; the new address's link carries its own token.
      assert.equal(
        link.get("token") === data.properties!.hashed_token,
        type === "email_change_current",
      );
      const session = await follow(data.properties!.action_link);
      assert.equal(session.get("type"), "email_change");
      const after = await whoIs(h, session.get("access_token")!);
      assert.equal(after.id, user.id);
      assert.equal(after.email, newEmail);
    }
    assert.equal(h.inbox.list().length, 0);
  });
});

Deno.test("auth generate_link: with confirmations on, the email_change_current link is the first of two", async () => {
  await withHarness(async (h) => {
    const { email } = await confirmedUser(h);
    const { data } = await h.admin().auth.admin.generateLink({
      type: "email_change_current",
      email,
      newEmail: freshEmail("new"),
    });
    const res = await fetch(data.properties!.action_link, {
      redirect: "manual",
    });
    await res.body?.cancel();
    const fragment = new URLSearchParams(
      new URL(res.headers.get("location")!).hash.slice(1),
    );
    assert.match(fragment.get("message")!, /^Confirmation link accepted/);
    const [row] = await h.sql`
      select email, email_change_confirm_status from auth.users
      where email = ${email}`;
    assert.equal(row.email_change_confirm_status, 1);
  }, { mailerAutoconfirm: false });
});

Deno.test("auth generate_link: errors as Supabase Auth answers them", async () => {
  await withHarness(async (h) => {
    const admin = h.admin().auth.admin;
    const unknown = freshEmail();
    const expectError = async (
      params: Parameters<SupabaseClient["auth"]["admin"]["generateLink"]>[0],
      status: number,
      code: string,
      message: string,
    ) => {
      const { data, error } = await admin.generateLink(params);
      // A weak password is supabase-js's AuthWeakPasswordError.
      assert.ok(isAuthError(error), JSON.stringify(params));
      assert.equal(error.status, status);
      assert.equal(error.code, code);
      assert.equal(error.message, message);
      assert.deepEqual(data, { properties: null, user: null });
    };
    for (const type of ["recovery", "email_change_current"] as const) {
      await expectError(
        { type, email: unknown, newEmail: freshEmail() },
        404,
        "user_not_found",
        "User with this email not found",
      );
    }
    const { email } = await confirmedUser(h);
    await expectError(
      { type: "signup", email, password: "secret123" },
      422,
      "email_exists",
      "A user with this email address has already been registered",
    );
    await expectError(
      { type: "invite", email },
      422,
      "email_exists",
      "A user with this email address has already been registered",
    );
    const other = await confirmedUser(h);
    await expectError(
      { type: "email_change_new", email, newEmail: other.email },
      422,
      "email_exists",
      "A user with this email address has already been registered",
    );
    await expectError(
      { type: "signup", email: unknown, password: "" },
      400,
      "validation_failed",
      "Signup requires a valid password",
    );
    await expectError(
      { type: "signup", email: unknown, password: "abc" },
      422,
      "weak_password",
      "Password should be at least 6 characters.",
    );
    await expectError(
      { type: "signup", email: "not-an-email", password: "secret123" },
      400,
      "validation_failed",
      "Unable to validate email address: invalid format",
    );
    await expectError(
      // deno-lint-ignore no-explicit-any
      { type: "sms" as any, email },
      400,
      "validation_failed",
      "Invalid email action link type requested: sms",
    );
    // None of these made an account.
    const [{ n }] = await h.sql`
      select count(*)::int as n from auth.users where email = ${unknown}`;
    assert.equal(n, 0);

    const asAnon = await h.fetch("/admin/generate_link", {
      method: "POST",
      headers: { Authorization: `Bearer ${LOCAL_ANON_KEY}` },
      body: JSON.stringify({ type: "magiclink", email }),
    });
    assert.equal(asAnon.status, 403);
    assert.equal((await json(asAnon)).error_code, "not_admin");
  });
});

Deno.test("auth generate_link: redirect_to goes through the allow list: a foreign one falls back to site_url", async () => {
  await withHarness(async (h) => {
    const { email } = await confirmedUser(h);
    const admin = h.admin().auth.admin;
    const allowed = await admin.generateLink({
      type: "magiclink",
      email,
      options: { redirectTo: "https://app.example.dev/done" },
    });
    assert.equal(
      allowed.data.properties!.redirect_to,
      "https://app.example.dev/done",
    );
    const foreign = await admin.generateLink({
      type: "recovery",
      email,
      options: { redirectTo: "https://evil.example.com/" },
    });
    assert.equal(foreign.data.properties!.redirect_to, SITE);
    assert.equal(
      new URL(foreign.data.properties!.action_link).searchParams.get(
        "redirect_to",
      ),
      SITE,
    );
    // The body's redirect_to alone (a plain HTTP client) is taken too.
    const res = await h.fetch("/admin/generate_link", {
      method: "POST",
      headers: { Authorization: `Bearer ${LOCAL_SERVICE_ROLE_KEY}` },
      body: JSON.stringify({
        type: "recovery",
        email,
        redirect_to: "https://app.example.dev/body",
      }),
    });
    assert.equal((await json(res)).redirect_to, "https://app.example.dev/body");
  }, { additionalRedirectUrls: ["https://app.example.dev/**"] });
});

Deno.test("auth invite: inviteUserByEmail makes the user with invited_at and mails 'You've been invited'; the link confirms and signs in, and updateUser sets the password", async () => {
  await withHarness(async (h) => {
    const email = freshEmail("invitee");
    const { data, error } = await h.admin().auth.admin.inviteUserByEmail(
      email,
      { data: { team: "blue" }, redirectTo: `${SITE}/accept` },
    );
    assert.equal(error, null);
    const user = data.user!;
    assert.equal(user.email, email);
    assert.ok(user.invited_at);
    assert.equal(user.email_confirmed_at, undefined);
    assert.deepEqual(user.user_metadata, { team: "blue" });

    const mails = h.inbox.list(email);
    assert.equal(mails.length, 1);
    const mail = mails[0];
    assert.equal(mail.type, "invite");
    assert.equal(mail.subject, "You've been invited");
    assert.ok(mail.html.includes("Accept invitation"));
    const link = new URL(mail.link);
    assert.equal(link.searchParams.get("type"), "invite");
    assert.equal(link.searchParams.get("redirect_to"), `${SITE}/accept`);
    assert.ok(mail.html.includes(mail.link.replaceAll("&", "&amp;")));

    const session = await follow(mail.link);
    assert.equal(session.get("type"), "invite");
    const client = h.anon();
    await client.auth.setSession({
      access_token: session.get("access_token")!,
      refresh_token: session.get("refresh_token")!,
    });
    const me = await client.auth.getUser();
    assert.equal(me.data.user!.id, user.id);
    assert.ok(me.data.user!.email_confirmed_at);
    // The link is spent.
    const again = await follow(mail.link);
    assert.equal(again.get("error_code"), "otp_expired");

    const set = await client.auth.updateUser({ password: "chosen-secret" });
    assert.equal(set.error, null);
    const login = await h.anon().auth.signInWithPassword({
      email,
      password: "chosen-secret",
    });
    assert.equal(login.error, null);
    assert.equal(login.data.user!.id, user.id);
  });
});

Deno.test("auth invite: the mailed code works with verifyOtp type invite; an invited user has no password until it accepts", async () => {
  await withHarness(async (h) => {
    const email = freshEmail("invitee");
    await h.admin().auth.admin.inviteUserByEmail(email);
    const [before] = await h.sql`
      select encrypted_password from auth.users where email = ${email}`;
    assert.equal(before.encrypted_password, "");
    const { data, error } = await h.anon().auth.verifyOtp({
      email,
      token: h.inbox.list(email)[0].otp,
      type: "invite",
    });
    assert.equal(error, null);
    assert.equal(data.user!.email, email);
    const [after] = await h.sql`
      select encrypted_password from auth.users where email = ${email}`;
    assert.match(after.encrypted_password, /^\$2a\$10\$/);
  });
});

Deno.test("auth invite: a confirmed address is 422 email_exists, an unconfirmed one is invited again, a bad address 400, a non-admin 403", async () => {
  await withHarness(async (h) => {
    const admin = h.admin().auth.admin;
    const { email } = await confirmedUser(h);
    const taken = await admin.inviteUserByEmail(email);
    assert.ok(isAuthApiError(taken.error));
    assert.equal(taken.error.status, 422);
    assert.equal(taken.error.code, "email_exists");
    assert.equal(h.inbox.list(email).length, 0);

    const invalid = await admin.inviteUserByEmail("not-an-email");
    assert.ok(isAuthApiError(invalid.error));
    assert.equal(invalid.error.status, 400);
    assert.equal(invalid.error.code, "validation_failed");

    const invitee = freshEmail("invitee");
    const first = await admin.inviteUserByEmail(invitee);
    const second = await admin.inviteUserByEmail(invitee);
    assert.equal(second.error, null);
    assert.equal(second.data.user!.id, first.data.user!.id);
    const mails = h.inbox.list(invitee);
    assert.equal(mails.length, 2);
    // Only the newest invite's link works.
    assert.equal(
      (await follow(mails[1].link)).get("error_code"),
      "otp_expired",
    );
    assert.ok((await follow(mails[0].link)).get("access_token"));

    const asAnon = await h.fetch("/invite", {
      method: "POST",
      headers: { Authorization: `Bearer ${LOCAL_ANON_KEY}` },
      body: JSON.stringify({ email: freshEmail() }),
    });
    assert.equal(asAnon.status, 403);
    assert.equal((await json(asAnon)).error_code, "not_admin");
  });
});

Deno.test("auth invite and generate_link: admin paths ignore enable_signup = false", async () => {
  await withHarness(async (h) => {
    const admin = h.admin().auth.admin;
    const invited = await admin.inviteUserByEmail(freshEmail());
    assert.equal(invited.error, null);
    const linked = await admin.generateLink({
      type: "signup",
      email: freshEmail(),
      password: "secret123",
    });
    assert.equal(linked.error, null);
  }, { signupEnabled: false });
});
