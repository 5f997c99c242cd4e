import assert from "node:assert/strict";
import { isAuthApiError, isAuthWeakPasswordError } from "@supabase/supabase-js";
import {
  confirmedUser,
  freshEmail,
  type Harness,
  json,
  jwtPart,
  withHarness,
} from "./_harness.ts";
import type { Mail } from "./mailer.ts";

/** Follows a mail's link as a browser would, without following the redirect. */
async function follow(mail: Mail): Promise<URL> {
  const res = await fetch(mail.link, { redirect: "manual" });
  assert.equal(res.status, 303);
  await res.body?.cancel();
  return new URL(res.headers.get("location")!);
}

function fragment(url: URL): URLSearchParams {
  return new URLSearchParams(url.hash.slice(1));
}

function only(h: Harness, to: string, type: Mail["type"]): Mail {
  const mails = h.inbox.list(to).filter((m) => m.type === type);
  assert.equal(mails.length, 1, JSON.stringify(h.inbox.list()));
  return mails[0];
}

Deno.test("auth email: resetPasswordForEmail mails a recovery link; following it signs in with type=recovery and updateUser sets the new password", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    const { error: signUpError } = await h.anon().auth.signUp({
      email,
      password: "old-secret",
    });
    assert.equal(signUpError, null);

    const client = h.anon();
    const reset = await client.auth.resetPasswordForEmail(email, {
      redirectTo: "http://127.0.0.1:3000/reset",
    });
    assert.deepEqual(reset, { data: {}, error: null });
    const mail = only(h, email, "recovery");
    assert.equal(mail.subject, "Reset your password");
    assert.match(mail.otp, /^\d{6}$/);
    assert.ok(mail.html.includes("Reset password"));

    const back = await follow(mail);
    assert.equal(back.origin + back.pathname, "http://127.0.0.1:3000/reset");
    const f = fragment(back);
    assert.equal(f.get("type"), "recovery");
    assert.equal(f.get("token_type"), "bearer");
    // A session from a mailed link is an OTP sign-in, as Supabase Auth says.
    const claims = jwtPart(f.get("access_token")!, 1);
    assert.deepEqual(
      (claims.amr as { method: string }[]).map((a) => a.method),
      [
        "otp",
      ],
    );
    const session = await client.auth.setSession({
      access_token: f.get("access_token")!,
      refresh_token: f.get("refresh_token")!,
    });
    assert.equal(session.error, null);
    assert.equal(session.data.user?.email, email);
    const updated = await client.auth.updateUser({ password: "new-secret" });
    assert.equal(updated.error, null);

    const old = await h.anon().auth.signInWithPassword({
      email,
      password: "old-secret",
    });
    assert.equal(old.error?.code, "invalid_credentials");
    const fresh = await h.anon().auth.signInWithPassword({
      email,
      password: "new-secret",
    });
    assert.equal(fresh.error, null);

    // A link works once.
    const again = fragment(await follow(mail));
    assert.equal(again.get("error"), "access_denied");
    assert.equal(again.get("error_code"), "otp_expired");
    assert.equal(
      again.get("error_description"),
      "Email link is invalid or has expired",
    );
  });
});

Deno.test("auth email: a mail's redirect_to is picked as Supabase Auth's GetReferrer: the redirect_to header, else the query's, when allowed; else an allowed Referer; else site_url", async () => {
  await withHarness(async (h) => {
    const { email } = await confirmedUser(h);
    const site = "http://127.0.0.1:3000";
    const referer = `${site}/from-referer`;
    const cases: [Record<string, string>, string, string][] = [
      [{ Referer: referer }, "?redirect_to=https://evil.example/x", referer],
      [{ Referer: referer }, "?redirect_to=", referer],
      [{ Referer: referer }, `?redirect_to=${site}/asked`, `${site}/asked`],
      [
        { Referer: referer, redirect_to: `${site}/header` },
        `?redirect_to=${site}/asked`,
        `${site}/header`,
      ],
      [
        { Referer: "https://evil.example/r" },
        "?redirect_to=https://e.x/",
        site,
      ],
    ];
    for (const [headers, query, expected] of cases) {
      h.advance(2000); // max_frequency
      const res = await h.fetch(`/recover${query}`, {
        method: "POST",
        body: JSON.stringify({ email }),
        headers: { "Content-Type": "application/json", ...headers },
      });
      assert.equal(res.status, 200, await res.text());
      const link = new URL(h.inbox.list(email)[0].link);
      assert.equal(
        link.searchParams.get("redirect_to"),
        expected,
        JSON.stringify({ headers, query }),
      );
    }
  }, { siteUrl: "http://127.0.0.1:3000" });
});

