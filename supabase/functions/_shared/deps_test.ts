import assert from "node:assert/strict";
import { poolOf } from "./db.ts";
import { createDeps } from "./deps.ts";
import { SETTINGS_FAILURE_MS, SETTINGS_TTL_MS } from "./auth.ts";
import { type FunctionEnv, readEnv } from "./env.ts";
import { HttpError } from "./errors.ts";

function envFor(
  supabaseUrl: string,
  dbUrl = "postgresql://unused",
): FunctionEnv {
  const vars: Record<string, string> = {
    SUPABASE_URL: supabaseUrl,
    SUPABASE_ANON_KEY: "anon",
    SUPABASE_SERVICE_ROLE_KEY: "service",
    SUPABASE_DB_URL: dbUrl,
  };
  return readEnv((name) => vars[name]);
}

// A loopback server answering `answer` and counting requests by path.
function loopback(answer: (req: Request) => Response) {
  const hits: Record<string, number> = {};
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    (req) => {
      const path = new URL(req.url).pathname;
      hits[path] = (hits[path] ?? 0) + 1;
      return answer(req);
    },
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    hits,
    close: () => server.shutdown(),
  };
}

Deno.test("createDeps: two sets share no pool, and close() ends a set's pools (the next request opens a new one)", async () => {
  // postgres.js connects on the first query: no database is needed here.
  const env = envFor("http://127.0.0.1:9", "postgresql://u:p@127.0.0.1:9/db");
  const a = createDeps();
  const b = createDeps();
  try {
    const pool = poolOf(a.database(env));
    assert.equal(poolOf(a.database(env)), pool, "one pool per URL in a set");
    assert.notEqual(poolOf(b.database(env)), pool, "sets share no pool");
    await a.close();
    assert.notEqual(
      poolOf(a.database(env)),
      pool,
      "a closed pool is not reused",
    );
  } finally {
    await Promise.all([a.close(), b.close()]);
  }
});

Deno.test("createDeps: Auth's settings answer is asked once by callers at the same time, kept SETTINGS_TTL_MS by the injected clock, then asked again", async () => {
  const auth = loopback(() => Response.json({ mailer_autoconfirm: false }));
  const t0 = Date.now();
  let offset = 0;
  const deps = createDeps({ now: () => t0 + offset });
  const env = envFor(auth.url);
  try {
    assert.deepEqual(
      await Promise.all([deps.autoconfirms(env), deps.autoconfirms(env)]),
      [false, false],
    );
    offset = SETTINGS_TTL_MS - 1;
    assert.equal(await deps.autoconfirms(env), false);
    assert.equal(auth.hits["/auth/v1/settings"], 1);
    offset = SETTINGS_TTL_MS;
    assert.equal(await deps.autoconfirms(env), false);
    assert.equal(auth.hits["/auth/v1/settings"], 2);
    // Another set asks for itself.
    assert.equal(await createDeps().autoconfirms(env), false);
    assert.equal(auth.hits["/auth/v1/settings"], 3);
  } finally {
    await auth.close();
  }
});

Deno.test("createDeps: keyRefusal asks Auth's admin API with the key itself, passes a refusal's message on, keeps each answer SETTINGS_TTL_MS and an outage SETTINGS_FAILURE_MS", async () => {
  let legacyOff = false;
  const seen: (string | null)[] = [];
  const auth = loopback((req) => {
    seen.push(req.headers.get("apikey"));
    if (req.headers.get("apikey") === "gone") {
      return Response.json({ message: "boom" }, { status: 503 });
    }
    return legacyOff
      ? Response.json({ message: "Legacy API keys are disabled" }, {
        status: 401,
      })
      : Response.json({ users: [], aud: "authenticated" });
  });
  const t0 = Date.now();
  let offset = 0;
  const deps = createDeps({ now: () => t0 + offset });
  const env = envFor(auth.url);
  try {
    assert.equal(await deps.keyRefusal("service", env), null);
    legacyOff = true;
    offset = SETTINGS_TTL_MS - 1;
    assert.equal(await deps.keyRefusal("service", env), null, "kept");
    offset = SETTINGS_TTL_MS;
    assert.equal(
      await deps.keyRefusal("service", env),
      "Legacy API keys are disabled",
    );
    assert.equal(auth.hits["/auth/v1/admin/users"], 2);
    assert.deepEqual(seen, ["service", "service"]);
    // Auth that cannot answer is an outage, not a refusal: the requests
    // that ask meanwhile share the one question, and hear the outage for
    // SETTINGS_FAILURE_MS without asking again.
    const outage = (e: unknown) =>
      e instanceof HttpError && e.code === "idp_unavailable";
    const burst = Array.from({ length: 5 }, () => deps.keyRefusal("gone", env));
    for (const refused of burst) await assert.rejects(refused, outage);
    assert.equal(auth.hits["/auth/v1/admin/users"], 3);
    offset += SETTINGS_FAILURE_MS - 1;
    await assert.rejects(() => deps.keyRefusal("gone", env), outage);
    assert.equal(auth.hits["/auth/v1/admin/users"], 3, "the outage is kept");
    offset += 1;
    await assert.rejects(() => deps.keyRefusal("gone", env), outage);
    assert.equal(auth.hits["/auth/v1/admin/users"], 4, "then asked again");
  } finally {
    await auth.close();
  }
});

Deno.test("createDeps: authenticate judges Auth's banned_until by the injected clock", async () => {
  const t0 = Date.now();
  const bannedUntil = new Date(t0 + 3_600_000).toISOString();
  // Auth's GET /user answer for a user banned for the next hour.
  const auth = loopback(() =>
    Response.json({
      id: "00000000-0000-4000-8000-000000000001",
      aud: "authenticated",
      role: "authenticated",
      email: "Ana@Example.com",
      email_confirmed_at: new Date(t0 - 60_000).toISOString(),
      banned_until: bannedUntil,
      app_metadata: { provider: "email" },
      user_metadata: {},
      created_at: new Date(t0 - 60_000).toISOString(),
    })
  );
  const env = envFor(auth.url);
  const token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln";
  let offset = 0;
  const deps = createDeps({ now: () => t0 + offset });
  try {
    await assert.rejects(
      deps.authenticate(token, env),
      (error) =>
        error instanceof HttpError && error.code === "invalid_token" &&
        error.extra.error_code === "user_banned",
    );
    offset = 3_600_001; // the ban is over by the handler's clock
    const identity = await deps.authenticate(token, env);
    assert.deepEqual(identity, {
      id: "00000000-0000-4000-8000-000000000001",
      email: "ana@example.com",
      emailConfirmed: true,
      confirmedAfterMail: false,
      appMetadata: { provider: "email" },
    });
  } finally {
    await deps.close();
    await auth.close();
  }
});
