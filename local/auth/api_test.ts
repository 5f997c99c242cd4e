import assert from "node:assert/strict";
import { isAuthApiError, isAuthWeakPasswordError } from "@supabase/supabase-js";
import {
  freshEmail,
  type Harness,
  json,
  jwtPart,
  withHarness,
} from "./_harness.ts";
import { base64url, signEs256, signHs256 } from "./jwt.ts";
import {
  generateSigningKey,
  LOCAL_ANON_KEY,
  LOCAL_JWT_SECRET,
} from "./keys.ts";

const V2024 = { "X-Supabase-Api-Version": "2024-01-01" };

async function signedUp(h: Harness, password = "secret123") {
  const client = h.anon();
  const email = freshEmail();
  const { data, error } = await client.auth.signUp({ email, password });
  assert.equal(error, null);
  assert.ok(data.session);
  return { client, email, password, session: data.session, user: data.user! };
}

function bearer(token: string): HeadersInit {
  return { Authorization: `Bearer ${token}` };
}

Deno.test("auth api: signUp returns a session with Supabase Auth's token claims and user shape", async () => {
  await withHarness(async (h) => {
    const client = h.anon();
    const email = freshEmail("Mixed");
    const { data, error } = await client.auth.signUp({
      email,
      password: "secret123",
      options: { data: { display_name: "Ann" } },
    });
    assert.equal(error, null);
    const session = data.session!;
    assert.equal(session.token_type, "bearer");
    assert.equal(session.expires_in, 3600);
    assert.match(session.refresh_token, /^[a-z2-7]{12}$/);
    assert.deepEqual(jwtPart(session.access_token, 0), {
      alg: "ES256",
      kid: h.signingKey.kid,
      typ: "JWT",
    });
    const claims = jwtPart(session.access_token, 1);
    assert.deepEqual(Object.keys(claims), [
      "iss",
      "sub",
      "aud",
      "exp",
      "iat",
      "email",
      "phone",
      "app_metadata",
      "user_metadata",
      "role",
      "aal",
      "amr",
      "session_id",
      "is_anonymous",
    ]);
    assert.equal(claims.iss, "http://127.0.0.1:54321/auth/v1");
    assert.equal(claims.aud, "authenticated");
    assert.equal(claims.role, "authenticated");
    assert.equal(claims.email, email.toLowerCase());
    assert.equal(claims.phone, "");
    assert.equal(claims.aal, "aal1");
    assert.equal(claims.is_anonymous, false);
    assert.equal(claims.exp, (claims.iat as number) + 3600);
    assert.equal(session.expires_at, claims.exp);
    assert.deepEqual(claims.app_metadata, {
      provider: "email",
      providers: ["email"],
    });
    const amr = claims.amr as { method: string; timestamp: number }[];
    assert.equal(amr.length, 1);
    assert.equal(amr[0].method, "password");
    const sessions = await h.sql`
      select id::text, user_id::text, aal::text from auth.sessions`;
    assert.deepEqual(sessions.map((s) => ({ ...s })), [{
      id: claims.session_id,
      user_id: claims.sub,
      aal: "aal1",
    }]);

    const user = data.user!;
    assert.equal(user.id, claims.sub);
    assert.equal(user.email, email.toLowerCase());
    assert.ok(user.email_confirmed_at);
    assert.ok(user.confirmed_at);
    assert.ok(user.last_sign_in_at);
    assert.deepEqual(user.user_metadata, {
      display_name: "Ann",
      email: email.toLowerCase(),
      email_verified: true,
      phone_verified: false,
      sub: user.id,
    });
    assert.equal(user.identities?.length, 1);
    assert.equal(user.identities![0].provider, "email");
    assert.equal(user.identities![0].id, user.id);
    assert.equal(user.is_anonymous, false);
  });
});

Deno.test("auth api: signUp of a registered email is refused with 422 user_already_exists", async () => {
  await withHarness(async (h) => {
    const { email } = await signedUp(h);
    const { data, error } = await h.anon().auth.signUp({
      email,
      password: "other-secret",
    });
    assert.equal(data.user, null);
    assert.ok(isAuthApiError(error));
    assert.equal(error.status, 422);
    assert.equal(error.code, "user_already_exists");
    assert.equal(error.message, "User already registered");

    const res = await h.fetch("/signup", {
      method: "POST",
      body: JSON.stringify({ email, password: "other-secret" }),
    });
    assert.equal(res.status, 422);
    assert.equal(res.headers.get("x-sb-error-code"), "user_already_exists");
    assert.deepEqual(await json(res), {
      code: 422,
      error_code: "user_already_exists",
      msg: "User already registered",
    });
  });
});