Deno.test("auth email: recover for an unknown address answers 200 {} and mails nothing; a second request within max_frequency is 429 over_email_send_rate_limit", async () => {
  await withHarness(async (h) => {
    const unknown = await h.fetch("/recover", {
      method: "POST",
      body: JSON.stringify({ email: freshEmail() }),
    });
    assert.equal(unknown.status, 200);
    assert.deepEqual(await json(unknown), {});
    assert.equal(h.inbox.list().length, 0);

    const email = freshEmail();
    await h.anon().auth.signUp({ email, password: "secret123" });
    const first = await h.anon().auth.resetPasswordForEmail(email);
    assert.equal(first.error, null);
    const second = await h.anon().auth.resetPasswordForEmail(email);
    assert.ok(isAuthApiError(second.error));
    assert.equal(second.error.status, 429);
    assert.equal(second.error.code, "over_email_send_rate_limit");
  });
});

Deno.test("auth email: with confirmations on, signUp mails a confirmation whose link confirms the account and signs in; sign-in before is email_not_confirmed", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    const client = h.anon();
    const signUp = await client.auth.signUp({
      email,
      password: "secret123",
      options: { emailRedirectTo: "http://127.0.0.1:3000/welcome" },
    });
    assert.equal(signUp.error, null);
    assert.equal(signUp.data.session, null);
    const early = await h.anon().auth.signInWithPassword({
      email,
      password: "secret123",
    });
    assert.equal(early.error?.code, "email_not_confirmed");

    const mail = only(h, email, "signup");
    assert.equal(mail.subject, "Confirm your email address");
    const back = await follow(mail);
    assert.equal(back.pathname, "/welcome");
    const f = fragment(back);
    assert.equal(f.get("type"), "signup");
    const me = await client.auth.getUser(f.get("access_token")!);
    assert.equal(me.error, null);
    assert.ok(me.data.user?.email_confirmed_at);
    assert.equal(me.data.user?.user_metadata.email_verified, true);

    const later = await h.anon().auth.signInWithPassword({
      email,
      password: "secret123",
    });
    assert.equal(later.error, null);
  }, { mailerAutoconfirm: false });
});

Deno.test("auth email: verifyOtp with the mailed code confirms a sign-up; a wrong code is 403 otp_expired", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    await h.anon().auth.signUp({ email, password: "secret123" });
    const mail = only(h, email, "signup");

    const wrong = await h.anon().auth.verifyOtp({
      email,
      token: mail.otp === "000000" ? "111111" : "000000",
      type: "signup",
    });
    assert.ok(isAuthApiError(wrong.error));
    assert.equal(wrong.error.status, 403);
    assert.equal(wrong.error.code, "otp_expired");
    assert.equal(wrong.error.message, "Token has expired or is invalid");

    const right = await h.anon().auth.verifyOtp({
      email,
      token: mail.otp,
      type: "email",
    });
    assert.equal(right.error, null);
    assert.equal(right.data.user?.email, email);
    assert.ok(right.data.session?.access_token);
  }, { mailerAutoconfirm: false });
});

Deno.test("auth email: signInWithOtp mails a sign-in link for an account (and signs up an unknown address); shouldCreateUser false with no account is 422 otp_disabled", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    await h.anon().auth.signUp({ email, password: "secret123" });
    const sent = await h.anon().auth.signInWithOtp({ email });
    assert.equal(sent.error, null);
    const mail = only(h, email, "magiclink");
    assert.equal(mail.subject, "Your sign-in link");
    const byHash = await h.anon().auth.verifyOtp({
      token_hash: new URL(mail.link).searchParams.get("token")!,
      type: "magiclink",
    });
    assert.equal(byHash.error, null);
    assert.equal(byHash.data.user?.email, email);

    const newcomer = freshEmail();
    const created = await h.anon().auth.signInWithOtp({ email: newcomer });
    assert.equal(created.error, null);
    const link = fragment(await follow(only(h, newcomer, "magiclink")));
    assert.equal(link.get("type"), "magiclink");

    const refused = await h.anon().auth.signInWithOtp({
      email: freshEmail(),
      options: { shouldCreateUser: false },
    });
    assert.ok(isAuthApiError(refused.error));
    assert.equal(refused.error.status, 422);
    assert.equal(refused.error.code, "otp_disabled");
    assert.equal(refused.error.message, "Signups not allowed for otp");

    // The legacy /magiclink takes no create_user (MagicLinkParams): an
    // unknown address is signed up all the same.
    const legacy = freshEmail();
    const res = await h.fetch("/magiclink", {
      method: "POST",
      body: JSON.stringify({ email: legacy, create_user: false }),
    });
    assert.equal(res.status, 200, await res.clone().text());
    await res.body?.cancel();
    assert.equal(
      fragment(await follow(only(h, legacy, "magiclink"))).get("type"),
      "magiclink",
    );
  });
});

