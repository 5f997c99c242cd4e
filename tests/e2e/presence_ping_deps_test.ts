/**
 * presence-ping over dependencies passed in (`createPresencePing(env,
 * deps)`): the real pool, Auth and key set, wrapped only to count calls,
 * and a clock the test moves. The fast path's pause after an unreadable
 * auth schema belongs to the handler and follows the clock it was given.
 */
import assert from "node:assert/strict";
import { functionEnv } from "../../local/functions.ts";
import {
  createDeps,
  type FunctionDeps,
} from "../../supabase/functions/_shared/deps.ts";
import { createPresencePing } from "../../supabase/functions/presence-ping/handler.ts";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { startTestStack, type TestStack } from "../support/stack.ts";

const stack: TestStack = await startTestStack();

e2eTest(
  "createPresencePing: after an unreadable auth schema the fast path rests 60 s by the injected clock, then is tried again",
  async () => {
    const env = functionEnv(stack.functionInput);
    // From now on: the key set and Auth's checks judge tokens by it too.
    let clock = Date.now();
    const calls = { local: 0, auth: 0 };
    const real = createDeps({ now: () => clock });
    const deps: FunctionDeps = {
      ...real,
      verifyLocally: (token, e) => {
        calls.local++;
        return real.verifyLocally(token, e);
      },
      authenticate: (token, e) => {
        calls.auth++;
        return real.authenticate(token, e);
      },
    };
    const handler = createPresencePing((name) => env.get(name), deps);
    const u = await stack.createUser({ row: { auth_user_id: true } });
    const ping = async () => {
      const res = await handler(
        new Request("http://functions.local/presence-ping", {
          method: "POST",
          headers: { Authorization: `Bearer ${u.token}` },
        }),
      );
      const body = await res.json();
      assert.equal(res.status, 200, JSON.stringify(body));
      assert.equal(body.user.id, u.rowId);
    };
    const took = async (local: number, auth: number) => {
      const before = { ...calls };
      await ping();
      assert.deepEqual(
        { local: calls.local - before.local, auth: calls.auth - before.auth },
        { local, auth },
      );
    };
    try {
      await took(1, 0);
      await stack
        .sql`alter table auth.sessions rename column not_after to not_after_moved`;
      try {
        await took(1, 1); // the schema error: Auth decides, the fast path rests
        clock += 59_000;
        await took(0, 1); // still resting: straight to Auth
        clock += 2_000;
        await took(1, 1); // tried again, still failing
      } finally {
        await stack
          .sql`alter table auth.sessions rename column not_after_moved to not_after`;
      }
      await took(0, 1); // resting again from the last failure
      clock += 61_000;
      await took(1, 0); // back on the fast path, Auth not asked
    } finally {
      await real.close();
    }
  },
);

closeStackAfterAll("presence_ping_deps", stack);
