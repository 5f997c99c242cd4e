import assert from "node:assert/strict";
import postgres from "postgres";
import {
  abandoned,
  asDbBusy,
  bounded,
  connectionOptions,
  DB_RETRY_AFTER_S,
  isTransient,
  poolOf,
  Pools,
  publicDbError,
  remember,
} from "./db.ts";

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

Deno.test("connectionOptions: an IPv6 literal in brackets is the host, and user and password are decoded", () => {
  const o = connectionOptions(
    "postgresql://postgres.abcd:p%40ss%3Aword@[2001:db8::5]:6543/postgres",
  );
  assert.equal(o.host, "2001:db8::5");
  assert.equal(o.port, 6543);
  assert.equal(o.username, "postgres.abcd");
  assert.equal(o.password, "p@ss:word");
  assert.equal(o.database, "postgres");
  assert.equal(
    connectionOptions("postgres://u:p@[::1]/db").host,
    "::1",
  );
  assert.equal(connectionOptions("postgres://u:p@[::1]/db").port, 5432);
});

Deno.test("connectionOptions: sslmode is honoured as libpq reads it", () => {
  const ssl = (query: string, host = "db.example.supabase.co") =>
    connectionOptions(`postgresql://u:p@${host}:5432/postgres${query}`).ssl;
  assert.equal(ssl("?sslmode=disable"), false);
  assert.equal(ssl("?sslmode=allow"), "prefer");
  assert.equal(ssl("?sslmode=prefer"), "prefer");
  assert.equal(ssl("?sslmode=require"), "require");
  assert.equal(ssl("?sslmode=verify-ca"), "verify-full");
  assert.equal(ssl("?sslmode=verify-full"), "verify-full");
  assert.equal(ssl("?sslrootcert=system"), "verify-full");
  // No sslmode: libpq's default, prefer; on loopback TLS protects nothing.
  assert.equal(ssl(""), "prefer");
  assert.equal(ssl("", "127.0.0.1"), false);
  assert.equal(ssl("", "[::1]"), false);
  assert.equal(ssl("?sslmode=require", "127.0.0.1"), "require");
});

Deno.test("connectionOptions: application_name and options go to the server; connect_timeout and pgbouncer are read as libpq and Prisma mean them", () => {
  const o = connectionOptions(
    "postgresql://u:p@h/db?sslmode=require&application_name=mine&options=-c%20search_path%3Dpublic&pgbouncer=true&connect_timeout=10",
  );
  assert.deepEqual(o.connection, {
    application_name: "mine",
    options: "-c search_path=public",
  });
  assert.equal(o.connect_timeout, 10);
  const plain = connectionOptions("postgresql://u:p@h/db?pgbouncer=false");
  assert.deepEqual(plain.connection, {
    application_name: "presence-auth-functions",
  });
  assert.equal(plain.connect_timeout, 5);
  // libpq's floor: 1 s is read as 2.
  assert.equal(
    connectionOptions("postgresql://u:p@h/db?connect_timeout=1")
      .connect_timeout,
    2,
  );
});

Deno.test("connectionOptions: a parameter it does not read is refused by name, with what to do instead, never its value", () => {
  const refused = (query: string) => {
    try {
      connectionOptions(`postgresql://u:p@h/db?${query}`);
    } catch (e) {
      assert.ok(e instanceof TypeError);
      return e.message;
    }
    assert.fail(`${query} was accepted`);
  };
  assert.match(
    refused("pgbouncer=true&connection_limit=1"),
    /parameter "connection_limit" is not read \(read: sslmode, .*pgbouncer\); the pool's size is DB_POOL_MAX/,
  );
  assert.match(
    refused("search_path=app"),
    /"search_path" is not read .*options=-c name=value/,
  );
  const password = refused("password=s3cret");
  assert.match(password, /"password" is not read/);
  assert.ok(!password.includes("s3cret"));
  assert.match(refused("connect_timeout=0"), /connect_timeout must be/);
  assert.match(refused("connect_timeout=5s"), /connect_timeout must be/);
  assert.match(refused("pgbouncer=yes"), /pgbouncer must be true or false/);
  assert.match(
    refused("sslmode=verify-full&sslrootcert=/certs/prod-ca-2021.crt"),
    /sslrootcert can only be system/,
  );
});

