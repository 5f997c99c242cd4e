import assert from "node:assert/strict";
import postgres from "postgres";
import { HttpError } from "./errors.ts";
import { noteOnRequest } from "./log.ts";
import {
  createFunction,
  MAX_BODY_BYTES,
  readBodyText,
  readJsonBody,
} from "./http.ts";

const env: Record<string, string> = {
  SUPABASE_URL: "http://127.0.0.1:9",
  SUPABASE_ANON_KEY: "a",
  SUPABASE_SERVICE_ROLE_KEY: "s",
  SUPABASE_DB_URL: "postgresql://x@127.0.0.1:9/x",
};
const ok = createFunction(
  "t",
  (n) => env[n],
  () => Promise.resolve(new Response("done")),
);

/** The answer to a POST of a function whose work throws `error`. */
function answerTo(error: unknown): Promise<Response> {
  return createFunction("t", (n) => env[n], () => Promise.reject(error))(
    new Request("http://x/", { method: "POST" }),
  );
}

Deno.test("createFunction: a CORS preflight gets 204 with CORS headers", async () => {
  const res = await ok(
    new Request("http://x/", {
      method: "OPTIONS",
      headers: {
        "access-control-request-method": "POST",
        origin: "https://app.example",
      },
    }),
  );
  assert.equal(res.status, 204);
  assert.equal(res.headers.get("access-control-allow-origin"), "*");
  assert.equal(res.headers.get("access-control-allow-credentials"), null);
});

Deno.test("createFunction: other methods get 405 with Allow, OPTIONS without a preflight too", async () => {
  for (const method of ["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]) {
    const res = await ok(new Request("http://x/", { method }));
    assert.equal(res.status, 405, method);
    assert.equal(res.headers.get("allow"), "POST, OPTIONS");
    if (method !== "HEAD") {
      assert.deepEqual(await res.json(), {
        message: "Method Not Allowed",
        code: "method_not_allowed",
      });
    } else await res.body?.cancel();
  }
});

Deno.test("createFunction: the method is checked before the environment", async () => {
  const broken = createFunction(
    "t",
    () => undefined,
    () => Promise.resolve(new Response()),
  );
  assert.equal(
    (await broken(new Request("http://x/", { method: "GET" }))).status,
    405,
  );
  const lines = await logged(async () => {
    const res = await broken(new Request("http://x/", { method: "POST" }));
    assert.equal(res.status, 500);
    assert.equal((await res.json()).code, "missing_env");
  });
  const failed = lines.find((l) => l.level === "error")!;
  assert.equal(failed.code, "missing_env");
  assert.deepEqual(
    Object.entries(failed.missing as Record<string, boolean>)
      .filter(([, missing]) => missing).map(([name]) => name),
    [
      "SUPABASE_URL",
      "SUPABASE_ANON_KEY",
      "SUPABASE_SERVICE_ROLE_KEY_or_SUPABASE_SERVICE_KEY",
      "SUPABASE_DB_URL",
    ],
    "the log names what is missing",
  );
});

Deno.test("createFunction: an invalid setting is named in the error line as in the answer, without its value", async () => {
  const vars: Record<string, string> = {
    ...env,
    SUPABASE_DB_URL: "postgresql://u:?s3cret@h/db",
  };
  const broken = createFunction("t", (n) => vars[n], () => {
    throw new Error("not reached");
  });
  let body: Record<string, unknown> = {};
  const lines = await logged(async () => {
    const res = await broken(new Request("http://x/", { method: "POST" }));
    body = await res.json();
  });
  const failed = lines.find((l) => l.level === "error")!;
  assert.equal(failed.code, "invalid_env");
  assert.deepEqual(failed.invalid, body.invalid);
  assert.match(
    (failed.invalid as Record<string, string>).SUPABASE_DB_URL,
    /database URL: a parameter it does not know/,
  );
  assert.ok(!JSON.stringify([lines, body]).includes("s3cret"));
});

Deno.test("readBodyText: refuses more than 64 KiB with 413, declared or streamed", async () => {
  const big = "x".repeat(MAX_BODY_BYTES + 1);
  await assert.rejects(
    readBodyText(new Request("http://x/", { method: "POST", body: big })),
    (e: unknown) => e instanceof HttpError && e.status === 413,
  );
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      c.enqueue(new TextEncoder().encode(big));
      c.close();
    },
  });
  await assert.rejects(
    readBodyText(new Request("http://x/", { method: "POST", body: stream })),
    (e: unknown) => e instanceof HttpError && e.code === "payload_too_large",
  );
  assert.equal(
    (await readBodyText(
      new Request("http://x/", {
        method: "POST",
        body: "x".repeat(MAX_BODY_BYTES),
      }),
    )).length,
    MAX_BODY_BYTES,
  );
});