Deno.test("auth api: with confirmations on, signUp gives the unconfirmed user and no session, and sign-in waits for the confirmation", async () => {
  await withHarness(async (h) => {
    const settings = await json(await h.fetch("/settings"));
    assert.equal(settings.mailer_autoconfirm, false);
    assert.equal(settings.phone_autoconfirm, false);
    const email = freshEmail();
    const { data, error } = await h.anon().auth.signUp({
      email,
      password: "secret123",
    });
    assert.equal(error, null);
    assert.equal(data.session, null);
    assert.equal(data.user?.email, email);
    assert.equal(data.user?.email_confirmed_at, undefined);
    assert.ok(data.user?.confirmation_sent_at);
    assert.equal(data.user?.identities?.length, 1);
    const signIn = await h.anon().auth.signInWithPassword({
      email,
      password: "secret123",
    });
    assert.ok(isAuthApiError(signIn.error));
    assert.equal(signIn.error.status, 400);
    assert.equal(signIn.error.code, "email_not_confirmed");
  }, { mailerAutoconfirm: false, phoneAutoconfirm: false });
});

Deno.test("auth api: with confirmations on, signUp of a confirmed address answers 200 with a made-up user and no session", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    const created = await h.admin().auth.admin.createUser({
      email,
      password: "original-secret",
      email_confirm: true,
    });
    assert.equal(created.error, null);
    const { data, error } = await h.anon().auth.signUp({
      email,
      password: "claimed-secret",
    });
    assert.equal(error, null);
    assert.equal(data.session, null);
    assert.notEqual(data.user?.id, created.data.user!.id);
    assert.deepEqual(data.user?.identities, []);
    assert.equal(data.user?.email_confirmed_at, undefined);
    const original = await h.anon().auth.signInWithPassword({
      email,
      password: "original-secret",
    });
    assert.equal(original.error, null);
  }, { mailerAutoconfirm: false });
});

Deno.test("auth api: with confirmations on, signUp of an unconfirmed address neither signs in nor confirms it", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    const created = await h.admin().auth.admin.createUser({
      email,
      password: "original-secret",
    });
    assert.equal(created.error, null);
    const { data, error } = await h.anon().auth.signUp({
      email,
      password: "claimed-secret",
    });
    assert.equal(error, null);
    assert.equal(data.session, null);
    assert.equal(data.user?.id, created.data.user!.id);
    const { data: after } = await h.admin().auth.admin.getUserById(
      created.data.user!.id,
    );
    assert.equal(after.user?.email_confirmed_at, undefined);
  }, { mailerAutoconfirm: false });
});

Deno.test("auth api: signUp with a short password is refused with 422 weak_password and its reasons", async () => {
  await withHarness(async (h) => {
    const { error } = await h.anon().auth.signUp({
      email: freshEmail(),
      password: "12345",
    });
    assert.ok(isAuthWeakPasswordError(error));
    assert.equal(error.status, 422);
    assert.deepEqual(error.reasons, ["length"]);

    const res = await h.fetch("/signup", {
      method: "POST",
      headers: V2024,
      body: JSON.stringify({ email: freshEmail(), password: "12345" }),
    });
    assert.equal(res.status, 422);
    assert.equal(res.headers.get("x-supabase-api-version"), "2024-01-01");
    assert.deepEqual(await json(res), {
      code: "weak_password",
      message: "Password should be at least 6 characters.",
      weak_password: { reasons: ["length"] },
    });
  });
});