Deno.test("connectionOptions: a bad string is refused without echoing it", () => {
  for (
    const url of [
      "postgresql://u:s3cret@h/db?sslmode=on",
      "mysql://u:s3cret@h/db",
      "not a url s3cret",
      // A password with a ? or a % typed as is: the rest of it would be a
      // parameter's name, or a bad escape.
      "postgresql://postgres.ref:?s3cret&3@pooler.example:6543/postgres",
      "postgresql://postgres.ref:12?s3cret@pooler.example:6543/postgres",
      "postgresql://u:pw@h/db?s3cret",
      "postgresql://u:s3cret%zz@h/db",
    ]
  ) {
    assert.throws(() => connectionOptions(url), (e: unknown) => {
      assert.ok(e instanceof TypeError);
      assert.ok(!e.message.includes("s3cret"), e.message);
      return true;
    });
  }
  assert.throws(
    () => connectionOptions("postgresql://u:?s3cret@h/db"),
    /a parameter it does not know \(not named: it may be part of the password; percent-encode \?/,
  );
  assert.throws(
    () => connectionOptions("postgresql://u:s3cret%zz@h/db"),
    /the password has a % that is not followed by two hex digits: percent-encode it as %25/,
  );
});

Deno.test("asDbBusy: a statement timeout or lock timeout, even wrapped, is 503 db_timeout with Retry-After", () => {
  const lock = new postgres.PostgresError({
    message: "canceling statement due to lock timeout",
    code: "55P03",
  } as unknown as string);
  const direct = asDbBusy(lock);
  assert.ok(direct);
  assert.equal(direct.status, 503);
  assert.equal(direct.code, "db_timeout");
  assert.equal(direct.headers["Retry-After"], String(DB_RETRY_AFTER_S));
  assert.equal(direct.extra.error, "lock not available (SQLSTATE 55P03)");
  const wrapped = new Error("presence update failed", { cause: lock });
  assert.equal(asDbBusy(wrapped)?.code, "db_timeout");
  // postgres.js's own error for a query cancelled before it was sent.
  const dropped = Object.assign(
    new Error("canceling statement due to user request"),
    { code: "57014" },
  );
  assert.equal(
    asDbBusy(dropped)?.extra.error,
    "statement timeout (SQLSTATE 57014)",
  );
  assert.equal(
    asDbBusy(
      new postgres.PostgresError({ code: "23505" } as unknown as string),
    ),
    null,
  );
  assert.equal(asDbBusy(new Error("x")), null);
});

Deno.test("asDbBusy: a serialization failure or a deadlock, even wrapped, is 503 db_conflict with Retry-After (appwrite M2)", () => {
  for (
    const [code, condition] of [
      ["40001", "serialization failure"],
      ["40P01", "deadlock detected"],
    ]
  ) {
    const conflict = new postgres.PostgresError({
      message: condition,
      code,
    } as unknown as string);
    const busy = asDbBusy(
      new Error("presence update failed", { cause: conflict }),
    );
    assert.ok(busy, code);
    assert.equal(busy.status, 503);
    assert.equal(busy.code, "db_conflict");
    assert.equal(busy.headers["Retry-After"], String(DB_RETRY_AFTER_S));
    assert.equal(busy.extra.error, `${condition} (SQLSTATE ${code})`);
  }
});

Deno.test("isTransient: timeouts, lock waits, serialization failures, deadlocks and lost connections may pass later; constraint, value and trigger errors never", () => {
  const pg = (code: string) =>
    new postgres.PostgresError({ message: code, code } as unknown as string);
  for (
    const code of [
      "57014",
      "55P03",
      "40001",
      "40P01",
      "53300",
      "57P01",
      "08006",
    ]
  ) assert.equal(isTransient(pg(code)), true, code);
  for (const code of ["23505", "23514", "22001", "P0001", "42703"]) {
    assert.equal(isTransient(pg(code)), false, code);
  }
  // postgres.js's own errors carry the code without being PostgresErrors.
  for (const code of ["CONNECTION_CLOSED", "ECONNRESET", "57014"]) {
    assert.equal(
      isTransient(Object.assign(new Error(code), { code })),
      true,
      code,
    );
  }
  assert.equal(isTransient(new Error("x")), false);
  assert.equal(isTransient(null), false);
});

Deno.test("remember: every request's view of a Pools' pool shares the pool's memory; another Pools, another URL or a bare pool share none", async () => {
  const env = (dbUrl: string) => ({
    dbUrl,
    dbPoolMax: 1,
    dbStatementTimeoutMs: 1000,
  });
  const key = Symbol("test");
  const url = "postgresql://u:p@127.0.0.1:1/db";
  // Never connects: postgres.js opens connections on the first query.
  const [a, b] = [new Pools(), new Pools()];
  const bare = postgres(url, { max: 1 });
  try {
    const request = new AbortController();
    const seen = remember(a.database(env(url)), key, () => ({ n: 1 }));
    assert.equal(
      remember(a.database(env(url), request.signal), key, () => ({ n: 2 })),
      seen,
    );
    assert.notEqual(
      remember(b.database(env(url)), key, () => ({ n: 3 })),
      seen,
    );
    assert.notEqual(
      remember(a.database(env(`${url}2`)), key, () => ({ n: 4 })),
      seen,
    );
    const once = remember(bare, key, () => ({ n: 5 }));
    assert.notEqual(remember(bare, key, () => ({ n: 5 })), once);
    await a.close();
    assert.notEqual(
      remember(a.database(env(url)), key, () => ({ n: 6 })),
      seen,
      "a closed set's pools open anew, with a fresh memory",
    );
  } finally {
    await Promise.all([a.close(), b.close(), bare.end()]);
  }
});

Deno.test("poolOf: every request's bounded view of a pool leads back to that one pool", async () => {
  // Never connects: postgres.js opens connections on the first query.
  const pool = postgres("postgresql://u:p@127.0.0.1:1/db", { max: 1 });
  try {
    const a = bounded(pool, { timeoutMs: 1000 });
    const b = bounded(pool, {
      timeoutMs: 1000,
      signal: new AbortController().signal,
    });
    assert.notEqual(a, b);
    assert.equal(poolOf(a), pool);
    assert.equal(poolOf(b), pool);
    assert.equal(poolOf(pool), pool);
  } finally {
    await pool.end();
  }
});

Deno.test("abandoned: true once the request behind a bounded view aborts, never for the pool or a view without a signal", async () => {
  const pool = postgres("postgresql://u:p@127.0.0.1:1/db", { max: 1 });
  try {
    const request = new AbortController();
    const view = bounded(pool, { timeoutMs: 1000, signal: request.signal });
    const plain = bounded(pool, { timeoutMs: 1000 });
    assert.equal(abandoned(view), false);
    request.abort();
    assert.equal(abandoned(view), true);
    assert.equal(abandoned(plain), false);
    assert.equal(abandoned(pool), false);
  } finally {
    await pool.end();
  }
});

Deno.test("bounded: reserve() is refused, never a connection handed out past the gate", async () => {
  // Never connects: a refused reserve() asks postgres.js for nothing.
  const pool = postgres("postgresql://u:p@127.0.0.1:1/db", { max: 1 });
  try {
    const view = bounded(pool, { timeoutMs: 1000 });
    await assert.rejects(view.reserve(), (error: Error & { code?: string }) => {
      assert.equal(error.code, "RESERVE_REFUSED");
      assert.match(error.message, /use begin\(\)/);
      return true;
    });
  } finally {
    await pool.end();
  }
});
