import assert from "node:assert/strict";
import postgres from "postgres";
import { publicDbError } from "./db.ts";

Deno.test("publicDbError: a server error is named by its condition and SQLSTATE, never its message", () => {
  const error = new postgres.PostgresError({
    message:
      'password authentication failed for user "postgres" on host "db.internal"',
    code: "28P01",
  } as unknown as string);
  const text = publicDbError(error);
  assert.equal(text, "database error class 28 (SQLSTATE 28P01)");
  const timeout = new postgres.PostgresError({
    message: "canceling statement due to statement timeout",
    code: "57014",
  } as unknown as string);
  assert.equal(publicDbError(timeout), "statement timeout (SQLSTATE 57014)");
});

Deno.test("publicDbError: a refused connection names no host or port", async () => {
  // A port nobody listens on: bind one, note it, close it.
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  const sql = postgres(`postgresql://someone:secret@127.0.0.1:${port}/appdb`, {
    max: 1,
    connect_timeout: 2,
  });
  try {
    const error = await sql`select 1`.then(() => null, (e) => e);
    assert.ok(error instanceof Error);
    assert.match(String(error.message), new RegExp(String(port)));
    const text = publicDbError(error);
    assert.equal(text, "database unreachable (ECONNREFUSED)");
    for (const secret of [String(port), "127.0.0.1", "someone", "appdb"]) {
      assert.ok(!text.includes(secret), secret);
    }
  } finally {
    await sql.end();
  }
});

Deno.test("publicDbError: anything else is a plain database error", () => {
  assert.equal(
    publicDbError(new Error("db at 10.0.0.5:6543")),
    "database error",
  );
});
