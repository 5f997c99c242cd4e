import assert from "node:assert/strict";
import { bearerToken, serverCaller } from "./auth.ts";
import { readEnv } from "./env.ts";
import { HttpError } from "./errors.ts";

const req = (authorization?: string) =>
  new Request("http://x/", {
    headers: authorization === undefined ? {} : { authorization },
  });

Deno.test("bearerToken: takes the token after 'Bearer '", () => {
  assert.equal(bearerToken(req("Bearer a.b.c")), "a.b.c");
  assert.equal(bearerToken(req("Bearer   a.b.c  ")), "a.b.c");
});

Deno.test("bearerToken: a missing header, another scheme or an empty token is 401 missing_bearer", () => {
  for (
    const value of [
      undefined,
      "",
      "Basic abc",
      "bearer a.b.c",
      "Bearer",
      "Bearer    ",
      "Token a.b.c",
    ]
  ) {
    assert.throws(() => bearerToken(req(value)), (e: unknown) => {
      assert.ok(e instanceof HttpError);
      assert.equal(e.status, 401);
      assert.equal(e.code, "missing_bearer");
      return true;
    }, String(value));
  }
});

const KEYED_ENV = readEnv((name) =>
  ({
    SUPABASE_URL: "http://127.0.0.1:1",
    SUPABASE_PUBLISHABLE_KEYS: '{"default":"sb_publishable_pub"}',
    SUPABASE_SECRET_KEYS: '{"default":"sb_secret_one","ops":"sb_secret_two"}',
    SUPABASE_SERVICE_ROLE_KEY: "legacy.service.jwt",
    SUPABASE_DB_URL: "postgresql://u:p@h/db",
  })[name]
);

function keyed(headers: Record<string, string>): Request {
  return new Request("http://x/functions/v1/auth-sync", {
    method: "POST",
    headers,
  });
}

async function refusal(fn: () => Promise<unknown>): Promise<unknown> {
  try {
    await fn();
  } catch (error) {
    assert.ok(error instanceof HttpError);
    return { status: error.status, code: error.code, ...error.extra };
  }
  assert.fail("not refused");
}

// What the project says of a key (`refusal` for those `refuses` names,
// every key by default), with the keys it was asked about.
function project(
  refusal: string | null,
  refuses: (key: string) => boolean = () => true,
) {
  const asked: string[] = [];
  const keyRefusal = (key: string) => {
    asked.push(key);
    return Promise.resolve(refuses(key) ? refusal : null);
  };
  return { asked, keyRefusal };
}

const ACCEPTS = project(null).keyRefusal;

Deno.test("serverCaller: any secret key, as apikey or bearer, or the legacy service role key the project accepts makes a trusted caller, named as the environment names it (which key acted, for the audit)", async () => {
  const accepting = project(null);
  assert.deepEqual(
    await serverCaller(
      keyed({ apikey: "sb_secret_two" }),
      KEYED_ENV,
      accepting.keyRefusal,
    ),
    { via: "secret_key", keyName: "ops" },
  );
  assert.deepEqual(
    await serverCaller(
      keyed({ Authorization: "Bearer sb_secret_one", apikey: "sb_secret_one" }),
      KEYED_ENV,
      accepting.keyRefusal,
    ),
    { via: "secret_key", keyName: "default" },
  );
  // Each key is asked about: the project may have deleted it since.
  assert.deepEqual(accepting.asked, ["sb_secret_two", "sb_secret_one"]);
  assert.deepEqual(
    await serverCaller(
      keyed({ Authorization: "Bearer legacy.service.jwt" }),
      KEYED_ENV,
      accepting.keyRefusal,
    ),
    { via: "service_role_key", keyName: "service_role" },
  );
  assert.deepEqual(accepting.asked, [
    "sb_secret_two",
    "sb_secret_one",
    "legacy.service.jwt",
  ]);
});

Deno.test("serverCaller: a secret key the project deleted, still in a running function's environment, gives 401 Invalid API key; the project's other key still makes a trusted caller", async () => {
  const deleted = project("Invalid API key", (key) => key === "sb_secret_two");
  for (
    const headers of [
      { apikey: "sb_secret_two" } as Record<string, string>,
      { Authorization: "Bearer sb_secret_two" },
    ]
  ) {
    assert.deepEqual(
      await refusal(() =>
        serverCaller(keyed(headers), KEYED_ENV, deleted.keyRefusal)
      ),
      { status: 401, code: "invalid_token", error: "Invalid API key" },
    );
  }
  assert.deepEqual(
    await serverCaller(
      keyed({ apikey: "sb_secret_one" }),
      KEYED_ENV,
      deleted.keyRefusal,
    ),
    { via: "secret_key", keyName: "default" },
  );
});

Deno.test("serverCaller: the legacy service role key, still in the environment after the project turned legacy keys off, gives 401 with the project's message", async () => {
  const off = project(
    "Legacy API keys are disabled",
    (key) => !key.startsWith("sb_"),
  );
  for (
    const headers of [
      { Authorization: "Bearer legacy.service.jwt" } as Record<string, string>,
      { apikey: "legacy.service.jwt" },
    ]
  ) {
    assert.deepEqual(
      await refusal(() =>
        serverCaller(keyed(headers), KEYED_ENV, off.keyRefusal)
      ),
      {
        status: 401,
        code: "invalid_token",
        error: "Legacy API keys are disabled",
      },
    );
  }
  // The secret keys still make a trusted caller.
  assert.deepEqual(
    await serverCaller(
      keyed({ apikey: "sb_secret_one" }),
      KEYED_ENV,
      off.keyRefusal,
    ),
    { via: "secret_key", keyName: "default" },
  );
});

Deno.test("serverCaller: a user's token, with or without the publishable apikey, is no server", async () => {
  assert.equal(
    await serverCaller(
      keyed({ Authorization: "Bearer a.b.c" }),
      KEYED_ENV,
      ACCEPTS,
    ),
    null,
  );
  assert.equal(
    await serverCaller(
      keyed({ Authorization: "Bearer a.b.c", apikey: "sb_publishable_pub" }),
      KEYED_ENV,
      ACCEPTS,
    ),
    null,
  );
  assert.equal(await serverCaller(keyed({}), KEYED_ENV, ACCEPTS), null);
});

Deno.test("serverCaller: an unknown sb_ key gives 401 Invalid API key, the publishable key as bearer missing sub claim", async () => {
  for (
    const headers of [
      { apikey: "sb_secret_nope" } as Record<string, string>,
      { Authorization: "Bearer sb_secret_nope" },
      { Authorization: "Bearer sb_publishable_nope" },
      { Authorization: "Bearer sb_secret_one2" },
    ]
  ) {
    assert.deepEqual(
      await refusal(() => serverCaller(keyed(headers), KEYED_ENV, ACCEPTS)),
      {
        status: 401,
        code: "invalid_token",
        error: "Invalid API key",
      },
    );
  }
  assert.deepEqual(
    await refusal(() =>
      serverCaller(
        keyed({ Authorization: "Bearer sb_publishable_pub" }),
        KEYED_ENV,
        ACCEPTS,
      )
    ),
    {
      status: 401,
      code: "invalid_token",
      error: "invalid claim: missing sub claim",
      error_code: "bad_jwt",
    },
  );
});