Deno.test("auth api: signUp with a malformed email is refused with 400 validation_failed", async () => {
  await withHarness(async (h) => {
    const { error } = await h.anon().auth.signUp({
      email: "not-an-email",
      password: "secret123",
    });
    assert.ok(isAuthApiError(error));
    assert.equal(error.status, 400);
    assert.equal(error.code, "validation_failed");
    assert.equal(
      error.message,
      "Unable to validate email address: invalid format",
    );
    const res = await h.fetch("/signup", {
      method: "POST",
      body: JSON.stringify({ password: "secret123" }),
    });
    assert.equal(res.status, 422);
    assert.equal((await json(res)).error_code, "anonymous_provider_disabled");
  });
});

Deno.test("auth api: signUp of an unconfirmed address confirms it and signs in without changing its password", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    const created = await h.admin().auth.admin.createUser({
      email,
      password: "original-secret",
    });
    assert.equal(created.error, null);
    const { data, error } = await h.anon().auth.signUp({
      email,
      password: "claimed-secret",
    });
    assert.equal(error, null);
    assert.equal(data.user?.id, created.data.user!.id);
    assert.ok(data.user?.email_confirmed_at);
    assert.ok(data.session);
    const original = await h.anon().auth.signInWithPassword({
      email,
      password: "original-secret",
    });
    assert.equal(original.error, null);
    const claimed = await h.anon().auth.signInWithPassword({
      email,
      password: "claimed-secret",
    });
    assert.equal(claimed.error?.code, "invalid_credentials");
  });
});

Deno.test("auth api: signInWithPassword with a wrong password or unknown email is 400 invalid_credentials", async () => {
  await withHarness(async (h) => {
    const { email } = await signedUp(h);
    for (
      const creds of [{ email, password: "wrong-pass" }, {
        email: freshEmail(),
        password: "secret123",
      }]
    ) {
      const { data, error } = await h.anon().auth.signInWithPassword(creds);
      assert.equal(data.session, null);
      assert.ok(isAuthApiError(error));
      assert.equal(error.status, 400);
      assert.equal(error.code, "invalid_credentials");
      assert.equal(error.message, "Invalid login credentials");
    }
    const res = await h.fetch("/token?grant_type=password", {
      method: "POST",
      headers: V2024,
      body: JSON.stringify({ email, password: "wrong-pass" }),
    });
    assert.equal(res.status, 400);
    assert.equal(res.headers.get("x-sb-error-code"), "invalid_credentials");
    assert.deepEqual(await json(res), {
      code: "invalid_credentials",
      message: "Invalid login credentials",
    });
  });
});

Deno.test("auth api: signInWithPassword of an unconfirmed user is 400 email_not_confirmed", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    const created = await h.admin().auth.admin.createUser({
      email,
      password: "secret123",
    });
    assert.equal(created.error, null);
    assert.equal(created.data.user?.email_confirmed_at, undefined);
    const { error } = await h.anon().auth.signInWithPassword({
      email,
      password: "secret123",
    });
    assert.ok(isAuthApiError(error));
    assert.equal(error.status, 400);
    assert.equal(error.code, "email_not_confirmed");
    assert.equal(error.message, "Email not confirmed");
  });
});

Deno.test("auth api: signInWithPassword opens a new session and getUser returns the user", async () => {
  await withHarness(async (h) => {
    const { email, password, user } = await signedUp(h);
    const client = h.anon();
    const { data, error } = await client.auth.signInWithPassword({
      email: email.toUpperCase(),
      password,
    });
    assert.equal(error, null);
    assert.equal(data.user.id, user.id);
    const got = await client.auth.getUser();
    assert.equal(got.error, null);
    assert.equal(got.data.user?.id, user.id);
    assert.equal(got.data.user?.email, email);
    const [{ n }] = await h.sql`
      select count(*)::int as n from auth.sessions where user_id = ${user.id}::uuid`;
    assert.equal(n, 2);
  });
});

