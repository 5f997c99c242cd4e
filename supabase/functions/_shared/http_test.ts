import assert from "node:assert/strict";
import postgres from "postgres";
import { HttpError } from "./errors.ts";
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
  const res = await broken(new Request("http://x/", { method: "POST" }));
  assert.equal(res.status, 500);
  assert.equal((await res.json()).code, "missing_env");
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
  const failing = (error: unknown) =>
    createFunction("t", (n) => env[n], () => Promise.reject(error));
  for (
    const error of [
      lockTimeout,
      new HttpError("presence_update_failed", { cause: lockTimeout }),
    ]
  ) {
    const res = await failing(error)(
      new Request("http://x/", { method: "POST" }),
    );
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
  const kept = await failing(
    new HttpError("sync_failed", { cause: lockTimeout }),
  )(new Request("http://x/", { method: "POST" }));
  assert.equal(kept.status, 500);
  assert.equal((await kept.json()).code, "sync_failed");
});