Deno.test("readJsonBody: empty is undefined, bad JSON is 400 bad_json", async () => {
  assert.equal(
    await readJsonBody(new Request("http://x/", { method: "POST" })),
    undefined,
  );
  assert.deepEqual(
    await readJsonBody(
      new Request("http://x/", { method: "POST", body: '{"a":1}' }),
    ),
    { a: 1 },
  );
  await assert.rejects(
    readJsonBody(new Request("http://x/", { method: "POST", body: "{nope" })),
    (e: unknown) =>
      e instanceof HttpError && e.code === "bad_json" && e.status === 400,
  );
});

Deno.test("createFunction: a statement timeout or lock timeout answers 503 db_timeout with Retry-After and CORS headers", async () => {
  const lockTimeout = new postgres.PostgresError({
    message: "canceling statement due to lock timeout",
    code: "55P03",
  } as unknown as string);
  for (
    const error of [
      lockTimeout,
      new HttpError("presence_update_failed", { cause: lockTimeout }),
    ]
  ) {
    const res = await answerTo(error);
    assert.equal(res.status, 503);
    assert.equal(res.headers.get("retry-after"), "1");
    assert.equal(res.headers.get("access-control-allow-origin"), "*");
    assert.deepEqual(await res.json(), {
      message: "La base de datos no respondió a tiempo",
      code: "db_timeout",
      error: "lock not available (SQLSTATE 55P03)",
    });
  }
  // auth-sync's answers that say what was done keep their code.
  const kept = await answerTo(
    new HttpError("sync_failed", { cause: lockTimeout }),
  );
  assert.equal(kept.status, 500);
  assert.equal((await kept.json()).code, "sync_failed");
});

Deno.test("createFunction: a statement that finds the project's schema, table or function missing answers 500 migration_missing (the presence read has no other home for it)", async () => {
  const missing = new postgres.PostgresError({
    message: 'schema "presence" does not exist',
    code: "3F000",
  } as unknown as string);
  const res = await answerTo(missing);
  assert.equal(res.status, 500);
  const body = await res.json();
  assert.equal(body.code, "migration_missing");
  assert.match(body.error, /^undefined schema \(SQLSTATE 3F000\): apply/);
});

Deno.test("createFunction: a database failure no handler named is a 500 internal_error naming the condition and SQLSTATE, never the server's message", async () => {
  // The app's own relation: a relation of the project's is
  // migration_missing (db_function_test.ts asMigrationMissing).
  const undefinedTable = new postgres.PostgresError({
    message: 'relation "public.perfiles" does not exist',
    code: "42P01",
  } as unknown as string);
  const refused = Object.assign(
    new Error("connect ECONNREFUSED 127.0.0.1:6543"),
    { code: "ECONNREFUSED" },
  );
  const cases: [unknown, string | undefined][] = [
    [undefinedTable, "undefined table (SQLSTATE 42P01)"],
    [refused, "database unreachable (ECONNREFUSED)"],
    [new TypeError("not a database failure"), undefined],
  ];
  for (const [error, named] of cases) {
    const res = await answerTo(error);
    assert.equal(res.status, 500);
    assert.equal(res.headers.get("access-control-allow-origin"), "*");
    const body = await res.json();
    assert.match(body.request_id, /^[0-9a-f-]{36}$/);
    const { request_id: _, ...rest } = body;
    assert.deepEqual(rest, {
      message: "Error interno",
      code: "internal_error",
      ...(named === undefined ? {} : { error: named }),
    });
    const text = JSON.stringify(body);
    for (const secret of ["public.perfiles", "6543", "127.0.0.1"]) {
      assert.ok(!text.includes(secret), secret);
    }
  }
});

/** The JSON log lines `run` writes. */
async function logged(run: () => Promise<unknown>) {
  const lines: Record<string, unknown>[] = [];
  const saved = { log: console.log, warn: console.warn, error: console.error };
  console.log = console.warn = console.error = (text: string) =>
    lines.push(JSON.parse(text));
  try {
    await run();
  } finally {
    Object.assign(console, saved);
  }
  return lines;
}