Deno.test("auth email: resend mails the sign-up confirmation again and the new link works", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    await h.anon().auth.signUp({ email, password: "secret123" });
    h.advance(2_000); // past max_frequency
    const again = await h.anon().auth.resend({ type: "signup", email });
    assert.equal(again.error, null);
    const mails = h.inbox.list(email);
    assert.equal(mails.length, 2);
    const old = fragment(await follow(mails[1]));
    assert.equal(old.get("error_code"), "otp_expired");
    const fresh = fragment(await follow(mails[0]));
    assert.equal(fresh.get("type"), "signup");
    assert.ok(fresh.get("access_token"));
  }, { mailerAutoconfirm: false });
});

Deno.test("auth email: updateUser({ email }) mails both addresses; with confirmations on the first link is accepted and the second switches the email", async () => {
  await withHarness(async (h) => {
    const email = freshEmail("old");
    await h.anon().auth.signUp({ email, password: "secret123" });
    const client = h.anon();
    const { data } = await client.auth.verifyOtp({
      email,
      token: only(h, email, "signup").otp,
      type: "signup",
    });
    await client.auth.setSession(data.session!);
    const next = freshEmail("new");
    const change = await client.auth.updateUser({ email: next });
    assert.equal(change.error, null);
    assert.equal(change.data.user?.email, email);
    assert.equal(change.data.user?.new_email, next);

    const toOld = only(h, email, "email_change");
    const toNew = only(h, next, "email_change");
    assert.ok(toNew.html.includes(next));
    const first = fragment(await follow(toOld));
    assert.equal(
      first.get("message"),
      "Confirmation link accepted. Please proceed to confirm link sent to the other email",
    );
    const second = fragment(await follow(toNew));
    assert.equal(second.get("type"), "email_change");
    const me = await h.anon().auth.getUser(second.get("access_token")!);
    assert.equal(me.data.user?.email, next);
    assert.equal(me.data.user?.new_email, undefined);
    // verify.go emailChangeVerify: the email identity names the new address.
    assert.deepEqual(
      me.data.user?.identities?.map((i) => [
        i.provider,
        i.identity_data?.email,
        i.identity_data?.email_verified,
      ]),
      [["email", next, true]],
    );
    const signIn = await h.anon().auth.signInWithPassword({
      email: next,
      password: "secret123",
    });
    assert.equal(signIn.error, null);
  }, { mailerAutoconfirm: false });
});

Deno.test("auth email: in both email-change mails {{ .Email }} is the current address and {{ .NewEmail }} the new one, as Supabase Auth's templatemailer fills them", async () => {
  await withHarness(async (h) => {
    const { email, password } = await confirmedUser(h);
    const client = h.anon();
    assert.equal(
      (await client.auth.signInWithPassword({ email, password })).error,
      null,
    );
    const newEmail = freshEmail("new");
    assert.equal(
      (await client.auth.updateUser({ email: newEmail })).error,
      null,
    );
    const expected = `from ${email} to ${newEmail}`;
    assert.equal(only(h, newEmail, "email_change").subject, expected);
    assert.equal(only(h, email, "email_change").subject, expected);
  }, {
    emailTemplates: {
      email_change: {
        subject: "from {{ .Email }} to {{ .NewEmail }}",
        html: "<p>{{ .ConfirmationURL }}</p>",
      },
    },
  });
});

Deno.test("auth email: an email change confirmed by an account without an email identity makes one for the new address, as verify.go emailChangeVerify does", async () => {
  await withHarness(async (h) => {
    const { email, password, user } = await confirmedUser(h);
    const client = h.anon();
    const signedIn = await client.auth.signInWithPassword({ email, password });
    assert.equal(signedIn.error, null);
    // What an unlink of the email identity leaves (identity.go).
    await h.sql`delete from auth.identities
                where user_id = ${user.id}::uuid and provider = 'email'`;
    const next = freshEmail("new");
    assert.equal((await client.auth.updateUser({ email: next })).error, null);
    await follow(only(h, email, "email_change"));
    const done = fragment(await follow(only(h, next, "email_change")));
    const me = await h.anon().auth.getUser(done.get("access_token")!);
    assert.equal(me.data.user?.email, next);
    assert.deepEqual(
      me.data.user?.identities?.map((i) => [
        i.provider,
        i.identity_data?.email,
        i.identity_data?.email_verified,
      ]),
      [["email", next, true]],
    );
  }, { mailerAutoconfirm: false });
});

