/**
 * presence-ping's two ways of checking a token give the same answers: the
 * fast path (ES256 verified against the cached JWKS, session, ban and
 * deletion proved in the update statement) and Auth's `getUser`
 * (`PRESENCE_VERIFY=auth`). Also: the fast path does not call Auth's
 * `/user` for a valid ES256 token, and HS256 tokens still do.
 */
import assert from "node:assert/strict";
import { generateSigningKey } from "../../local/auth/mod.ts";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { call, type Invoked } from "../support/invoke.ts";
import {
  servedBehindCountingProxy,
  startTestStack,
  type TestStack,
} from "../support/stack.ts";
import { es256Token, hs256Token, sessionIdOf } from "../support/tokens.ts";

// The username strategy is on for the tests' own domain, so that both paths
// are compared on it too.
const MATCHING = { USERNAME_MATCH_DOMAINS: "test.local" };
const stack: TestStack = await startTestStack({ functionEnv: MATCHING });
const key = stack.signingKey!;
const viaAuth = await stack.withFunctionEnv({
  ...MATCHING,
  PRESENCE_VERIFY: "auth",
});

// The part of an answer both paths must agree on (times differ by design).
function essence(res: Invoked) {
  if (res.status !== 200) return { status: res.status, body: res.body };
  return {
    status: 200,
    id: res.body.user.id,
    state: res.body.user.presence_state,
  };
}

async function both(token: string, body: unknown = { state: "offline" }) {
  const init = {
    headers: {
      Authorization: `Bearer ${token}`,
      "Content-Type": "application/json",
    },
    body: JSON.stringify(body),
  };
  const fast = await call(stack.apiUrl, "presence-ping", init);
  const slow = await call(viaAuth.apiUrl, "presence-ping", init);
  return { fast: essence(fast), slow: essence(slow) };
}

const cases: [string, () => Promise<{ token: string; expect: number }>][] = [
  ["a valid ES256 token with a row", async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    return { token: u.token, expect: 200 };
  }],
  ["a valid ES256 token without a row", async () => {
    const u = await stack.createUser();
    return { token: u.token, expect: 404 };
  }],
  ["a valid ES256 token whose row is matched by username only", async () => {
    const u = await stack.createUser();
    await stack.sql`insert into public.usuarios (nombre_usuario)
                    values (${u.email.split("@")[0]})`;
    return { token: u.token, expect: 200 };
  }],
  ["the token of a signed-out session", async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    await u.client.auth.signOut();
    return { token: u.token, expect: 401 };
  }],
  ["the token of a banned user", async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    await stack.admin().auth.admin.updateUserById(u.id, { ban_duration: "1h" });
    return { token: u.token, expect: 401 };
  }],
  ["the token of a deleted user", async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    await stack.admin().auth.admin.deleteUser(u.id);
    return { token: u.token, expect: 401 };
  }],
  ["an expired ES256 token of a live session", async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const now = Math.floor(Date.now() / 1000);
    const token = await es256Token(stack.apiUrl, u, key, {
      session_id: sessionIdOf(u.token),
      iat: now - 7200,
      exp: now - 10,
    });
    return { token, expect: 401 };
  }],
  ["a tampered payload", async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const other = await stack.createUser({ row: { auth_user_id: true } });
    const [h, , s] = u.token.split(".");
    const [, p] = other.token.split(".");
    return { token: `${h}.${p}.${s}`, expect: 401 };
  }],
  [
    "an ES256 token signed with a foreign key under the published kid",
    async () => {
      const u = await stack.createUser({ row: { auth_user_id: true } });
      const foreign = await generateSigningKey();
      const token = await es256Token(stack.apiUrl, u, {
        privateJwk: foreign.privateJwk,
        kid: key.kid,
      }, { session_id: sessionIdOf(u.token) });
      return { token, expect: 401 };
    },
  ],
  ["an ES256 token with a kid that is not published", async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const foreign = await generateSigningKey();
    const token = await es256Token(stack.apiUrl, u, foreign, {
      session_id: sessionIdOf(u.token),
    });
    return { token, expect: 401 };
  }],
  ["a valid HS256 token of a live session", async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const token = await hs256Token(stack.apiUrl, u, {
      session_id: sessionIdOf(u.token),
    });
    return { token, expect: 200 };
  }],
  ["an HS256 token signed with the anon key as secret", async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const token = await hs256Token(stack.apiUrl, u, {}, stack.anonKey);
    return { token, expect: 401 };
  }],
  ["a token with alg none", async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const [, p] = u.token.split(".");
    const header = btoa(JSON.stringify({ alg: "none", typ: "JWT" }))
      .replaceAll("=", "").replaceAll("+", "-").replaceAll("/", "_");
    return { token: `${header}.${p}.`, expect: 401 };
  }],
  [
    "the service_role key used as a user's token",
    () => Promise.resolve({ token: stack.serviceRoleKey, expect: 401 }),
  ],
  ["a valid ES256 token without session_id", async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const token = await es256Token(stack.apiUrl, u, key);
    return { token, expect: 200 };
  }],
  ["an ES256 token naming another user's session", async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const other = await stack.createUser();
    const token = await es256Token(stack.apiUrl, u, key, {
      session_id: sessionIdOf(other.token),
    });
    const slow = await call(viaAuth.apiUrl, "presence-ping", {
      headers: { Authorization: `Bearer ${token}` },
    });
    return { token, expect: slow.status };
  }],
];

for (const [name, make] of cases) {
  e2eTest(`presence-ping: both token paths agree on ${name}`, async () => {
    const { token, expect } = await make();
    const { fast, slow } = await both(token);
    assert.equal(fast.status, expect);
    assert.deepEqual(fast, slow);
  });
}