const UUID =
  /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

Deno.test("createFunction: a client's x-request-id never becomes the request_id; a sane one is logged as client_request_id", async () => {
  const boom = createFunction("t", (n) => env[n], () => {
    throw new Error("unexpected");
  });
  let body: Record<string, unknown> = {};
  const lines = await logged(async () => {
    const res = await boom(
      new Request("http://x/", {
        method: "POST",
        headers: { "x-request-id": "victim-request-7" },
      }),
    );
    assert.equal(res.status, 500);
    body = await res.json();
  });
  assert.match(String(body.request_id), UUID);
  assert.equal(lines.length, 1, "one line per request");
  for (const line of lines) {
    assert.equal(line.request_id, body.request_id);
  }
  const handled = lines.find((l) => l.msg === "Request handled")!;
  assert.equal(handled.client_request_id, "victim-request-7");
});

Deno.test("createFunction: an x-request-id that is not a short plain token is not logged at all", async () => {
  for (
    const value of [
      "x".repeat(65),
      '{"level":"error","msg":"forged"}',
      "a b",
      "",
    ]
  ) {
    const lines = await logged(() =>
      ok(
        new Request("http://x/", {
          method: "POST",
          headers: { "x-request-id": value },
        }),
      )
    );
    assert.equal(lines.length, 1);
    assert.match(String(lines[0].request_id), UUID);
    assert.equal("client_request_id" in lines[0], false, value);
  }
});

Deno.test("createFunction: a refused call's log line says why (status, code, and the public reason)", async () => {
  const lines = await logged(async () => {
    const res = await answerTo(
      new HttpError("invalid_token", { extra: { error: "JWT expired" } }),
    );
    assert.equal(res.status, 401);
    await res.body?.cancel();
  });
  const handled = lines.find((l) => l.msg === "Request handled")!;
  assert.equal(handled.fn, "t");
  assert.equal(handled.status, 401);
  assert.equal(handled.code, "invalid_token");
  assert.equal(handled.reason, "JWT expired");
});

Deno.test("createFunction: a row the database refused (422) logs the database's own message, which the client is not told; other 4xx causes are not logged", async () => {
  const refused = new postgres.PostgresError({
    message: "correo no permitido por la app",
    code: "P0001",
  } as unknown as string);
  const answers = [
    new HttpError("row_refused", {
      extra: { error: "database error class P0 (SQLSTATE P0001)" },
      cause: refused,
    }),
    new HttpError("bad_json", {
      cause: new SyntaxError('Unexpected token in "ana@corp.test'),
    }),
  ];
  const seen: string[] = [];
  const lines = await logged(async () => {
    for (const answer of answers) {
      const res = await answerTo(answer);
      seen.push(await res.text());
    }
  });
  const handled = lines.filter((l) => l.msg === "Request handled");
  assert.equal(handled[0].status, 422);
  assert.equal(handled[0].cause, "correo no permitido por la app");
  assert.doesNotMatch(seen[0], /no permitido/);
  assert.equal(handled[1].status, 400);
  assert.equal("cause" in handled[1], false);
  assert.equal(lines.length, 2, "no error line for a 4xx");
});

Deno.test("createFunction: a request its client abandoned is logged once, at info, as client_closed, not as a failure", async () => {
  const client = new AbortController();
  const cancelled = createFunction("t", (n) => env[n], () => {
    client.abort();
    return Promise.reject(
      Object.assign(new Error("statement not started in time"), {
        code: "57014",
      }),
    );
  });
  const lines = await logged(() =>
    cancelled(
      new Request("http://x/", { method: "POST", signal: client.signal }),
    )
  );
  assert.deepEqual(lines.map((l) => [l.level, l.msg, l.code]), [[
    "info",
    "Request handled",
    "client_closed",
  ]]);
  // The same failure for a client still waiting is a 503 (retried), at warn.
  const failing = createFunction("t", (n) => env[n], () =>
    Promise.reject(
      Object.assign(new Error("statement not started in time"), {
        code: "57014",
      }),
    ));
  const kept = await logged(() =>
    failing(new Request("http://x/", { method: "POST" }))
  );
  assert.deepEqual(kept.map((l) => [l.level, l.status, l.code, l.cause]), [
    ["warn", 503, "db_timeout", "statement not started in time"],
  ]);
});

