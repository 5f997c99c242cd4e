import assert from "node:assert/strict";
import { AuthApiError, AuthRetryableFetchError } from "@supabase/supabase-js";
import { createDeps } from "../_shared/deps.ts";
import { type FunctionEnv, readEnv } from "../_shared/env.ts";
import { errorResponse } from "../_shared/errors.ts";
import { AuditedError } from "./audit.ts";
import { answerLost, lostAnswerError } from "./provider.ts";

// The admin API as the handler gets it (deps.authAdmin): the shared
// service-role client with the provider timeout and the not-sent marking.
const adminApi = (env: FunctionEnv) => createDeps().authAdmin(env);

const ACCOUNT = "00000000-0000-4000-8000-000000000001";

function envFor(supabaseUrl: string): FunctionEnv {
  const vars: Record<string, string> = {
    SUPABASE_URL: supabaseUrl,
    SUPABASE_ANON_KEY: "anon",
    SUPABASE_SERVICE_ROLE_KEY: "service",
    SUPABASE_DB_URL: "postgresql://unused",
    DB_POOL_MAX: "1",
  };
  return readEnv((name) => vars[name]);
}

/** The error of an admin update against a loopback Auth answering `handler`. */
async function updateAgainst(
  handler: (req: Request) => Response | Promise<Response>,
) {
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    handler,
  );
  try {
    const { error } = await adminApi(
      envFor(`http://127.0.0.1:${server.addr.port}`),
    ).updateUserById(ACCOUNT, { email: "a@example.com" });
    assert.ok(error);
    return error;
  } finally {
    await server.shutdown();
  }
}

Deno.test("answerLost: a request that never left (connection refused) changed nothing", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = listener.addr.port;
  listener.close();
  const { error } = await adminApi(envFor(`http://127.0.0.1:${port}`))
    .updateUserById(ACCOUNT, { email: "a@example.com" });
  assert.ok(error);
  assert.equal(error.status, 0);
  assert.match(error.message, /^Request not sent: /);
  assert.equal(answerLost(error), false);
});

Deno.test("answerLost: a 5xx or a connection dropped mid-answer may hide a change", async () => {
  const fiveHundred = await updateAgainst(() =>
    Response.json({ code: 500, msg: "boom" }, { status: 500 })
  );
  assert.equal(fiveHundred.status, 500);
  assert.equal(answerLost(fiveHundred), true);

  const dropped = await updateAgainst(() =>
    new Response(
      new ReadableStream({
        start(c) {
          c.enqueue(new TextEncoder().encode('{"id":'));
          c.error(new Error("dropped"));
        },
      }),
      { headers: { "Content-Type": "application/json" } },
    )
  );
  assert.equal(dropped.status, 0);
  assert.equal(answerLost(dropped), true);
});

Deno.test("answerLost: a refusal or a 429 changed nothing", async () => {
  const refused = await updateAgainst(() =>
    Response.json({ code: 422, error_code: "weak_password", msg: "weak" }, {
      status: 422,
    })
  );
  assert.equal(answerLost(refused), false);
  const throttled = await updateAgainst(() =>
    Response.json({ code: 429, msg: "slow down" }, { status: 429 })
  );
  assert.equal(answerLost(throttled), false);
  // Timeouts and other network errors reach supabase-js as status 0.
  assert.equal(
    answerLost(new AuthRetryableFetchError("Signal timed out.", 0)),
    true,
  );
  assert.equal(
    answerLost(new AuthApiError("unexpected", 502, "unexpected_failure")),
    true,
  );
});

Deno.test("lostAnswerError: unchanged and undone give 503 idp_unavailable, audited failed", async () => {
  const cause = new AuthApiError("boom", 500, "unexpected_failure");
  for (
    const [state, detail] of [
      ["unchanged", "idp_unavailable"],
      ["undone", "idp_unavailable_undone"],
    ] as const
  ) {
    const error = lostAnswerError({ state }, cause);
    assert.ok(error instanceof AuditedError);
    assert.deepEqual(error.audit, { outcome: "failed", detail });
    const res = errorResponse(error, "req-1");
    assert.equal(res.status, 503);
    assert.equal(res.headers.get("retry-after"), "5");
    assert.deepEqual(await res.json(), {
      message: "Proveedor de identidad no disponible",
      code: "idp_unavailable",
    });
  }
});

Deno.test("lostAnswerError: a new email another account holds gives 409 email_exists, audited failed (Auth's unique index, not a lost answer)", async () => {
  const cause = new AuthApiError(
    "Error updating user",
    500,
    "unexpected_failure",
  );
  const error = lostAnswerError({ state: "email_taken" }, cause);
  assert.ok(error instanceof AuditedError);
  assert.deepEqual(error.audit, { outcome: "failed", detail: "email_exists" });
  const res = errorResponse(error, "req-1");
  assert.equal(res.status, 409);
  assert.equal(res.headers.get("retry-after"), null);
  assert.equal((await res.json()).code, "email_exists");
});

Deno.test("lostAnswerError: fields left changed give 500 partial_failure with provider_changed", async () => {
  const cause = new AuthRetryableFetchError("Signal timed out.", 0);
  const error = lostAnswerError(
    { state: "changed", fields: ["email", "password"] },
    cause,
  );
  assert.ok(error instanceof AuditedError);
  assert.deepEqual(error.audit, {
    outcome: "partial_failure",
    detail: "idp_answer_lost:email,password",
  });
  const res = errorResponse(error, "req-1");
  assert.equal(res.status, 500);
  assert.deepEqual(await res.json(), {
    message:
      "Cambio aplicado en el proveedor de identidad pero no en la base de datos",
    code: "partial_failure",
    provider_changed: ["email", "password"],
    error: "Auth's answer to the account change was lost: Signal timed out.",
    request_id: "req-1",
  });
});

Deno.test("lostAnswerError: a failed read-back gives 500 partial_failure with provider_state unknown", async () => {
  const cause = new AuthApiError("boom", 503, "unexpected_failure");
  const error = lostAnswerError(
    { state: "unknown", fields: ["password"] },
    cause,
  );
  assert.ok(error instanceof AuditedError);
  assert.deepEqual(error.audit, {
    outcome: "partial_failure",
    detail: "idp_state_unknown",
  });
  const res = errorResponse(error, "req-1");
  assert.equal(res.status, 500);
  assert.deepEqual(await res.json(), {
    message:
      "Cambio aplicado en el proveedor de identidad pero no en la base de datos",
    code: "partial_failure",
    provider_changed: ["password"],
    provider_state: "unknown",
    error: "Auth's answer to the account change was lost: boom",
    request_id: "req-1",
  });
});