Deno.test("auth api: updateUser changes the password, refuses the same one with 422 same_password, and ends other sessions", async () => {
  await withHarness(async (h) => {
    const { client, email, password } = await signedUp(h);
    const other = h.anon();
    const otherLogin = await other.auth.signInWithPassword({ email, password });
    assert.equal(otherLogin.error, null);

    const same = await client.auth.updateUser({ password });
    assert.ok(isAuthApiError(same.error));
    assert.equal(same.error.status, 422);
    assert.equal(same.error.code, "same_password");
    assert.equal(
      same.error.message,
      "New password should be different from the old password.",
    );

    const weak = await client.auth.updateUser({ password: "123" });
    assert.ok(isAuthWeakPasswordError(weak.error));

    const changed = await client.auth.updateUser({
      password: "brand-new-secret",
      data: { theme: "dark" },
    });
    assert.equal(changed.error, null);
    assert.equal(changed.data.user?.user_metadata.theme, "dark");

    // The other device's session is gone, this one stays.
    const otherUser = await other.auth.getUser(
      otherLogin.data.session!.access_token,
    );
    assert.equal(otherUser.error?.name, "AuthSessionMissingError");
    assert.equal((await client.auth.getUser()).error, null);

    const oldLogin = await h.anon().auth.signInWithPassword({
      email,
      password,
    });
    assert.equal(oldLogin.error?.code, "invalid_credentials");
    const newLogin = await h.anon().auth.signInWithPassword({
      email,
      password: "brand-new-secret",
    });
    assert.equal(newLogin.error, null);
  });
});

Deno.test("auth api: updateUser with a new email records it as new_email awaiting confirmation", async () => {
  await withHarness(async (h) => {
    const { client, email } = await signedUp(h);
    const target = freshEmail("next");
    const { data, error } = await client.auth.updateUser({ email: target });
    assert.equal(error, null);
    assert.equal(data.user?.email, email);
    assert.equal(data.user?.new_email, target);
    assert.ok(data.user?.email_change_sent_at);

    const { email: taken } = await signedUp(h);
    await new Promise((r) => setTimeout(r, 1100));
    const dup = await client.auth.updateUser({ email: taken });
    assert.ok(isAuthApiError(dup.error));
    assert.equal(dup.error.status, 422);
    assert.equal(dup.error.code, "email_exists");
    assert.equal(
      dup.error.message,
      "A user with this email address has already been registered",
    );

    const app = await h.fetch("/user", {
      method: "PUT",
      headers: bearer(
        (await client.auth.getSession()).data.session!.access_token,
      ),
      body: JSON.stringify({ app_metadata: { admin: true } }),
    });
    assert.equal(app.status, 403);
    assert.deepEqual(await json(app), {
      code: 403,
      error_code: "not_admin",
      msg: "Updating app_metadata requires admin privileges",
    });
  });
});

Deno.test("auth api: updateUser with app_metadata is allowed for a user whose stored role is admin in the default audience (Supabase Auth's isAdmin), merged as an admin update; 403 not_admin for anyone else", async () => {
  await withHarness(async (h) => {
    const { client, user } = await signedUp(h);
    const token = (await client.auth.getSession()).data.session!.access_token;
    const put = (body: unknown) =>
      h.fetch("/user", {
        method: "PUT",
        headers: bearer(token),
        body: JSON.stringify(body),
      });
    const refused = await put({ app_metadata: { plan: "pro" } });
    assert.equal(refused.status, 403);
    assert.equal((await json(refused)).error_code, "not_admin");

    // The stored role counts, not the token's (still "authenticated").
    const promoted = await h.admin().auth.admin.updateUserById(user.id, {
      role: "admin",
    });
    assert.equal(promoted.error, null);
    const ok = await put({ app_metadata: { plan: "pro" } });
    assert.equal(ok.status, 200);
    const body = await json(ok);
    assert.deepEqual(body.app_metadata, {
      provider: "email",
      providers: ["email"],
      plan: "pro",
    });
    assert.equal(body.role, "admin");
    const removed = await put({ app_metadata: { plan: null } });
    assert.equal(removed.status, 200);
    assert.deepEqual((await json(removed)).app_metadata, {
      provider: "email",
      providers: ["email"],
    });

    // Another audience (an admin update cannot move a user there, as in
    // Supabase Auth): not an admin.
    await h.sql`update auth.users set aud = 'other' where id = ${user.id}`;
    const elsewhere = await put({ app_metadata: { plan: "pro" } });
    assert.equal(elsewhere.status, 403);
    assert.equal((await json(elsewhere)).error_code, "not_admin");
  });
});

