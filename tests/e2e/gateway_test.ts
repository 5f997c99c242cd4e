/**
 * The local gateway's `apikey` rules, as Supabase's hosted API gateway
 * applies them: `/auth/v1/*` needs the anon or service_role key (header or
 * query parameter), except the links opened from emails and redirects and
 * the JWKS; `/functions/v1/*` is not key-checked.
 */
import assert from "node:assert/strict";
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

closeStackAfterAll("gateway", stack);
