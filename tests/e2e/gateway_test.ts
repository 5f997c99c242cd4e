/**
 * The local gateway's `apikey` rules, as Supabase's hosted API gateway
 * applies them: `/auth/v1/*` needs the anon or service_role key, or the
 * publishable or secret key (header or query parameter), except the links
 * opened from emails and redirects and the JWKS; `/functions/v1/*` is not
 * key-checked. On the way to Auth the secret key acts as service_role and
 * the publishable key as anon, as the CLI's Kong makes them.
 */
import assert from "node:assert/strict";
import { createClient } from "@supabase/supabase-js";
import { authorizationFor } from "../../local/gateway.ts";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { startTestStack, type TestStack } from "../support/stack.ts";

const stack: TestStack = await startTestStack();

async function get(path: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${stack.apiUrl}${path}`, { headers });
  return { status: res.status, body: await res.json() };
}

const NO_KEY = {
  message: "No API key found in request",
  hint: "No `apikey` request header or url param was found.",
};
const BAD_KEY = {
  message: "Invalid API key",
  hint: "Double check your Supabase `anon` or `service_role` API key.",
};

e2eTest(
  "gateway: an Auth request without apikey gets 401 No API key found",
  async () => {
    assert.deepEqual(await get("/auth/v1/settings"), {
      status: 401,
      body: NO_KEY,
    });
    assert.deepEqual(await get("/auth/v1/settings", { apikey: "" }), {
      status: 401,
      body: NO_KEY,
    });
  },
);

e2eTest(
  "gateway: an Auth request with a key that is not the project's gets 401 Invalid API key",
  async () => {
    assert.deepEqual(await get("/auth/v1/settings", { apikey: "garbage" }), {
      status: 401,
      body: BAD_KEY,
    });
    // A well-formed JWT signed by someone else is no better.
    const forged = stack.anonKey.slice(0, -4) + "AAAA";
    assert.deepEqual(await get("/auth/v1/settings", { apikey: forged }), {
      status: 401,
      body: BAD_KEY,
    });
  },
);

e2eTest(
  "gateway: the anon and service_role keys pass, as header or query parameter",
  async () => {
    assert.equal(
      (await get("/auth/v1/settings", { apikey: stack.anonKey })).status,
      200,
    );
    assert.equal(
      (await get(`/auth/v1/settings?apikey=${stack.serviceRoleKey}`)).status,
      200,
    );
    const users = await get("/auth/v1/admin/users", {
      apikey: stack.serviceRoleKey,
      Authorization: `Bearer ${stack.serviceRoleKey}`,
    });
    assert.equal(users.status, 200);
  },
);

e2eTest("gateway: the JWKS is served without a key", async () => {
  const jwks = await get("/auth/v1/.well-known/jwks.json");
  assert.equal(jwks.status, 200);
  assert.ok(Array.isArray(jwks.body.keys));
});

e2eTest(
  "gateway: functions are not key-checked; the function checks the bearer token",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const res = await fetch(`${stack.apiUrl}/functions/v1/presence-ping`, {
      method: "POST",
      headers: { Authorization: `Bearer ${u.token}` },
    });
    assert.equal(res.status, 200);
    assert.equal((await res.json()).ok, true);
    const anonymous = await fetch(
      `${stack.apiUrl}/functions/v1/presence-ping`,
      {
        method: "POST",
      },
    );
    assert.equal(anonymous.status, 401);
    assert.equal((await anonymous.json()).code, "missing_bearer");
  },
);

e2eTest(
  "gateway: the publishable and secret keys pass, as header or query parameter",
  async () => {
    assert.match(stack.publishableKey, /^sb_publishable_/);
    assert.match(stack.secretKey, /^sb_secret_/);
    assert.equal(
      (await get("/auth/v1/settings", { apikey: stack.publishableKey }))
        .status,
      200,
    );
    assert.equal(
      (await get(`/auth/v1/settings?apikey=${stack.secretKey}`)).status,
      200,
    );
  },
);

e2eTest(
  "gateway: the secret key acts as service_role on the Auth admin API, the publishable key as anon",
  async () => {
    // As supabase-js sends its key: in apikey and as the bearer token.
    const asKey = (key: string) => ({
      apikey: key,
      Authorization: `Bearer ${key}`,
    });
    const admin = await get("/auth/v1/admin/users", asKey(stack.secretKey));
    assert.equal(admin.status, 200);
    assert.ok(Array.isArray(admin.body.users));
    const secretOnly = await get("/auth/v1/admin/users", {
      apikey: stack.secretKey,
    });
    assert.equal(secretOnly.status, 200);
    const anon = await get("/auth/v1/admin/users", asKey(stack.publishableKey));
    const asAnon = await get("/auth/v1/admin/users", asKey(stack.anonKey));
    assert.equal(anon.status, 403);
    assert.deepEqual(anon, asAnon);
    // supabase-js's own admin client with the secret key.
    const client = createClient(stack.apiUrl, stack.secretKey, {
      auth: { persistSession: false, autoRefreshToken: false },
    });
    const { data, error } = await client.auth.admin.listUsers({ perPage: 1 });
    assert.equal(error, null);
    assert.ok(Array.isArray(data.users));
  },
);

e2eTest(
  "gateway: an unknown sb_ key gets 401 Invalid API key",
  async () => {
    for (
      const key of [
        "sb_secret_" + "x".repeat(31),
        "sb_publishable_" + "y".repeat(31),
        stack.secretKey.slice(0, -1),
      ]
    ) {
      assert.deepEqual(
        await get("/auth/v1/admin/users", {
          apikey: key,
          Authorization: `Bearer ${key}`,
        }),
        { status: 401, body: BAD_KEY },
      );
    }
  },
);

e2eTest(
  "gateway: supabase-js created with the publishable key signs in and invokes presence-ping",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const client = createClient(stack.apiUrl, stack.publishableKey, {
      auth: { persistSession: false, autoRefreshToken: false },
    });
    const signIn = await client.auth.signInWithPassword({
      email: u.email,
      password: u.password,
    });
    assert.equal(signIn.error, null);
    const { data: user } = await client.auth.getUser();
    assert.equal(user.user?.id, u.id);
    const { data, error } = await client.functions.invoke("presence-ping", {
      body: { state: "online" },
    });
    assert.equal(error, null);
    assert.equal(data.ok, true);
    assert.equal(data.user.id, u.rowId);
    assert.equal(data.user.presence_state, "online");
  },
);

Deno.test("authorizationFor: an sb_ key or no bearer becomes the legacy JWT its apikey stands for; a user's token passes", () => {
  const keys = { sb_secret_s: "SERVICE.JWT", sb_publishable_p: "ANON.JWT" };
  assert.equal(
    authorizationFor(null, "sb_secret_s", keys),
    "Bearer SERVICE.JWT",
  );
  assert.equal(
    authorizationFor("Bearer sb_publishable_p", "sb_publishable_p", keys),
    "Bearer ANON.JWT",
  );
  assert.equal(authorizationFor("Bearer user.jwt", "sb_secret_s", keys), null);
  assert.equal(authorizationFor(null, "legacy.jwt", keys), null);
  assert.equal(authorizationFor("Bearer sb_other", "legacy.jwt", keys), "");
});

closeStackAfterAll("gateway", stack);