Deno.test("auth api: refreshSession rotates the refresh token and revokes the old one", async () => {
  await withHarness(async (h) => {
    const { client, session } = await signedUp(h);
    const { data, error } = await client.auth.refreshSession();
    assert.equal(error, null);
    const next = data.session!;
    assert.notEqual(next.refresh_token, session.refresh_token);
    assert.match(next.refresh_token, /^[a-z2-7]{12}$/);
    assert.equal(
      jwtPart(next.access_token, 1).session_id,
      jwtPart(session.access_token, 1).session_id,
    );
    const rows = await h.sql`
      select token, revoked, parent from auth.refresh_tokens order by id`;
    assert.deepEqual(rows.map((r) => ({ ...r })), [
      { token: session.refresh_token, revoked: true, parent: null },
      {
        token: next.refresh_token,
        revoked: false,
        parent: session.refresh_token,
      },
    ]);
    const [s] = await h.sql`select refreshed_at from auth.sessions`;
    assert.ok(s.refreshed_at);
  });
});

Deno.test("auth api: refresh token reuse is refused with refresh_token_already_used", async () => {
  await withHarness(async (h) => {
    const { client, session } = await signedUp(h);
    const first = session.refresh_token;
    const second = (await client.auth.refreshSession()).data.session!;
    const third = (await client.auth.refreshSession()).data.session!;
    assert.ok(third.refresh_token);

    h.advance(11_000);
    const reused = await h.anon().auth.refreshSession({ refresh_token: first });
    assert.ok(isAuthApiError(reused.error));
    assert.equal(reused.error.status, 400);
    assert.equal(reused.error.code, "refresh_token_already_used");
    assert.equal(reused.error.message, "Invalid Refresh Token: Already Used");

    // Detection revokes every token of the session.
    const [{ live }] = await h.sql`
      select count(*)::int as live from auth.refresh_tokens where not revoked`;
    assert.equal(live, 0);
    const raw = await h.fetch("/token?grant_type=refresh_token", {
      method: "POST",
      body: JSON.stringify({ refresh_token: second.refresh_token }),
    });
    assert.equal(raw.status, 400);
    assert.deepEqual(await json(raw), {
      code: 400,
      error_code: "refresh_token_already_used",
      msg: "Invalid Refresh Token: Already Used",
    });
  });
});

