/**
 * The bounds every statement of a request runs under
 * (`supabase/functions/_shared/db.ts`, docs/reliability.md "Database
 * timeouts"), on a real database: PGlite, or PostgreSQL with
 * TEST_DATABASE_URL. Cancellation, lock waits and timers are PostgreSQL
 * only: PGlite is one single-user session that takes no cancel request and
 * runs no timer, and a lock held in one of its connections stops all the
 * others.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import net from "node:net";
import postgres from "postgres";
import { startCountingProxy } from "../../bench/pgproxy.ts";
import { throwawayCluster } from "../../local/testing/cluster.ts";
import { createTestDatabase } from "../../local/testing/database.ts";
import {
  asDbBusy,
  bounded,
  pgArray,
  Pools,
} from "../../supabase/functions/_shared/db.ts";
import { ONE_FLIGHT } from "../../supabase/functions/_shared/db_function.ts";
import { Gate } from "../../supabase/functions/_shared/gate.ts";
import { poolWithSockets } from "../support/postgres.ts";

Deno.test({
  name:
    "bounded: each transaction runs with statement_timeout and lock_timeout set locally, never for the session",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const db = await createTestDatabase();
    const raw = postgres(db.url, { max: 1, prepare: false });
    try {
      const sql = bounded(raw, { timeoutMs: 2500 });
      const inside = await sql.begin(async (tx) => {
        const [row] = await tx`
          select current_setting('statement_timeout') as statement,
                 current_setting('lock_timeout') as lock`;
        return { ...row };
      });
      assert.deepEqual(inside, { statement: "2500ms", lock: "1s" });
      const [after] = await raw`
        select current_setting('statement_timeout') as statement,
               current_setting('lock_timeout') as lock`;
      assert.deepEqual({ ...after }, { statement: "0", lock: "0" });
    } finally {
      await raw.end();
      await db.close();
    }
  },
});

// A test on a fresh database (PGlite, or PostgreSQL with TEST_DATABASE_URL),
// with a pool of two connections to it.
const withDb = (
  name: string,
  fn: (url: string, raw: postgres.Sql) => Promise<void>,
) =>
  Deno.test({
    name,
    sanitizeResources: false,
    sanitizeOps: false,
    async fn() {
      const db = await createTestDatabase();
      const raw = postgres(db.url, {
        max: 2,
        prepare: false,
        onnotice: () => {},
      });
      try {
        await fn(db.url, raw);
      } finally {
        await raw.end();
        await db.close();
      }
    },
  });

// `withDb` with a table `t (n int)` and the pool of `Pools.database` with
// one connection: `view(ms, signal)` is a request's view of it, bounded by
// `ms`.
const withOneConnection = (
  name: string,
  run: (
    view: (ms: number, signal?: AbortSignal) => postgres.Sql,
    raw: postgres.Sql,
  ) => Promise<void>,
) =>
  withDb(name, async (url, raw) => {
    const pools = new Pools();
    try {
      await raw`create table t (n int)`;
      await run(
        (ms, signal) =>
          pools.database(
            { dbUrl: url, dbPoolMax: 1, dbStatementTimeoutMs: ms },
            signal,
          ),
        raw,
      );
    } finally {
      await pools.close();
    }
  });

withDb(
  "Pools.database: no statement is written behind another on a connection (no pipelining, which transaction poolers lose): every send waits for the server's answer",
  async (url) => {
    // Counts, per connection, the client's sends made after the server had
    // answered: a statement pipelined behind another is sent before.
    const proxy = startCountingProxy(url);
    const pools = new Pools();
    try {
      const sql = pools.database({
        dbUrl: proxy.url,
        dbPoolMax: 2,
        dbStatementTimeoutMs: 10_000,
      });
      await Promise.all([sql`select 1`, sql`select 2`]); // both connections
      proxy.reset();
      // As the ping sends its call (one flight), and statements with
      // parameters, twenty at once on two connections.
      const rows = await Promise.all(
        Array.from(
          { length: 20 },
          (_, i) =>
            i % 2
              ? sql.unsafe(`select ${i} as n`, [], ONE_FLIGHT)
              : sql`select ${i}::int as n`,
        ),
      );
      assert.deepEqual(rows.map(([{ n }]) => n), [...Array(20).keys()]);
      const counts = proxy.counts();
      assert.equal(counts.statements, 20);
      // One send for each one-flight statement, two (Parse/Describe/Flush,
      // then Bind/Execute/Sync) for each with parameters.
      assert.equal(counts.roundTrips, 10 + 2 * 10);
    } finally {
      await pools.close();
      await proxy.close();
    }
  },
);

withOneConnection(
  "Pools.database: a statement waiting for the pool's one connection past its time answers 57014 and never runs; the next one does",
  async (view, raw) => {
    // Started (awaited) now: a statement runs when first awaited.
    const slow = view(5_000)`select pg_sleep(0.5)`.then((rows) => rows);
    const early = await view(100)`insert into t values (${1})`
      .then(() => null, (e) => e);
    assert.equal(early?.code, "57014");
    assert.match(early.message, /no connection of the pool \(DB_POOL_MAX\)/);
    assert.equal(asDbBusy(early)?.status, 503);
    await slow;
    await view(5_000)`insert into t values (${2})`;
    const rows = await raw`select n from t order by n`;
    assert.deepEqual(rows.map((r) => r.n), [2]);
  },
);

withOneConnection(
  "Pools.database: a statement of an abandoned request that still waits for a connection never runs",
  async (view, raw) => {
    const abort = new AbortController();
    const slow = view(5_000)`select pg_sleep(0.3)`.then((rows) => rows);
    const waiting = view(5_000, abort.signal)`insert into t values (${1})`
      .then(() => null, (e) => e);
    abort.abort();
    assert.equal((await waiting)?.code, "57014");
    await slow;
    const gone = view(5_000, abort.signal)`insert into t values (${2})`
      .then(() => null, (e) => e);
    assert.equal((await gone)?.code, "57014");
    assert.deepEqual([...await raw`select n from t`], []);
  },
);

withOneConnection(
  "Pools.database: a transaction waits for the pool's connection within its time (57014 after it), and holds it to its end",
  async (view, raw) => {
    let inside = () => {};
    const entered = new Promise<void>((r) => inside = r);
    const long = view(5_000).begin(async (tx) => {
      await tx`insert into t values (${1})`;
      inside();
      await new Promise((r) => setTimeout(r, 300));
      await tx`insert into t values (${2})`;
    });
    await entered;
    const late = await view(100).begin((tx) => tx`insert into t values (${3})`)
      .then(() => null, (e) => e);
    assert.equal(late?.code, "57014");
    assert.equal(asDbBusy(late)?.status, 503);
    // Queued behind the transaction, not pipelined into it.
    const after = view(5_000)`insert into t values (${4})`.finally(() => {});
    await long;
    await after;
    const rows = await raw`select n from t order by n`;
    assert.deepEqual(rows.map((r) => r.n), [1, 2, 4]);
  },
);

withDb(
  "bounded with a gate: a statement postgres.js rejects and answers again in the same read (a bare BEGIN: UNSAFE_TRANSACTION, then its ReadyForQuery) gives its place back",
  async (_url, raw) => {
    // postgres.js refuses a BEGIN outside sql.begin in a pool of more than
    // one connection, as `raw` is.
    const sql = bounded(raw, { timeoutMs: 2_000, gate: new Gate(1) });
    await sql`select 1`;
    const refused = await sql`begin`.then(() => "answered", (e) => e.code);
    assert.equal(refused, "UNSAFE_TRANSACTION");
    const next = await sql<{ n: number }[]>`select 2 as n`
      .then(([{ n }]) => n, (e) => `${e.code}: ${e.message}`);
    assert.equal(next, 2);
  },
);

withOneConnection(
  "pgArray: any strings and numbers reach the database as the array they were, through the functions' pool (which fetches no array types)",
  async (view) => {
    const sql = view(3_000);
    const texts = ["a", 'b"c', "d\\e", "NULL", "", " x ", "{,}", "ñ'"];
    const [row] = await sql<{ texts: string[]; ids: string[]; none: [] }[]>`
      select to_json(${pgArray(texts)}::text[]) as texts,
             to_json(${pgArray([1, 20n, 3])}::bigint[]::text[]) as ids,
             to_json(${pgArray([])}::uuid[]) as none`;
    assert.deepEqual({ ...row }, {
      texts,
      ids: ["1", "20", "3"],
      none: [],
    });
  },
);

withDb(
  "Pools.database: a pooler that refuses a new connection at its first statement (as Supavisor does on a checkout timeout) fails that statement only: nothing is left unhandled, and the next statement is answered",
  async (url) => {
    // Between the pool and the database, answers the first statement
    // (Parse or Query) with an ErrorResponse, and its Sync (or the Query)
    // with a ReadyForQuery, as the server would; the rest goes through.
    const { hostname, port } = new URL(url);
    let refused: "no" | "until Sync" | "yes" = "no";
    const error = _errorResponse("53300", "too many connections");
    const ready = new Uint8Array([0x5a, 0, 0, 0, 5, 0x49]); // Z, idle
    const endsInSync = (buf: Buffer) =>
      buf.subarray(-5).equals(Buffer.from([0x53, 0, 0, 0, 4]));
    const server = net.createServer((client) => {
      const upstream = net.connect(Number(port), hostname);
      upstream.pipe(client);
      client.on("error", () => {});
      upstream.on("error", () => {});
      client.on("data", (buf: Buffer) => {
        if (refused === "no" && (buf[0] === 0x50 || buf[0] === 0x51)) {
          client.write(error);
          refused = "until Sync";
        } else if (refused !== "until Sync") return void upstream.write(buf);
        if (buf[0] === 0x51 || endsInSync(buf)) {
          client.write(ready);
          refused = "yes";
        }
      });
    });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const via = new URL(url);
    via.port = String((server.address() as net.AddressInfo).port);
    const uncaught = holdUncaught();
    const pools = new Pools();
    try {
      const sql = pools.database({
        dbUrl: via.toString(),
        dbPoolMax: 1,
        dbStatementTimeoutMs: 3_000,
      });
      const first = await sql`select ${1}::int as n`.then(
        () => "answered",
        (e) => e.code,
      );
      const [{ n }] = await sql<{ n: number }[]>`select ${2}::int as n`;
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(uncaught.held, undefined, String(uncaught.held));
      assert.deepEqual([first, n], ["53300", 2]);
    } finally {
      uncaught.stop();
      await pools.close();
      server.close();
    }
  },
);

// A backend's ErrorResponse: severity ERROR, `code`, `message`.
function _errorResponse(code: string, message: string): Uint8Array {
  const fields = new TextEncoder().encode(
    `SERROR\0VERROR\0C${code}\0M${message}\0\0`,
  );
  const out = new Uint8Array(5 + fields.length);
  out[0] = 0x45; // E
  new DataView(out.buffer).setUint32(1, 4 + fields.length);
  out.set(fields, 5);
  return out;
}

if (Deno.env.get("TEST_DATABASE_URL")) {
  // PGlite is one single-user session: it neither takes cancel requests nor
  // runs a timer, and a lock held in one connection stops all the others.
  withDb(
    "bounded: a statement still running after timeoutMs is cancelled on the server (57014) and maps to db_timeout",
    async (_url, raw) => {
      const sql = bounded(raw, { timeoutMs: 300 });
      // pg_sleep(30) returns normally unless the server cancels it.
      const error = await sql`select pg_sleep(30)`.then(() => null, (e) => e);
      assert.ok(error instanceof postgres.PostgresError, String(error));
      assert.equal(error.code, "57014");
      assert.equal(asDbBusy(error)?.status, 503);
      // The server words it as a user's cancel; the log says whose.
      assert.equal(
        error.message,
        "canceling statement due to user request (cancelled by the function at DB_STATEMENT_TIMEOUT_MS, 300 ms)",
      );
      const [{ sleeping }] = await raw`
        select count(*)::int as sleeping from pg_stat_activity
        where query like 'select pg_sleep(30)%' and state = 'active'`;
      assert.equal(sleeping, 0);
    },
  );

  // Why the cancel request cannot be sent, and how the test brings it about
  // once the statement runs.
  const unsendable = {
    "the pool ended meanwhile: its sockets are refused": (
      pools: Pools,
    ) => pools.close(),
    "its connection is refused: the database unreachable when the statement runs out of time":
      (_pools: Pools, proxy: { stopListening(): void }) => {
        // New connections refused; the running one is kept.
        proxy.stopListening();
        return Promise.resolve();
      },
  };
  for (const [why, cut] of Object.entries(unsendable)) {
    withDb(
      `bounded: a cancel request that cannot be sent (${why}) leaves nothing unhandled, and the statement is answered after the grace`,
      async (url, raw) => {
        const uncaught = holdUncaught();
        const proxy = forwardingProxy(url, () => true);
        const pools = new Pools();
        try {
          const sql = pools.database(
            { dbUrl: proxy.url, dbPoolMax: 1, dbStatementTimeoutMs: 300 },
            new AbortController().signal,
          );
          // Connected first, so that the statement is running well within
          // its 300 ms on a loaded machine too.
          await sql`select 1`;
          const pending = sql`select pg_sleep(2)`.then(() => null, (e) => e);
          for (let i = 0; i < 100; i++) {
            const [{ n }] = await raw`
              select count(*)::int as n from pg_stat_activity
              where query like 'select pg_sleep(2)%' and state = 'active'`;
            if (n > 0) break;
            await new Promise((r) => setTimeout(r, 10));
          }
          // The cancel at 300 ms cannot go from here on.
          const cutting = cut(pools, proxy);
          const error = await pending;
          assert.equal(error?.code, "57014");
          assert.match(error.message, /not answered after its cancel/);
          await cutting;
          await new Promise((r) => setTimeout(r, 100));
          assert.equal(uncaught.held, undefined, String(uncaught.held));
        } finally {
          uncaught.stop();
          await pools.close();
          proxy.close();
        }
      },
    );
  }

  withDb(
    "bounded: an aborted request signal cancels its running statement",
    async (_url, raw) => {
      const abort = new AbortController();
      const sql = bounded(raw, { timeoutMs: 600_000, signal: abort.signal });
      const pending = sql`select pg_sleep(30)`.then(() => null, (e) => e);
      // Aborted once the statement is running on the server.
      for (;;) {
        const [{ n }] = await raw`
          select count(*)::int as n from pg_stat_activity
          where query like 'select pg_sleep(30)%' and state = 'active'`;
        if (n > 0) break;
      }
      abort.abort();
      const error = await pending;
      assert.ok(error instanceof postgres.PostgresError, String(error));
      assert.equal(error.code, "57014");
    },
  );

  withDb(
    "bounded: a transaction's statement waiting for a row lock fails with lock_not_available (55P03)",
    async (_url, raw) => {
      await raw`create table t (id int primary key, v int)`;
      await raw`insert into t values (1, 0)`;
      const holder = await raw.reserve();
      try {
        await holder`begin`;
        await holder`select 1 from t where id = 1 for update`;
        const sql = bounded(raw, { timeoutMs: 600_000 });
        const error = await sql.begin((tx) =>
          tx`update t set v = v + 1 where id = 1`
        ).then(() => null, (e) => e);
        assert.ok(error instanceof postgres.PostgresError, String(error));
        assert.equal(error.code, "55P03");
        assert.equal(asDbBusy(error)?.code, "db_timeout");
      } finally {
        await holder`rollback`;
        holder.release();
      }
    },
  );

  // A socket's error ends the connection's statements once: nothing more is
  // to come from postgres.js for them, whatever the error's code.
  for (const code of ["ECONNRESET", "EHOSTUNREACH"]) {
    withDb(
      `bounded with a gate: a statement whose connection fails with a socket error (${code}) gives its place back, and the next statement runs`,
      async (url) => {
        const { sql: one, sockets } = poolWithSockets(url);
        try {
          const sql = bounded(one, { timeoutMs: 2_000, gate: new Gate(1) });
          await sql`select 1`;
          const running = sql`select pg_sleep(1)`.then(() => "answered");
          await new Promise((r) => setTimeout(r, 200));
          // As a read that fails on a live link.
          sockets.at(-1)!.destroy(
            Object.assign(new Error(`read ${code}`), { code, syscall: "read" }),
          );
          assert.equal(await running.catch((e) => e.code), code);
          const next = await sql<{ n: number }[]>`select 2 as n`
            .then(([{ n }]) => n, (e) => `${e.code}: ${e.message}`);
          assert.equal(next, 2);
        } finally {
          await one.end({ timeout: 0 });
        }
      },
    );
  }

  for (const work of ["passes the error on", "catches the error"]) {
    withDb(
      `Pools.database: a session the server ends inside a transaction whose work ${work} fails it, throws nothing where nobody catches it, and leaves no connection unable to send: every later statement is answered`,
      async (url, raw) => {
        // postgres.js writes its ROLLBACK on the lost connection unless the
        // pool holds it back (porsager/postgres#1208).
        const uncaught = holdUncaught();
        const pools = new Pools();
        try {
          const sql = pools.database({
            dbUrl: url,
            dbPoolMax: 2,
            dbStatementTimeoutMs: 3_000,
          });
          let pid: number | undefined;
          const failed = sql.begin(async (tx) => {
            [{ pid }] = await tx<{ pid: number }[]>`
            select pg_backend_pid() as pid`;
            const sleep = tx`select pg_sleep(2)`;
            // As auth-sync's audit write does: logged, and the work goes on.
            if (work === "catches the error") await sleep.catch(() => {});
            else await sleep;
          }).then(() => "committed", (e) => e.code);
          while (pid === undefined) await new Promise((r) => setTimeout(r, 20));
          await raw`select pg_terminate_backend(${pid})`;
          assert.equal(await failed, "CONNECTION_CLOSED");
          await new Promise((r) => setTimeout(r, 300));
          const answers: unknown[] = [];
          for (let i = 0; i < 4; i++) {
            // Two at once, so that both connections are used.
            answers.push(
              ...await Promise.all(
                [1, 2].map((n) =>
                  sql<{ n: number }[]>`select ${n}::int as n`
                    .then(([row]) => row.n, (e) => e.code)
                ),
              ),
            );
          }
          assert.equal(uncaught.held, undefined, String(uncaught.held));
          // The first two may meet the ended session's own error (57P01),
          // which postgres.js keeps for the next statement on that connection.
          assert.deepEqual(answers.slice(2), [1, 2, 1, 2, 1, 2]);
        } finally {
          uncaught.stop();
          await pools.close();
        }
      },
    );
  }

  withDb(
    "statement_timeout: set as a function's attribute it does not bound the statement that calls it; SET LOCAL does",
    async (_url, raw) => {
      await raw`
        create function slow() returns int language sql
        set statement_timeout = '100ms'
        as 'select 1 from pg_sleep(0.6)'`;
      // Runs to its end: the attribute is in force, but the statement's
      // timer was armed (or not) when the statement started.
      const [{ slow }] = await raw`select slow()`;
      assert.equal(slow, 1);
      const error = await raw.begin(async (tx) => {
        await tx`set local statement_timeout = '100ms'`;
        await tx`select pg_sleep(0.6)`;
      }).then(() => null, (e) => e);
      assert.ok(error instanceof postgres.PostgresError, String(error));
      assert.equal(error.code, "57014");
    },
  );
}

// Holds what would end the test process instead (an error thrown where
// nobody catches it, a rejection nobody handles), for the test to assert
// on, until `stop()`.
function holdUncaught(): { readonly held: unknown; stop(): void } {
  let held: unknown;
  const onError = (e: ErrorEvent) => {
    held ??= e.error;
    e.preventDefault();
  };
  const onRejection = (e: PromiseRejectionEvent) => {
    held ??= e.reason;
    e.preventDefault();
  };
  globalThis.addEventListener("error", onError);
  globalThis.addEventListener("unhandledrejection", onRejection);
  return {
    get held() {
      return held;
    },
    stop() {
      globalThis.removeEventListener("error", onError);
      globalThis.removeEventListener("unhandledrejection", onRejection);
    },
  };
}

// A test proxy's listener and every connection it opened.
function closeProxy(listener: Deno.Listener, links: Deno.Conn[]): void {
  for (const link of [listener, ...links]) {
    try {
      link.close();
    } catch {
      // already closed
    }
  }
}

// A loopback proxy in front of `url`'s server: each connection it accepts
// is forwarded once `admit` says so, or left to `admit` (closed, held).
// `stopListening()` refuses new connections and keeps the open ones.
function forwardingProxy(
  url: string,
  admit: (client: Deno.Conn) => Promise<boolean> | boolean,
): { url: string; stopListening(): void; close(): void } {
  const target = new URL(url);
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const links: Deno.Conn[] = [];
  (async () => {
    for await (const client of listener) {
      if (!await admit(client)) continue;
      const server = await Deno.connect({
        hostname: target.hostname,
        port: Number(target.port),
      });
      links.push(client, server);
      client.readable.pipeTo(server.writable).catch(() => {});
      server.readable.pipeTo(client.writable).catch(() => {});
    }
  })().catch(() => {});
  const proxied = new URL(url);
  proxied.port = String((listener.addr as Deno.NetAddr).port);
  return {
    url: proxied.href,
    stopListening: () => closeProxy(listener, []),
    close: () => closeProxy(listener, links),
  };
}

Deno.test({
  name:
    "bounded: a statement out of time while its connection is still opening answers 57014, and the pool keeps serving",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const db = await createTestDatabase();
    // A proxy that takes 400 ms to open each connection, as a far or busy
    // pooler can.
    const proxy = forwardingProxy(
      db.url,
      () => new Promise((r) => setTimeout(() => r(true), 400)),
    );
    const raw = postgres(proxy.url, { max: 1, prepare: false });
    try {
      const sql = bounded(raw, { timeoutMs: 100 });
      const early = await sql`select 1 as one`.then(() => null, (e) => e);
      assert.equal(early?.code, "57014");
      // postgres.js alone would leave that connection wedged, and every
      // later query of the pool would wait for ever.
      const later = bounded(raw, { timeoutMs: 5000 });
      const [row] = await later`select 2 as two`;
      assert.equal(row.two, 2);
    } finally {
      await raw.end({ timeout: 1 });
      proxy.close();
      await db.close();
    }
  },
});

Deno.test({
  name:
    "bounded: a statement whose cancel nobody acts on (a pooler holding it for a server connection, a link dead without a reset) is answered 57014 after the grace, and the pool serves again",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const db = await createTestDatabase();
    const target = new URL(db.url);
    // A proxy that, once `dead`, forwards nothing either way and swallows
    // cancel requests, as a link gone silent or a pooler that queues them.
    let dead = false;
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const proxied = new URL(db.url);
    proxied.port = String((listener.addr as Deno.NetAddr).port);
    const links: Deno.Conn[] = [];
    const pipe = async (from: Deno.Conn, to: Deno.Conn) => {
      const buf = new Uint8Array(64 * 1024);
      try {
        for (;;) {
          const n = await from.read(buf);
          if (n === null) break;
          if (!dead) await to.write(buf.subarray(0, n));
        }
      } catch {
        // A side closed.
      }
    };
    (async () => {
      for await (const client of listener) {
        links.push(client);
        if (dead) continue; // a cancel request: swallowed
        const server = await Deno.connect({
          hostname: target.hostname,
          port: Number(target.port),
        });
        links.push(server);
        void pipe(client, server);
        void pipe(server, client);
      }
    })().catch(() => {});
    const raw = postgres(proxied.href, { max: 3, prepare: false });
    try {
      // Two connections open before the link goes silent.
      const warm = bounded(raw, { timeoutMs: 5000 });
      await Promise.all([
        warm`select pg_sleep(0.1)`,
        warm`select pg_sleep(0.1)`,
      ]);
      dead = true;
      const within = (ms: number, query: Promise<unknown>) =>
        Promise.race([
          query.then(() => "answered", (e) => e),
          new Promise((r) => setTimeout(() => r("no answer"), ms)),
        ]);
      // Without giveUpAfterCancel (auth-sync's writes, whose late effect
      // must not follow a 503), the statement waits for the server.
      const waits = bounded(raw, { timeoutMs: 300 });
      assert.equal(await within(3_000, waits`select 2 as two`), "no answer");
      const sql = bounded(raw, { timeoutMs: 300, giveUpAfterCancel: true });
      const outcome = await within(15_000, sql`select 2 as two`);
      assert.equal(
        (outcome as { code?: string }).code,
        "57014",
        String(outcome),
      );
      assert.equal(asDbBusy(outcome)?.code, "db_timeout");
      // The link back: the pool's other connection serves.
      dead = false;
      const [row] = await bounded(raw, { timeoutMs: 5000 })`select 3 as three`;
      assert.equal(row.three, 3);
    } finally {
      await raw.end({ timeout: 1 });
      closeProxy(listener, links);
      await db.close();
    }
  },
});

withDb(
  "Pools.database: a server that accepts connections and closes them before their startup (a balancer whose database is down) gets a few a second, not hundreds; once it answers, the pool serves again",
  async (url) => {
    let down = true;
    let accepted = 0;
    const proxy = forwardingProxy(url, (client) => {
      accepted++;
      if (!down) return true;
      // Reads the startup message, then closes cleanly (no error).
      client.read(new Uint8Array(1024)).finally(() => client.close())
        .catch(() => {});
      return false;
    });
    const pools = new Pools();
    try {
      const sql = pools.database({
        dbUrl: proxy.url,
        dbPoolMax: 2,
        dbStatementTimeoutMs: 1000,
      });
      const early = await sql`select 1 as one`.then(() => null, (e) => e);
      assert.equal(early?.code, "57014");
      const before = accepted;
      await new Promise((r) => setTimeout(r, 2000));
      // postgres.js alone reconnects at once: about 900 in these 2 s here.
      assert.ok(
        accepted - before < 30,
        `${accepted - before} connections in 2 s`,
      );
      down = false;
      const later = pools.database({
        dbUrl: proxy.url,
        dbPoolMax: 2,
        dbStatementTimeoutMs: 5000,
      });
      const [row] = await later`select 2 as two`;
      assert.equal(row.two, 2);
    } finally {
      await pools.close();
      proxy.close();
    }
  },
);

Deno.test({
  name:
    "Pools.database: TLS through the pool's own sockets: sslmode=require and prefer encrypt, verify-full refuses a self-signed certificate with a clear error",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const cluster = await throwawayCluster({ tls: true });
    const pools = new Pools();
    const url = (host: string, mode: string) => {
      const u = new URL(cluster.url);
      u.hostname = host;
      u.searchParams.set("sslmode", mode);
      return u.href;
    };
    const encrypted = async (dbUrl: string) => {
      const sql = pools.database({
        dbUrl,
        dbPoolMax: 1,
        dbStatementTimeoutMs: 5000,
      });
      const [row] = await sql`
        select ssl from pg_stat_ssl where pid = pg_backend_pid()`;
      return row.ssl;
    };
    try {
      assert.equal(await encrypted(url("127.0.0.1", "require")), true);
      assert.equal(await encrypted(url("localhost", "prefer")), true);
      assert.equal(await encrypted(url("127.0.0.1", "disable")), false);
      const refused = await encrypted(url("localhost", "verify-full"))
        .then(() => null, (e) => e);
      assert.match(String(refused?.code), /SELF_SIGNED|CERT/);
    } finally {
      await pools.close();
      await cluster.destroy();
    }
  },
});
