/**
 * presence reads check tokens as pings do: an ES256 token is verified
 * against the cached JWKS and its session, ban and deletion proved in the
 * statement that finds the reader's row, with no call to Auth's `/user`;
 * both paths (`PRESENCE_VERIFY=local`, the default, and `auth`) give the
 * same answers for the same tokens.
 */
import assert from "node:assert/strict";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { call, type Invoked } from "../support/invoke.ts";
import { LATEST_MIGRATION } from "../../supabase/functions/_shared/db_function.ts";
import {
  servedBehindCountingProxy,
  startTestStack,
  type TestStack,
} from "../support/stack.ts";
import { es256Token, hs256Token, sessionIdOf } from "../support/tokens.ts";

const stack: TestStack = await startTestStack();
const key = stack.signingKey!;
const viaAuth = await stack.withFunctionEnv({ PRESENCE_VERIFY: "auth" });

function essence(res: Invoked) {
  if (res.status !== 200) return { status: res.status, body: res.body };
  return {
    status: 200,
    users: res.body.users.map((u: { id: number; status: string }) => [
      u.id,
      u.status,
    ]),
  };
}

async function both(token: string, ids: number[]) {
  const init = {
    headers: {
      Authorization: `Bearer ${token}`,
      "Content-Type": "application/json",
    },
    body: JSON.stringify({ ids }),
  };
  return {
    fast: essence(await call(stack.apiUrl, "presence", init)),
    slow: essence(await call(viaAuth.apiUrl, "presence", init)),
  };
}

const member = () => stack.createUser({ row: { auth_user_id: true } });

const cases: [string, () => Promise<{ token: string; expect: number }>][] = [
  ["a valid ES256 token with a row", async () => {
    return { token: (await member()).token, expect: 200 };
  }],
  ["a valid ES256 token without a row", async () => {
    return { token: (await stack.createUser()).token, expect: 404 };
  }],
  ["the token of a signed-out session", async () => {
    const u = await member();
    await u.client.auth.signOut();
    return { token: u.token, expect: 401 };
  }],
  ["the token of a banned user", async () => {
    const u = await member();
    await stack.admin().auth.admin.updateUserById(u.id, { ban_duration: "1h" });
    return { token: u.token, expect: 401 };
  }],
  ["the token of a deleted user", async () => {
    const u = await member();
    await stack.admin().auth.admin.deleteUser(u.id);
    return { token: u.token, expect: 401 };
  }],
  ["an expired ES256 token of a live session", async () => {
    const u = await member();
    const now = Math.floor(Date.now() / 1000);
    const token = await es256Token(stack.apiUrl, u, key, {
      session_id: sessionIdOf(u.token),
      iat: now - 7200,
      exp: now - 10,
    });
    return { token, expect: 401 };
  }],
  ["a valid HS256 token of a live session", async () => {
    const u = await member();
    const token = await hs256Token(stack.apiUrl, u, {
      session_id: sessionIdOf(u.token),
    });
    return { token, expect: 200 };
  }],
  ["a valid ES256 token without session_id", async () => {
    const u = await member();
    return { token: await es256Token(stack.apiUrl, u, key), expect: 200 };
  }],
];

for (const [name, make] of cases) {
  e2eTest(`presence: both token paths agree on ${name}`, async () => {
    const { token, expect } = await make();
    const [{ id }] = await stack.sql`select min(id)::int as id
                                     from public.usuarios`;
    const { fast, slow } = await both(token, [id]);
    assert.equal(fast.status, expect, JSON.stringify(fast));
    assert.deepEqual(fast, slow);
  });
}

e2eTest(
  "presence: a valid ES256 token reads without calling Auth's /user, HS256 calls it",
  async () => {
    const { calls, proxy, served } = await servedBehindCountingProxy(stack);
    try {
      const u = await member();
      const read = (token: string) =>
        call(served.apiUrl, "presence", {
          headers: { Authorization: `Bearer ${token}` },
        });
      for (let i = 0; i < 5; i++) {
        assert.equal((await read(u.token)).status, 200);
      }
      assert.equal(calls.get("/auth/v1/user") ?? 0, 0);
      const hs = await hs256Token(stack.apiUrl, u, {
        session_id: sessionIdOf(u.token),
      });
      for (let i = 0; i < 3; i++) assert.equal((await read(hs)).status, 200);
      assert.equal(calls.get("/auth/v1/user"), 3);
    } finally {
      await served.close();
      await proxy.shutdown();
    }
  },
);

e2eTest(
  "presence: a database without the read's function or its schema (the migrations not applied) answers 500 migration_missing naming the newest migration, not internal_error",
  async () => {
    const u = await member();
    const read = () =>
      call(stack.apiUrl, "presence", {
        headers: { Authorization: `Bearer ${u.token}` },
      });
    const [{ fn }] = await stack.sql`
      select p.oid::regprocedure::text as fn from pg_proc p
      where p.pronamespace = 'presence'::regnamespace
        and p.proname = 'reader'`;
    const moves = [
      [
        `alter function ${fn} rename to reader_moved`,
        `alter function ${
          fn.replace("presence.reader(", "presence.reader_moved(")
        } rename to reader`,
      ],
      [
        "alter schema presence rename to presence_moved",
        "alter schema presence_moved rename to presence",
      ],
    ];
    for (const [move, back] of moves) {
      await stack.sql.unsafe(move);
      try {
        const res = await read();
        assert.deepEqual(
          [res.status, res.body.code],
          [500, "migration_missing"],
          `${move}: ${JSON.stringify(res.body)}`,
        );
        assert.ok(
          res.body.error.endsWith(
            `: apply the migrations up to ${LATEST_MIGRATION}`,
          ),
          res.body.error,
        );
      } finally {
        await stack.sql.unsafe(back);
      }
    }
    assert.equal((await read()).status, 200);
  },
);

e2eTest("presence read paths: the Auth-only gateway closes", async () => {
  await viaAuth.close();
});

closeStackAfterAll("presence read paths", stack);