Deno.test("createFunction: one line per request, its level by the status (500 error, 503 warn, refusals info unless refusalsAt), with the cause and what the work noted", async () => {
  const answer = (thrown: unknown, options = {}) =>
    logged(() =>
      createFunction("t", (n) => env[n], () => {
        noteOnRequest({ actor_auth_user_id: "u-1" });
        return Promise.reject(thrown);
      }, options)(new Request("http://x/", { method: "POST" }))
    );
  const [failed] = await answer(new Error("boom at 127.0.0.1"));
  assert.deepEqual(
    [failed.level, failed.msg, failed.status, failed.code, failed.cause],
    ["error", "Request handled", 500, "internal_error", "boom at 127.0.0.1"],
  );
  assert.equal(failed.actor_auth_user_id, "u-1");
  const down = await answer(
    new HttpError("idp_unavailable", { cause: new Error("fetch failed") }),
  );
  assert.deepEqual(down.map((l) => [l.level, l.status, l.cause]), [
    ["warn", 503, "fetch failed"],
  ]);
  const kid = "k".repeat(3000);
  const refused = new HttpError("invalid_token", {
    extra: { error: `unrecognized JWT kid ${kid} for algorithm ES256` },
  });
  const [routine] = await answer(refused);
  assert.deepEqual([routine.level, routine.status], ["info", 401]);
  assert.equal(
    (routine.reason as string).length,
    200,
    "a reason the caller chose is cut",
  );
  const [watched] = await answer(refused, { refusalsAt: "warn" });
  assert.equal(watched.level, "warn");
  const [missing] = await answer(new HttpError("user_not_found"), {
    refusalsAt: "warn",
  });
  assert.deepEqual([missing.level, missing.status], ["warn", 404]);
  const [invalid] = await answer(new HttpError("validation_failed"), {
    refusalsAt: "warn",
  });
  assert.deepEqual([invalid.level, invalid.status], ["info", 400]);
});

Deno.test("createFunction: PRESENCE_LOG_LEVEL=warn drops the info lines (answered requests, routine refusals) and keeps the rest; another value is invalid_env", async () => {
  const quiet = (n: string) => n === "PRESENCE_LOG_LEVEL" ? " WARN " : env[n];
  const answering = (thrown?: unknown, options = {}) =>
    logged(() =>
      createFunction(
        "t",
        quiet,
        () =>
          thrown === undefined
            ? Promise.resolve(new Response("ok"))
            : Promise.reject(thrown),
        options,
      )(new Request("http://x/", { method: "POST" }))
    );
  assert.deepEqual(await answering(), []);
  assert.deepEqual(await answering(new HttpError("invalid_token")), []);
  const watched = await answering(new HttpError("admin_required"), {
    refusalsAt: "warn",
  });
  assert.deepEqual(watched.map((l) => [l.level, l.status]), [["warn", 403]]);
  const down = await answering(new HttpError("idp_unavailable"));
  assert.deepEqual(down.map((l) => [l.level, l.status]), [["warn", 503]]);
  const failed = await answering(new Error("boom"));
  assert.deepEqual(failed.map((l) => [l.level, l.status]), [["error", 500]]);
  // `error`: failures only, the 503s (retried) left out too.
  const errorsOnly = (thrown: unknown) =>
    logged(() =>
      createFunction(
        "t",
        (n) => n === "PRESENCE_LOG_LEVEL" ? "error" : env[n],
        () => Promise.reject(thrown),
      )(new Request("http://x/", { method: "POST" }))
    );
  assert.deepEqual(await errorsOnly(new HttpError("idp_unavailable")), []);
  assert.deepEqual(
    (await errorsOnly(new Error("boom"))).map((l) => l.level),
    ["error"],
  );
  const bad = await logged(async () => {
    const res = await createFunction(
      "t",
      (n) => n === "PRESENCE_LOG_LEVEL" ? "debug" : env[n],
      () => Promise.resolve(new Response("ok")),
    )(new Request("http://x/", { method: "POST" }));
    assert.equal(res.status, 500);
    assert.deepEqual(Object.keys((await res.json()).invalid), [
      "PRESENCE_LOG_LEVEL",
    ]);
  });
  assert.equal(bad[0].code, "invalid_env");
});
