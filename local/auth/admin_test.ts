import assert from "node:assert/strict";
import { isAuthApiError } from "@supabase/supabase-js";
import { confirmedUser, freshEmail, json, withHarness } from "./_harness.ts";
import { signHs256 } from "./jwt.ts";
import {
  LOCAL_ANON_KEY,
  LOCAL_JWT_SECRET,
  LOCAL_SERVICE_ROLE_KEY,
} from "./keys.ts";

const ADMIN = { Authorization: `Bearer ${LOCAL_SERVICE_ROLE_KEY}` };

Deno.test("auth admin: requests without an admin role are refused with 403 not_admin 'User not allowed'", async () => {
  await withHarness(async (h) => {
    const anon = await h.fetch("/admin/users", {
      headers: { Authorization: `Bearer ${LOCAL_ANON_KEY}` },
    });
    assert.equal(anon.status, 403);
    assert.equal(anon.headers.get("x-sb-error-code"), "not_admin");
    assert.deepEqual(await json(anon), {
      code: 403,
      error_code: "not_admin",
      msg: "User not allowed",
    });

    const { email, password } = await confirmedUser(h);
    const login = await h.anon().auth.signInWithPassword({ email, password });
    const asUser = await h.fetch("/admin/users", {
      headers: {
        Authorization: `Bearer ${login.data.session!.access_token}`,
        "X-Supabase-Api-Version": "2024-01-01",
      },
    });
    assert.equal(asUser.status, 403);
    assert.deepEqual(await json(asUser), {
      code: "not_admin",
      message: "User not allowed",
    });

    const none = await h.fetch("/admin/users");
    assert.equal(none.status, 401);
    assert.equal((await json(none)).error_code, "no_authorization");

    const viaClient = await h.anon().auth.admin.listUsers();
    assert.ok(isAuthApiError(viaClient.error));
    assert.equal(viaClient.error.code, "not_admin");
  });
});

Deno.test("auth admin: a token with role supabase_admin is refused with 403 not_admin, as supabase start configures Auth (GOTRUE_JWT_ADMIN_ROLES=service_role)", async () => {
  await withHarness(async (h) => {
    const token = await signHs256(
      { sub: "1234567890", role: "supabase_admin" },
      LOCAL_JWT_SECRET,
    );
    const res = await h.fetch("/admin/users", {
      headers: { Authorization: `Bearer ${token}` },
    });
    assert.equal(res.status, 403);
    assert.equal((await json(res)).error_code, "not_admin");
    const service = await h.fetch("/admin/users", { headers: ADMIN });
    assert.equal(service.status, 200);
    await service.body?.cancel();
  });
});

Deno.test("auth admin: createUser sets id, metadata and confirmation; a taken email is 422 email_exists", async () => {
  await withHarness(async (h) => {
    const id = crypto.randomUUID();
    const email = freshEmail("Admin");
    const { data, error } = await h.admin().auth.admin.createUser({
      id,
      email,
      password: "secret123",
      email_confirm: true,
      user_metadata: { name: "Bo" },
      app_metadata: { plan: "pro" },
    });
    assert.equal(error, null);
    const user = data.user!;
    assert.equal(user.id, id);
    assert.equal(user.email, email.toLowerCase());
    assert.equal(user.aud, "authenticated");
    assert.equal(user.role, "authenticated");
    assert.ok(user.email_confirmed_at);
    assert.equal(user.last_sign_in_at, undefined);
    assert.deepEqual(user.app_metadata, {
      plan: "pro",
      provider: "email",
      providers: ["email"],
    });
    assert.deepEqual(user.user_metadata, { email_verified: true, name: "Bo" });
    assert.equal(user.identities?.length, 1);
    assert.deepEqual(user.identities![0].identity_data, {
      email: email.toLowerCase(),
      email_verified: false,
      phone_verified: false,
      sub: id,
    });

    const login = await h.anon().auth.signInWithPassword({
      email,
      password: "secret123",
    });
    assert.equal(login.error, null);

    const dup = await h.admin().auth.admin.createUser({
      email: email.toUpperCase(),
      password: "secret123",
    });
    assert.ok(isAuthApiError(dup.error));
    assert.equal(dup.error.status, 422);
    assert.equal(dup.error.code, "email_exists");
    assert.equal(
      dup.error.message,
      "A user with this email address has already been registered",
    );

    const noEmail = await h.fetch("/admin/users", {
      method: "POST",
      headers: ADMIN,
      body: JSON.stringify({ password: "secret123" }),
    });
    assert.equal(noEmail.status, 400);
    assert.deepEqual(await json(noEmail), {
      code: 400,
      error_code: "validation_failed",
      msg: "Cannot create a user without either an email or phone",
    });
  });
});