Deno.test("auth api: the Auth log has one line per request with its event and error code, and no password or token", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    await h.anon().auth.signUp({ email, password: "secret123" });
    const bad = await h.anon().auth.signInWithPassword({
      email,
      password: "wrong-one",
    });
    assert.equal(bad.error?.code, "invalid_credentials");
    const good = await h.anon().auth.signInWithPassword({
      email,
      password: "secret123",
    });
    const client = h.anon();
    await client.auth.setSession(good.data.session!);
    await client.auth.refreshSession();
    const lines = h.logs.map((l) => JSON.parse(l));
    const events = lines.map((l) => [l.event, l.status, l.error_code ?? null]);
    assert.deepEqual(events, [
      ["user_signedup", 200, null],
      ["login_failed", 400, "invalid_credentials"],
      ["login", 200, null],
      [undefined, 200, null], // setSession reads the user
      ["token_refreshed", 200, null],
    ]);
    const text = h.logs.join("\n");
    for (const secret of ["secret123", "wrong-one", email]) {
      assert.ok(!text.includes(secret), secret);
    }
    assert.ok(!text.includes(good.data.session!.access_token));
  });
});

Deno.test("auth api: a mailed link that fails (303 with the error) is logged verify_failed with its error code; an unexpected failure's line has its cause", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    await h.anon().auth.signUp({ email, password: "secret123" });
    const [mail] = h.inbox.list(email);
    const first = await fetch(mail.link, { redirect: "manual" });
    await first.body?.cancel();
    const again = await fetch(mail.link, { redirect: "manual" });
    await again.body?.cancel();
    assert.equal(again.status, 303);
    const verifies = h.logs.map((l) => JSON.parse(l))
      .filter((l) => l.path === "/auth/v1/verify")
      .map((l) => [l.event, l.status, l.error_code ?? null]);
    assert.deepEqual(verifies, [
      ["verified", 303, null],
      ["verify_failed", 303, "otp_expired"],
    ]);

    // The database gone from under Auth: a 500 whose line says why.
    await h.sql`alter table auth.users rename to users_gone`;
    try {
      const res = await h.fetch("/recover", {
        method: "POST",
        body: JSON.stringify({ email }),
      });
      assert.equal(res.status, 500);
      await res.body?.cancel();
    } finally {
      await h.sql`alter table auth.users_gone rename to users`;
    }
    const failed = JSON.parse(h.logs.at(-1)!);
    assert.equal(failed.error_code, "unexpected_failure");
    assert.match(failed.cause, /users.*does not exist/);
  }, { mailerAutoconfirm: false });
});

Deno.test("auth api: enable_signup = false refuses sign-ups with 422 signup_disabled, and settings say so", async () => {
  await withHarness(async (h) => {
    const { error } = await h.anon().auth.signUp({
      email: freshEmail(),
      password: "secret123",
    });
    assert.ok(isAuthApiError(error));
    assert.equal(error.status, 422);
    assert.equal(error.code, "signup_disabled");
    const settings = await json(await h.fetch("/settings"));
    assert.equal(settings.disable_signup, true);
  }, { signupEnabled: false });
});

Deno.test("auth api: minimum_password_length is honoured by sign-up (422 weak_password)", async () => {
  await withHarness(async (h) => {
    const { error } = await h.anon().auth.signUp({
      email: freshEmail(),
      password: "short-pw",
    });
    assert.ok(isAuthWeakPasswordError(error));
    assert.equal(error.status, 422);
    assert.equal(error.code, "weak_password");
    assert.equal(error.message, "Password should be at least 10 characters.");
    const ok = await h.anon().auth.signUp({
      email: freshEmail(),
      password: "long-enough-pw",
    });
    assert.equal(ok.error, null);
  }, { minPasswordLength: 10 });
});

Deno.test("auth admin: minimum_password_length is honoured by an admin password change (422 weak_password), as GoTrue's adminUserUpdate checks it; createUser does not check", async () => {
  await withHarness(async (h) => {
    const created = await h.admin().auth.admin.createUser({
      email: freshEmail(),
      password: "short-pw",
    });
    assert.equal(created.error, null);
    const id = created.data.user!.id;
    const { error } = await h.admin().auth.admin.updateUserById(id, {
      password: "other-pw",
    });
    assert.ok(isAuthWeakPasswordError(error));
    assert.equal(error.status, 422);
    assert.equal(error.message, "Password should be at least 10 characters.");
    const ok = await h.admin().auth.admin.updateUserById(id, {
      password: "long-enough-pw",
    });
    assert.equal(ok.error, null);
  }, { minPasswordLength: 10 });
});