Deno.test("auth api: a revoked refresh token still refreshes within the 10 s reuse interval", async () => {
  await withHarness(async (h) => {
    const { client, session } = await signedUp(h);
    await client.auth.refreshSession();
    await client.auth.refreshSession();
    h.advance(9_000);
    const res = await h.fetch("/token?grant_type=refresh_token", {
      method: "POST",
      body: JSON.stringify({ refresh_token: session.refresh_token }),
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("sb-auth-refresh-token-reuse"), "false");
    const body = await json(res);
    assert.match(body.refresh_token as string, /^[a-z2-7]{12}$/);
    assert.equal(body.token_type, "bearer");
  });
});

Deno.test("auth api: two concurrent refreshes of one token both succeed with the same new token", async () => {
  await withHarness(async (h) => {
    const { session } = await signedUp(h);
    const refresh = () =>
      h.fetch("/token?grant_type=refresh_token", {
        method: "POST",
        body: JSON.stringify({ refresh_token: session.refresh_token }),
      }).then(json);
    const [a, b] = await Promise.all([refresh(), refresh()]);
    assert.match(a.refresh_token as string, /^[a-z2-7]{12}$/);
    assert.equal(a.refresh_token, b.refresh_token);
    const [{ live }] = await h.sql`
      select count(*)::int as live from auth.refresh_tokens where not revoked`;
    assert.equal(live, 1);
  });
});

// One Postgres session on PGlite: no two transactions ever interleave
// there, so this race exists only on a real PostgreSQL.
if (Deno.env.get("TEST_DATABASE_URL")) {
  // A test-only trigger that sleeps before each row's `event` on `table`,
  // widening a transaction's window between two of its locks.
  const sleepBefore = async (
    h: Harness,
    event: "insert" | "delete",
    table: string,
    seconds: number,
  ) => {
    await h.sql.unsafe(`
      create function public.sleep_before_${event}() returns trigger
        language plpgsql as $$ begin perform pg_sleep(${seconds});
        return ${event === "delete" ? "old" : "new"}; end $$;
      create trigger sleep_before_${event} before ${event} on ${table}
        for each row execute function public.sleep_before_${event}();`);
  };

  Deno.test("auth api: a sign-out racing a refresh of the same session (two tabs) does not deadlock: sign-out ends it, the refresh is 400 session_not_found", async () => {
    await withHarness(async (h) => {
      const { session } = await signedUp(h);
      // Widens sign-out's window between its session lock and the cascade
      // to refresh_tokens, so the refresh arrives inside it every run.
      await sleepBefore(h, "delete", "auth.sessions", 0.5);
      const logout = h.fetch("/logout", {
        method: "POST",
        headers: bearer(session.access_token),
      });
      await new Promise((r) => setTimeout(r, 150));
      const refresh = h.fetch("/token?grant_type=refresh_token", {
        method: "POST",
        body: JSON.stringify({ refresh_token: session.refresh_token }),
      });
      const [out, again] = await Promise.all([logout, refresh]);
      await out.body?.cancel();
      assert.equal(out.status, 204);
      assert.equal(again.status, 400);
      assert.equal((await json(again)).error_code, "session_not_found");
      const [{ n }] = await h.sql`
        select count(*)::int as n from auth.sessions
        where user_id = ${session.user.id}::uuid`;
      assert.equal(n, 0);
    });
  });

  Deno.test("auth api: a refresh racing an admin password change of the same user (auth-sync's) does not deadlock: both succeed, and the change ends the user's sessions", async () => {
    await withHarness(async (h) => {
      const { email, session } = await signedUp(h);
      // Widens the refresh's window between its session lock and its
      // update of the user's row.
      await sleepBefore(h, "insert", "auth.refresh_tokens", 0.6);
      const refresh = h.fetch("/token?grant_type=refresh_token", {
        method: "POST",
        body: JSON.stringify({ refresh_token: session.refresh_token }),
      });
      await new Promise((r) => setTimeout(r, 150));
      const change = h.admin().auth.admin.updateUserById(session.user.id, {
        password: "changed-by-admin",
      });
      const [refreshed, changed] = await Promise.all([refresh, change]);
      assert.equal(refreshed.status, 200, await refreshed.clone().text());
      await refreshed.body?.cancel();
      assert.equal(changed.error, null);
      const [{ n }] = await h.sql`
        select count(*)::int as n from auth.sessions
        where user_id = ${session.user.id}::uuid`;
      assert.equal(n, 0);
      const signIn = await h.anon().auth.signInWithPassword({
        email,
        password: "changed-by-admin",
      });
      assert.equal(signIn.error, null);
    });
  });
}

Deno.test("auth api: refreshing with the parent of the active token returns the active token", async () => {
  await withHarness(async (h) => {
    const { client, session } = await signedUp(h);
    const next = (await client.auth.refreshSession()).data.session!;
    h.advance(60_000);
    const again = await h.anon().auth.refreshSession({
      refresh_token: session.refresh_token,
    });
    assert.equal(again.error, null);
    assert.equal(again.data.session?.refresh_token, next.refresh_token);
  });
});

Deno.test("auth api: unknown refresh tokens are refresh_token_not_found, malformed ones validation_failed", async () => {
  await withHarness(async (h) => {
    const unknown = await h.anon().auth.refreshSession({
      refresh_token: "abcdefghijkl",
    });
    assert.ok(isAuthApiError(unknown.error));
    assert.equal(unknown.error.status, 400);
    assert.equal(unknown.error.code, "refresh_token_not_found");
    assert.equal(
      unknown.error.message,
      "Invalid Refresh Token: Refresh Token Not Found",
    );
    const res = await h.fetch("/token?grant_type=refresh_token", {
      method: "POST",
      body: JSON.stringify({ refresh_token: "short" }),
    });
    assert.equal(res.status, 400);
    assert.deepEqual(await json(res), {
      code: 400,
      error_code: "validation_failed",
      msg: "Refresh token is not valid",
    });
    const grant = await h.fetch("/token?grant_type=magic", {
      method: "POST",
      body: "{}",
    });
    assert.equal(grant.status, 400);
    assert.deepEqual(await json(grant), {
      code: 400,
      error_code: "invalid_credentials",
      msg: "unsupported_grant_type",
    });
  });
});

Deno.test("auth api: signOut local ends only this session; its token is then refused with session_not_found", async () => {
  await withHarness(async (h) => {
    const { client, email, password, session } = await signedUp(h);
    const other = h.anon();
    const otherLogin = await other.auth.signInWithPassword({ email, password });
    assert.equal(otherLogin.error, null);

    const { error } = await client.auth.signOut({ scope: "local" });
    assert.equal(error, null);

    const res = await h.fetch("/user", {
      headers: { ...bearer(session.access_token), ...V2024 },
    });
    assert.equal(res.status, 403);
    assert.equal(res.headers.get("x-sb-error-code"), "session_not_found");
    assert.deepEqual(await json(res), {
      code: "session_not_found",
      message: "Session from session_id claim in JWT does not exist",
    });
    const gone = await h.anon().auth.getUser(session.access_token);
    assert.equal(gone.error?.name, "AuthSessionMissingError");
    // The refresh token went with its session.
    const refresh = await h.anon().auth.refreshSession({
      refresh_token: session.refresh_token,
    });
    assert.equal(refresh.error?.code, "refresh_token_not_found");

    assert.equal((await other.auth.getUser()).error, null);
  });
});

Deno.test("auth api: signOut others keeps only the calling session", async () => {
  await withHarness(async (h) => {
    const { client, email, password } = await signedUp(h);
    const other = h.anon();
    const otherLogin = await other.auth.signInWithPassword({ email, password });
    const { error } = await client.auth.signOut({ scope: "others" });
    assert.equal(error, null);
    assert.equal((await client.auth.getUser()).error, null);
    const res = await h.fetch("/user", {
      headers: bearer(otherLogin.data.session!.access_token),
    });
    assert.equal(res.status, 403);
    assert.equal((await json(res)).error_code, "session_not_found");
  });
});

Deno.test("auth api: signOut global ends every session of the user", async () => {
  await withHarness(async (h) => {
    const { client, email, password, session, user } = await signedUp(h);
    const other = await h.anon().auth.signInWithPassword({ email, password });
    const res = await h.fetch("/logout", {
      method: "POST",
      headers: bearer(session.access_token),
    });
    assert.equal(res.status, 204);
    assert.equal(await res.text(), "");
    const [{ n }] = await h.sql`
      select count(*)::int as n from auth.sessions where user_id = ${user.id}::uuid`;
    assert.equal(n, 0);
    for (
      const token of [session.access_token, other.data.session!.access_token]
    ) {
      const r = await h.fetch("/user", { headers: bearer(token) });
      assert.equal(r.status, 403);
      assert.equal((await json(r)).error_code, "session_not_found");
    }
    assert.ok(client);
  });
});

Deno.test("auth api: logout with an unknown scope is 400 validation_failed", async () => {
  await withHarness(async (h) => {
    const { session } = await signedUp(h);
    const res = await h.fetch("/logout?scope=everywhere", {
      method: "POST",
      headers: bearer(session.access_token),
    });
    assert.equal(res.status, 400);
    assert.deepEqual(await json(res), {
      code: 400,
      error_code: "validation_failed",
      msg: 'Unsupported logout scope "everywhere"',
    });
  });
});

Deno.test("auth api: an expired access token is 403 bad_jwt with golang-jwt's message", async () => {
  await withHarness(async (h) => {
    const { session } = await signedUp(h);
    h.advance(3601_000);
    const res = await h.fetch("/user", {
      headers: bearer(session.access_token),
    });
    assert.equal(res.status, 403);
    assert.equal(res.headers.get("x-sb-error-code"), "bad_jwt");
    assert.deepEqual(await json(res), {
      code: 403,
      error_code: "bad_jwt",
      msg:
        "invalid JWT: unable to parse or verify signature, token has invalid claims: token is expired",
    });
    const viaClient = await h.anon().auth.getUser(session.access_token);
    assert.ok(isAuthApiError(viaClient.error));
    assert.equal(viaClient.error.code, "bad_jwt");
  });
});

Deno.test("auth api: forged tokens (bad signature, alg none, unknown kid) are 403 bad_jwt; HS256 with the secret is accepted", async () => {
  await withHarness(async (h) => {
    const { session } = await signedUp(h);
    const claims = jwtPart(session.access_token, 1);
    const expect = async (token: string, msg: string) => {
      const res = await h.fetch("/user", { headers: bearer(token) });
      assert.equal(res.status, 403);
      assert.deepEqual(await json(res), {
        code: 403,
        error_code: "bad_jwt",
        msg: `invalid JWT: unable to parse or verify signature, ${msg}`,
      });
    };
    const stranger = await generateSigningKey();
    await expect(
      await signEs256(claims, stranger.privateJwk, h.signingKey.kid),
      "token signature is invalid: crypto/ecdsa: verification error",
    );
    await expect(
      await signEs256(claims, stranger.privateJwk, stranger.kid),
      `token is unverifiable: error while executing keyfunc: unrecognized JWT kid ${stranger.kid} for algorithm ES256`,
    );
    await expect(
      `${base64url(JSON.stringify({ alg: "none", typ: "JWT" }))}.${
        base64url(JSON.stringify(claims))
      }.`,
      "token signature is invalid: signing method none is invalid",
    );
    await expect(
      await signHs256(claims, "some-other-secret-that-is-long-enough"),
      "token signature is invalid: signature is invalid",
    );

    const hs = await signHs256(claims, LOCAL_JWT_SECRET);
    const ok = await h.anon().auth.getUser(hs);
    assert.equal(ok.error, null);
    assert.equal(ok.data.user?.id, claims.sub);
  });
});

Deno.test("auth api: tokens of a deleted user are 403 user_not_found; no bearer is 401; anon key lacks sub", async () => {
  await withHarness(async (h) => {
    const { session, user } = await signedUp(h);
    await h.sql`delete from auth.users where id = ${user.id}::uuid`;
    const claims = jwtPart(session.access_token, 1);
    delete claims.session_id;
    const sessionless = await signEs256(
      claims,
      h.signingKey.privateJwk,
      h.signingKey.kid,
    );
    const res = await h.fetch("/user", { headers: bearer(sessionless) });
    assert.equal(res.status, 403);
    assert.deepEqual(await json(res), {
      code: 403,
      error_code: "user_not_found",
      msg: "User from sub claim in JWT does not exist",
    });

    const none = await h.fetch("/user");
    assert.equal(none.status, 401);
    assert.deepEqual(await json(none), {
      code: 401,
      error_code: "no_authorization",
      msg: "This endpoint requires a valid Bearer token",
    });

    const anon = await h.fetch("/user", { headers: bearer(LOCAL_ANON_KEY) });
    assert.equal(anon.status, 403);
    assert.deepEqual(await json(anon), {
      code: 403,
      error_code: "bad_jwt",
      msg: "invalid claim: missing sub claim",
    });
  });
});

Deno.test("auth api: jwks.json publishes the ES256 verification key; health and settings answer", async () => {
  await withHarness(async (h) => {
    const res = await h.fetch("/.well-known/jwks.json");
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("cache-control"), "public, max-age=600");
    const body = await json(res);
    assert.deepEqual(body, { keys: [h.signingKey.publicJwk] });
    const [key] = body.keys as Record<string, unknown>[];
    assert.equal(key.kid, h.signingKey.kid);
    assert.equal(key.alg, "ES256");
    assert.equal(key.use, "sig");
    assert.deepEqual(key.key_ops, ["verify"]);
    assert.equal("d" in key, false);

    const health = await h.fetch("/health");
    assert.equal(health.status, 200);
    assert.equal((await json(health)).name, "GoTrue");
    const settings = await json(await h.fetch("/settings"));
    assert.equal(settings.mailer_autoconfirm, true);
    // The CLI's GOTRUE_SMS_AUTOCONFIRM: `[auth.sms] enable_confirmations`
    // off, by default.
    assert.equal(settings.phone_autoconfirm, true);
    assert.equal((settings.external as Record<string, boolean>).email, true);

    const missing = await h.fetch("/nope");
    assert.equal(missing.status, 404);
    assert.deepEqual(await json(missing), {
      code: 404,
      error_code: "not_found",
      msg:
        "GET /auth/v1/nope is not supported by the local Auth stand-in (docs/local.md lists what it serves)",
    });
    const wrongMethod = await h.fetch("/signup");
    assert.equal(wrongMethod.status, 405);
    await wrongMethod.body?.cancel();
  });
});