Deno.test("auth admin: listUsers pages newest first with Link and X-Total-Count headers", async () => {
  await withHarness(async (h) => {
    const made = [];
    for (let i = 0; i < 3; i++) {
      made.push((await confirmedUser(h)).user);
      h.advance(1000);
    }
    const res = await h.fetch("/admin/users?page=1&per_page=2", {
      headers: ADMIN,
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("x-total-count"), "3");
    assert.equal(
      res.headers.get("link"),
      '</admin/users?page=2&per_page=2>; rel="next", </admin/users?page=2&per_page=2>; rel="last"',
    );
    const body = await json(res);
    assert.equal(body.aud, "authenticated");
    const users = body.users as Record<string, unknown>[];
    assert.deepEqual(users.map((u) => u.id), [made[2].id, made[1].id]);
    assert.equal(users[0].identities, null);

    const { data, error } = await h.admin().auth.admin.listUsers({
      page: 2,
      perPage: 2,
    });
    assert.equal(error, null);
    assert.deepEqual(data.users.map((u) => u.id), [made[0].id]);
    assert.equal((data as unknown as { total: number }).total, 3);
    assert.equal((data as unknown as { lastPage: number }).lastPage, 2);

    const bad = await h.fetch("/admin/users?page=x", { headers: ADMIN });
    assert.equal(bad.status, 400);
    assert.deepEqual(await json(bad), {
      code: 400,
      error_code: "validation_failed",
      msg:
        'Bad Pagination Parameters: strconv.ParseUint: parsing "x": invalid syntax',
    });
  });
});

Deno.test("auth admin: getUserById returns the user; unknown ids are 404 user_not_found", async () => {
  await withHarness(async (h) => {
    const { user } = await confirmedUser(h);
    const { data, error } = await h.admin().auth.admin.getUserById(user.id);
    assert.equal(error, null);
    assert.equal(data.user?.id, user.id);
    assert.equal(data.user?.identities?.length, 1);

    const missing = await h.admin().auth.admin.getUserById(crypto.randomUUID());
    assert.ok(isAuthApiError(missing.error));
    assert.equal(missing.error.status, 404);
    assert.equal(missing.error.code, "user_not_found");
    assert.equal(missing.error.message, "User not found");

    const bad = await h.fetch("/admin/users/not-a-uuid", { headers: ADMIN });
    assert.equal(bad.status, 404);
    assert.deepEqual(await json(bad), {
      code: 404,
      error_code: "validation_failed",
      msg: "user_id must be an UUID",
    });
  });
});

Deno.test("auth admin: updateUserById merges metadata, changes email and password and ends the user's sessions", async () => {
  await withHarness(async (h) => {
    const { email, password, user } = await confirmedUser(h);
    const login = await h.anon().auth.signInWithPassword({ email, password });
    const token = login.data.session!.access_token;

    const next = freshEmail("moved");
    const { data, error } = await h.admin().auth.admin.updateUserById(user.id, {
      email: next,
      password: "another-secret",
      user_metadata: { name: "Cy", email_verified: null },
      app_metadata: { plan: "team" },
    });
    assert.equal(error, null);
    assert.equal(data.user?.email, next);
    assert.deepEqual(data.user?.user_metadata, { name: "Cy" });
    assert.deepEqual(data.user?.app_metadata, {
      plan: "team",
      provider: "email",
      providers: ["email"],
    });
    assert.equal(
      (data.user?.identities?.[0].identity_data as Record<string, unknown>)
        .email,
      next,
    );

    const old = await h.fetch("/user", {
      headers: { Authorization: `Bearer ${token}` },
    });
    assert.equal(old.status, 403);
    assert.equal((await json(old)).error_code, "session_not_found");
    const relog = await h.anon().auth.signInWithPassword({
      email: next,
      password: "another-secret",
    });
    assert.equal(relog.error, null);

    const weak = await h.admin().auth.admin.updateUserById(user.id, {
      password: "123",
    });
    assert.equal(weak.error?.code, "weak_password");
  });
});

Deno.test("auth admin: updateUserById to a taken email fails as in Supabase Auth (500, unique violation)", async () => {
  await withHarness(async (h) => {
    const { user } = await confirmedUser(h);
    const { email: taken } = await confirmedUser(h);
    const res = await h.fetch(`/admin/users/${user.id}`, {
      method: "PUT",
      headers: ADMIN,
      body: JSON.stringify({ email: taken }),
    });
    assert.equal(res.status, 500);
    assert.equal(res.headers.get("x-sb-error-code"), "unexpected_failure");
    const legacy = await json(res);
    assert.equal(legacy.code, "23505");
    assert.match(legacy.message as string, /users_email_partial_key/);

    const modern = await h.fetch(`/admin/users/${user.id}`, {
      method: "PUT",
      headers: { ...ADMIN, "X-Supabase-Api-Version": "2024-01-01" },
      body: JSON.stringify({ email: taken }),
    });
    assert.equal(modern.status, 500);
    assert.deepEqual(await json(modern), {
      code: "unexpected_failure",
      message: "Error updating user",
    });
    const [row] = await h.sql`
      select email from auth.users where id = ${user.id}::uuid`;
    assert.notEqual(row.email, taken);
  });
});

Deno.test("auth admin: ban_duration refuses the banned user's tokens with user_banned until lifted with none", async () => {
  await withHarness(async (h) => {
    const { email, password, user } = await confirmedUser(h);
    const client = h.anon();
    const login = await client.auth.signInWithPassword({ email, password });
    const session = login.data.session!;

    const banned = await h.admin().auth.admin.updateUserById(user.id, {
      ban_duration: "24h",
    });
    assert.equal(banned.error, null);
    const until = Date.parse(banned.data.user!.banned_until!);
    assert.ok(until > Date.now() + 23 * 3600_000);

    // Banning leaves sessions in place ...
    const [{ n }] = await h.sql`
      select count(*)::int as n from auth.sessions where user_id = ${user.id}::uuid`;
    assert.equal(n, 1);
    // ... but every authenticated route refuses the user.
    const me = await h.fetch("/user", {
      headers: {
        Authorization: `Bearer ${session.access_token}`,
        "X-Supabase-Api-Version": "2024-01-01",
      },
    });
    assert.equal(me.status, 403);
    assert.deepEqual(await json(me), {
      code: "user_banned",
      message: "User is banned",
    });
    const signIn = await h.anon().auth.signInWithPassword({ email, password });
    assert.ok(isAuthApiError(signIn.error));
    assert.equal(signIn.error.status, 400);
    assert.equal(signIn.error.code, "user_banned");
    const refresh = await h.anon().auth.refreshSession({
      refresh_token: session.refresh_token,
    });
    assert.ok(isAuthApiError(refresh.error));
    assert.equal(refresh.error.code, "user_banned");
    assert.equal(refresh.error.message, "Invalid Refresh Token: User Banned");

    const [row] = await h.sql`
      select banned_until from auth.users where id = ${user.id}::uuid`;
    assert.ok(row.banned_until instanceof Date);

    const lifted = await h.admin().auth.admin.updateUserById(user.id, {
      ban_duration: "none",
    });
    assert.equal(lifted.error, null);
    assert.equal(lifted.data.user?.banned_until, undefined);
    const again = await h.anon().auth.getUser(session.access_token);
    assert.equal(again.error, null);

    const invalid = await h.fetch(`/admin/users/${user.id}`, {
      method: "PUT",
      headers: ADMIN,
      body: JSON.stringify({ ban_duration: "forever" }),
    });
    assert.equal(invalid.status, 400);
    assert.deepEqual(await json(invalid), {
      code: 400,
      error_code: "validation_failed",
      msg: 'invalid format for ban duration: time: invalid duration "forever"',
    });
  });
});

Deno.test("auth admin: deleteUser removes the user; its tokens are then 403 user_not_found", async () => {
  await withHarness(async (h) => {
    const { email, password, user } = await confirmedUser(h);
    const login = await h.anon().auth.signInWithPassword({ email, password });
    const raw = await h.fetch(`/admin/users/${user.id}`, {
      method: "DELETE",
      headers: ADMIN,
      body: JSON.stringify({ should_soft_delete: false }),
    });
    assert.equal(raw.status, 200);
    assert.deepEqual(await json(raw), {});
    const [{ n }] = await h.sql`
      select count(*)::int as n from auth.users where id = ${user.id}::uuid`;
    assert.equal(n, 0);
    const res = await h.fetch("/user", {
      headers: { Authorization: `Bearer ${login.data.session!.access_token}` },
    });
    assert.equal(res.status, 403);
    assert.equal((await json(res)).error_code, "user_not_found");
    const again = await h.admin().auth.admin.deleteUser(user.id);
    assert.equal(again.error?.code, "user_not_found");
  });
});

Deno.test("auth admin: soft delete keeps an obfuscated row with deleted_at and ends its sessions", async () => {
  await withHarness(async (h) => {
    const { email, password, user } = await confirmedUser(h);
    const login = await h.anon().auth.signInWithPassword({ email, password });
    const { error } = await h.admin().auth.admin.deleteUser(user.id, true);
    assert.equal(error, null);
    const [row] = await h.sql`
      select email, deleted_at, encrypted_password, raw_user_meta_data
      from auth.users where id = ${user.id}::uuid`;
    assert.ok(row.deleted_at instanceof Date);
    assert.notEqual(row.email, email);
    assert.equal(row.encrypted_password, null);
    assert.deepEqual(row.raw_user_meta_data, {});
    const [{ n }] = await h.sql`
      select count(*)::int as n from auth.sessions where user_id = ${user.id}::uuid`;
    assert.equal(n, 0);
    const res = await h.fetch("/user", {
      headers: { Authorization: `Bearer ${login.data.session!.access_token}` },
    });
    assert.equal(res.status, 403);
    assert.equal((await json(res)).error_code, "session_not_found");
    const signIn = await h.anon().auth.signInWithPassword({ email, password });
    assert.equal(signIn.error?.code, "invalid_credentials");
    const fetched = await h.admin().auth.admin.getUserById(user.id);
    assert.ok(fetched.data.user?.deleted_at);
  });
});