Deno.test("auth api: /authorize (OAuth) and unknown routes answer JSON errors that supabase-js reads with status and code", async () => {
  await withHarness(async (h) => {
    const oauth = await h.fetch("/authorize?provider=github");
    assert.equal(oauth.status, 400);
    assert.deepEqual(await json(oauth), {
      code: 400,
      error_code: "validation_failed",
      msg:
        "Unsupported provider: provider is not enabled (the local Auth stand-in has no OAuth providers)",
    });
    const enroll = await h.fetch("/factors", {
      method: "POST",
      body: "{}",
      headers: { "X-Supabase-Api-Version": "2024-01-01" },
    });
    assert.equal(enroll.status, 404);
    const body = await json(enroll);
    assert.equal(body.code, "not_found");
    assert.match(String(body.message), /not supported by the local Auth/);
  });
});

Deno.test("auth email: a mailed link opened with type=email (a code's type) goes on as the type its token resolves to, as Supabase Auth's verifyTokenHash rewrites it: a sign-up's confirms and signs in (type=signup), a magic link's signs in (type=magiclink)", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    const signUp = await h.anon().auth.signUp({ email, password: "secret123" });
    assert.equal(signUp.error, null);
    const asEmail = (mail: Mail) => {
      const url = new URL(mail.link);
      url.searchParams.set("type", "email");
      return { ...mail, link: url.toString() };
    };
    const confirmed = fragment(await follow(asEmail(only(h, email, "signup"))));
    assert.equal(confirmed.get("type"), "signup");
    assert.equal(
      jwtPart(confirmed.get("access_token")!, 1).email,
      email,
    );
    const signIn = await h.anon().auth.signInWithPassword({
      email,
      password: "secret123",
    });
    assert.equal(signIn.error, null);
    const otp = await h.anon().auth.signInWithOtp({ email });
    assert.equal(otp.error, null);
    const magic = fragment(await follow(asEmail(only(h, email, "magiclink"))));
    assert.equal(magic.get("type"), "magiclink");
    assert.ok(magic.get("access_token"));
  }, { mailerAutoconfirm: false });
});

Deno.test("auth email: a followed link's session is put after redirect_to as it stands, as Supabase Auth's AsRedirectURL: the target's own fragment kept (#/welcome#access_token=…), sb= always, keys sorted", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    const signUp = await h.anon().auth.signUp({ email, password: "secret123" });
    assert.equal(signUp.error, null);
    const reset = await h.anon().auth.resetPasswordForEmail(email, {
      redirectTo: "http://127.0.0.1:3000/#/welcome",
    });
    assert.equal(reset.error, null);
    const res = await fetch(only(h, email, "recovery").link, {
      redirect: "manual",
    });
    await res.body?.cancel();
    assert.equal(res.status, 303);
    const location = res.headers.get("location")!;
    const [target, session, ...rest] = location.split("#");
    assert.deepEqual(
      [target, session, rest],
      ["http://127.0.0.1:3000/", "/welcome", [rest[0]]],
      location,
    );
    const values = new URLSearchParams(rest[0]);
    assert.deepEqual([...values.keys()], [
      "access_token",
      "expires_at",
      "expires_in",
      "refresh_token",
      "sb",
      "token_type",
      "type",
    ]);
    assert.equal(values.get("sb"), "");
    assert.equal(values.get("type"), "recovery");
    assert.equal(jwtPart(values.get("access_token")!, 1).email, email);
  });
});

Deno.test("auth email: verifyOtp with a phone answers as Supabase Auth does when no account has it (403 otp_expired; a malformed number 400 validation_failed)", async () => {
  await withHarness(async (h) => {
    const missing = await h.anon().auth.verifyOtp({
      phone: "+15555550123",
      token: "123456",
      type: "sms",
    });
    assert.ok(isAuthApiError(missing.error));
    assert.equal(missing.error.status, 403);
    assert.equal(missing.error.code, "otp_expired");
    assert.equal(missing.error.message, "Token has expired or is invalid");
    const malformed = await h.anon().auth.verifyOtp({
      phone: "not-a-phone",
      token: "123456",
      type: "sms",
    });
    assert.ok(isAuthApiError(malformed.error));
    assert.equal(malformed.error.status, 400);
    assert.equal(malformed.error.code, "validation_failed");
  });
});