e2eTest(
  "presence-ping: both token paths agree on the body-size limit for a signed-out session",
  async () => {
    const u = await stack.createUser({ row: { auth_user_id: true } });
    await u.client.auth.signOut();
    const { fast, slow } = await both(u.token, { pad: "x".repeat(70_000) });
    assert.equal(fast.status, 401);
    assert.deepEqual(fast, slow);
  },
);

e2eTest(
  "presence-ping: a valid ES256 token is checked without calling Auth's /user, HS256 calls it",
  async () => {
    const { calls, proxy, served } = await servedBehindCountingProxy(stack);
    try {
      const u = await stack.createUser({ row: { auth_user_id: true } });
      const ping = (token: string) =>
        call(served.apiUrl, "presence-ping", {
          headers: { Authorization: `Bearer ${token}` },
        });
      for (let i = 0; i < 5; i++) {
        assert.equal((await ping(u.token)).status, 200);
      }
      assert.equal(calls.get("/auth/v1/user") ?? 0, 0);
      assert.equal(calls.get("/auth/v1/.well-known/jwks.json"), 1);
      const hs = await hs256Token(stack.apiUrl, u, {
        session_id: sessionIdOf(u.token),
      });
      for (let i = 0; i < 3; i++) assert.equal((await ping(hs)).status, 200);
      assert.equal(calls.get("/auth/v1/user"), 3);
    } finally {
      await served.close();
      await proxy.shutdown();
    }
  },
);

e2eTest(
  "presence-ping: with SUPABASE_JWKS set, a valid ES256 token is checked against it, without fetching the JWKS",
  async () => {
    const { calls, proxy, served } = await servedBehindCountingProxy(stack, {
      SUPABASE_JWKS: JSON.stringify({ keys: [key.publicJwk] }),
    });
    try {
      const u = await stack.createUser({ row: { auth_user_id: true } });
      const res = await call(served.apiUrl, "presence-ping", {
        headers: { Authorization: `Bearer ${u.token}` },
      });
      assert.equal(res.status, 200);
      assert.equal(res.body.user.id, u.rowId);
      assert.equal(calls.get("/auth/v1/.well-known/jwks.json") ?? 0, 0);
      assert.equal(calls.get("/auth/v1/user") ?? 0, 0);
      // A key the variable does not hold is left to Auth.
      const other = await generateSigningKey();
      const foreign = await es256Token(stack.apiUrl, u, other, {
        session_id: sessionIdOf(u.token),
      });
      assert.equal(
        (await call(served.apiUrl, "presence-ping", {
          headers: { Authorization: `Bearer ${foreign}` },
        })).status,
        401,
      );
      assert.equal(calls.get("/auth/v1/user"), 1);
    } finally {
      await served.close();
      await proxy.shutdown();
    }
  },
);

e2eTest(
  "presence-ping: an ES256 token naming another issuer or audience is left to Auth",
  async () => {
    const { calls, proxy, served } = await servedBehindCountingProxy(stack);
    const userCalls = () => calls.get("/auth/v1/user") ?? 0;
    try {
      const u = await stack.createUser({ row: { auth_user_id: true } });
      const ping = (token: string) =>
        call(served.apiUrl, "presence-ping", {
          headers: { Authorization: `Bearer ${token}` },
        });
      const session_id = sessionIdOf(u.token);
      const good = await es256Token(stack.apiUrl, u, key, { session_id });
      assert.equal((await ping(good)).status, 200);
      assert.equal(userCalls(), 0);
      const foreignIssuer = await es256Token(stack.apiUrl, u, key, {
        session_id,
        iss: "https://elsewhere.example/auth/v1",
      });
      await ping(foreignIssuer);
      assert.equal(userCalls(), 1);
      const foreignAudience = await es256Token(stack.apiUrl, u, key, {
        session_id,
        aud: "other-app",
      });
      await ping(foreignAudience);
      assert.equal(userCalls(), 2);
    } finally {
      await served.close();
      await proxy.shutdown();
    }
  },
);

e2eTest(
  "presence-ping: with PRESENCE_MIN_WRITE_INTERVAL_S a repeated state is not written again",
  async () => {
    const served = await stack.withFunctionEnv({
      PRESENCE_MIN_WRITE_INTERVAL_S: "60",
    });
    try {
      const u = await stack.createUser({ row: { auth_user_id: true } });
      const ping = (state: string) =>
        call(served.apiUrl, "presence-ping", {
          headers: {
            Authorization: `Bearer ${u.token}`,
            "Content-Type": "application/json",
          },
          body: JSON.stringify({ state }),
        });
      const first = await ping("online");
      assert.equal(first.status, 200);
      await new Promise((r) => setTimeout(r, 20));
      const repeat = await ping("online");
      assert.equal(repeat.status, 200);
      assert.deepEqual(repeat.body, first.body);
      const change = await ping("offline");
      assert.equal(change.body.user.presence_state, "offline");
      assert.ok(change.body.user.ultimo_acceso > first.body.user.ultimo_acceso);
      const [stored] = await stack.sql`
      select presence_state, ultimo_acceso from public.usuarios where id = ${u
        .rowId!}`;
      assert.equal(stored.presence_state, "offline");
      assert.equal(
        (stored.ultimo_acceso as Date).toISOString(),
        change.body.user.ultimo_acceso,
      );
    } finally {
      await served.close();
    }
  },
);

e2eTest("presence-ping paths: the Auth-only gateway closes", async () => {
  await viaAuth.close();
  await assert.rejects(
    fetch(`${viaAuth.apiUrl}/functions/v1/presence-ping`, {
      signal: AbortSignal.timeout(2000),
    }),
  );
});

closeStackAfterAll("presence-ping paths", stack);
