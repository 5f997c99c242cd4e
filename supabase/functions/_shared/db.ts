/**
 * Postgres access: one small pool per isolate, sized and configured for
 * serverless isolates behind Supabase's transaction pooler, and the bounds
 * every statement of a request runs under (docs/reliability.md,
 * "Database timeouts").
 *
 * @module
 */
import postgres from "postgres";
import { HttpError } from "./errors.ts";
import { Gate, type Place } from "./gate.ts";
import { pacedSockets, reconnectDelay } from "./sockets.ts";

/** The postgres.js client type used across the functions. */
export type Sql = postgres.Sql;

/**
 * How long any statement may wait for a lock, in milliseconds: set with
 * `SET LOCAL` in every transaction the functions open, and as the
 * `lock_timeout` attribute of `presence.record_ping` (migration
 * `20261124030000_set_presence_function_lock_timeout.sql`), which the ping
 * calls outside a transaction.
 */
export const LOCK_TIMEOUT_MS = 1000;

/** Seconds a client is told to wait after a `db_timeout` (`Retry-After`). */
export const DB_RETRY_AFTER_S = 1;

/**
 * How long a statement outside a transaction may go unanswered after its
 * cancel request, in milliseconds, before it is answered 57014 here, when
 * its bounds allow it ({@linkcode QueryBounds.giveUpAfterCancel}): a cancel
 * that nobody acts on (a transaction pooler holding the statement while it
 * waits for a server connection, a link that died without a reset) would
 * otherwise hold the request past every bound.
 */
export const CANCEL_GRACE_MS = 1000;

/**
 * What a pool is made from: the environment's database settings (the
 * fields of `FunctionEnv` of the same names; declared here so that `env.ts`,
 * which checks URLs with {@linkcode connectionOptions}, is not imported back).
 */
export interface DatabaseSettings {
  readonly dbUrl: string;
  readonly dbPoolMax: number;
  readonly dbStatementTimeoutMs: number;
}

/**
 * The pools of one set of dependencies (`deps.ts` makes one per handler
 * set): one per database URL, created on first use, each request's view of
 * it bounded (see {@linkcode Pools.database}). Tests and the local stack
 * end theirs with {@linkcode Pools.close}; deployed isolates simply end.
 */
export class Pools {
  readonly #pools = new Map<
    string,
    { sql: Sql; memory: PoolMemory; gate: Gate; ended: AbortController }
  >();

  /**
   * The pool for the environment's database, wrapped so that each
   * statement is bounded by `DB_STATEMENT_TIMEOUT_MS` and cancelled when
   * `signal` aborts (the HTTP request was abandoned).
   *
   * The pool suits many short-lived isolates sharing a small project's
   * connections: `DB_POOL_MAX` (default 2) connections, closed after 10 s
   * idle. `prepare: false` because Supabase's transaction pooler (port
   * 6543) cannot keep named prepared statements across transactions.
   * Reconnection waits at most about half a second between attempts
   * (postgres.js's default grows to 20 s), so pings answer again within
   * 2 s of the database's return; and the pool opens its sockets itself,
   * paced (`sockets.ts`), so that a server that closes connections before
   * their startup gets a few a second, not hundreds.
   *
   * No statement is ever written behind another on one connection
   * (postgres.js's pipelining): each statement outside a transaction and
   * each transaction waits in a gate
   * ({@linkcode QueryBounds.gate}, `gate.ts`) for a connection of its own.
   * Transaction poolers lose pipelined answers: PgBouncer before 1.21 and
   * Supavisor before supabase/supavisor#1079 hand the server connection
   * back at the first statement's ReadyForQuery, and postgres.js sends a
   * statement with parameters in two flights, the first without a Sync,
   * so its answer goes to nobody and the request waits for ever with every
   * backend idle (`tests/e2e/pooler_test.ts`); the hosted pooler is
   * reported to lose pipelined statements with or without parameters
   * (supabase/supabase#50358, porsager/postgres#970). The cost: ES256
   * pings on two connections lost about 30% of their rate at c=16 and 40%
   * at c=64 (docs/performance.md, "The pool's gate"); `DB_POOL_MAX` sets
   * how many statements an isolate has in flight.
   *
   * @example
   * ```ts
   * const sql = pools.database(readEnv(denoEnv), req.signal);
   * const [row] = await sql`select 1 as one`;
   * ```
   */
  database(env: DatabaseSettings, signal?: AbortSignal): Sql {
    let pool = this.#pools.get(env.dbUrl);
    if (!pool) {
      const options = connectionOptions(env.dbUrl);
      const ended = new AbortController();
      // Paced: postgres.js alone reconnects at once, for ever, to a server
      // that closes connections before their startup (sockets.ts). Its
      // `socket` option is documented (README, "Custom socket") but not in
      // its types.
      const paced = {
        socket: pacedSockets({
          host: options.host,
          port: options.port,
          max: env.dbPoolMax,
          signal: ended.signal,
        }),
      } as object;
      const sql = postgres({
        ...options,
        max: env.dbPoolMax,
        ...paced,
        prepare: false,
        // The database's array types are not fetched: the query that
        // fetches them is the first of each new connection, and its
        // failure (a pooler refusing the connection at its first
        // statement) is a rejection postgres.js leaves unhandled, which
        // ends the isolate (porsager/postgres#1192). Arrays go as literals
        // (`pgArray`) and come back as JSON. It also saves each new
        // connection a round trip.
        fetch_types: false,
        idle_timeout: 10,
        backoff: reconnectDelay,
        max_lifetime: 60 * 30,
        onnotice: () => {},
      });
      pool = { sql, memory: new Map(), gate: new Gate(env.dbPoolMax), ended };
      this.#pools.set(env.dbUrl, pool);
    }
    return bounded(pool.sql, {
      timeoutMs: env.dbStatementTimeoutMs,
      signal,
      // The presence functions pass their request's signal, and a ping or
      // read that lands late is one the client repeats anyway; auth-sync
      // passes none (it finishes what it starts), and its lease and intent
      // writes must not be answered before they are known not to have
      // happened.
      giveUpAfterCancel: signal !== undefined,
      memory: pool.memory,
      gate: pool.gate,
    });
  }

  /** Ends every pool made so far; a later call of `database` opens anew. */
  async close(): Promise<void> {
    const pools = [...this.#pools.values()];
    this.#pools.clear();
    await Promise.all(pools.map(({ sql, ended }) => {
      ended.abort();
      return sql.end({ timeout: 5 });
    }));
  }
}

/** What {@linkcode connectionOptions} takes from a connection string. */
export interface ConnectionOptions {
  /** Host name, or an IP address (IPv6 without its brackets). */
  readonly host: string;
  /** Port; 5432 when the URL names none. */
  readonly port: number;
  /** Database name, decoded; `postgres` when the URL names none. */
  readonly database: string;
  /** User, decoded (`postgres.<ref>` on the pooler). */
  readonly username: string;
  /** Password, decoded. Never logged. */
  readonly password: string;
  /** postgres.js's `ssl`: `false`, `"prefer"`, `"require"` or `"verify-full"`. */
  readonly ssl: false | "prefer" | "require" | "verify-full";
  /** Seconds to wait for a connection: the URL's `connect_timeout`, else 5. */
  readonly connect_timeout: number;
  /** Startup parameters: `application_name` and `options`. */
  readonly connection: Record<string, string>;
}

const _LOOPBACK = /^(localhost|127(\.\d{1,3}){3}|::1)$/i;

/**
 * Whether a host name is this machine's loopback (`localhost`, `127.x.x.x`,
 * `::1`, without brackets): where TLS protects nothing.
 *
 * @example
 * ```ts
 * isLoopbackHost("127.0.0.1"); // true
 * isLoopbackHost("db.abc.supabase.co"); // false
 * ```
 */
export function isLoopbackHost(host: string): boolean {
  return _LOOPBACK.test(host);
}

/**
 * Reads a `postgresql://` connection string the way a hosted one is meant:
 * an IPv6 literal in brackets is a host (postgres.js alone splits it at its
 * colons), user and password are percent-decoded, and the query parameters
 * are libpq's, as in Supabase's Connect panel:
 *
 * - `sslmode` as libpq does: `disable`; `allow` or `prefer` (TLS when the
 *   server offers it); `require` (TLS, certificate not checked);
 *   `verify-ca` or `verify-full` (TLS with the certificate checked against
 *   the system's roots and the host name). Without it, `prefer` as in
 *   libpq, except on loopback where TLS protects nothing.
 * - `sslrootcert=system` means `verify-full`; a certificate file is
 *   refused, since a function cannot read one.
 * - `connect_timeout`: whole seconds, at least 2 as in libpq (default 5).
 * - `application_name` and `options` (`-c name=value`) go to the server
 *   (Supavisor's transaction pooler, port 6543, does not pass them on).
 * - `pgbouncer=true`, Prisma's mark of a transaction pooler (the
 *   dashboard's Prisma string carries it), is accepted: the functions never
 *   use named prepared statements anyway.
 *
 * Any other parameter is refused: by name when it is one of libpq's, of
 * another client's strings or a server setting, else unnamed, since a
 * password whose `?` is not percent-encoded is read as a query from there
 * on. postgres.js would send it to the server as a setting, and the server
 * would refuse every connection (`unrecognized configuration parameter`,
 * SQLSTATE 42704) at the first request instead of at configuration.
 * Throws a `TypeError` naming the part; never echoes the string, a value or
 * any text that may be a password's.
 *
 * @example
 * ```ts
 * connectionOptions("postgresql://postgres.ref:pw@[2001:db8::5]:6543/postgres?sslmode=require");
 * // { host: "2001:db8::5", port: 6543, ssl: "require", ... }
 * ```
 */
export function connectionOptions(url: string): ConnectionOptions {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new TypeError("database URL: not a URL");
  }
  if (!/^postgres(ql)?:$/.test(parsed.protocol)) {
    throw new TypeError("database URL: scheme must be postgresql://");
  }
  const host = parsed.hostname.replace(/^\[(.*)\]$/, "$1");
  if (!host) throw new TypeError("database URL: no host");
  const params: Partial<Record<_Param, string>> = Object.fromEntries(
    parsed.searchParams,
  );
  const other = Object.keys(params).find((name) =>
    !(_PARAMS as readonly string[]).includes(name)
  );
  if (other !== undefined && !_NAMED.has(other)) {
    // Not named: a password with a `?` that is not percent-encoded is
    // read from there on as a query, and its text as a parameter's name.
    throw new TypeError(
      `database URL: a parameter it does not know (not named: it may be part of the password; percent-encode ?, #, / and % in the password) (read: ${
        _PARAMS.join(", ")
      })`,
    );
  }
  if (other !== undefined) {
    throw new TypeError(
      `database URL: parameter "${other}" is not read (read: ${
        _PARAMS.join(", ")
      }); ${
        _HINTS[other] ??
          "set server settings with options=-c name=value (a direct connection only: Supavisor's transaction pooler drops options)"
      }`,
    );
  }
  const {
    sslmode,
    sslrootcert,
    connect_timeout,
    pgbouncer,
    application_name = "presence-auth-functions",
    options,
  } = params;
  if (sslrootcert !== undefined && sslrootcert !== "system") {
    throw new TypeError(
      "database URL: sslrootcert can only be system (a function cannot read a certificate file); or use sslmode=require",
    );
  }
  if (pgbouncer !== undefined && !/^(true|false)$/.test(pgbouncer)) {
    throw new TypeError("database URL: pgbouncer must be true or false");
  }
  const mode = sslrootcert === "system" ? "verify-full" : sslmode;
  return {
    host,
    port: parsed.port ? Number(parsed.port) : 5432,
    database: decodeURIComponent(parsed.pathname.slice(1)) || "postgres",
    username: _decoded(parsed.username, "user name"),
    password: _decoded(parsed.password, "password"),
    ssl: _ssl(mode, isLoopbackHost(host)),
    connect_timeout: _connectTimeout(connect_timeout),
    connection: options === undefined
      ? { application_name }
      : { application_name, options },
  };
}

// The parameters read; any other is refused by name.
const _PARAMS = [
  "sslmode",
  "sslrootcert",
  "connect_timeout",
  "application_name",
  "options",
  "pgbouncer",
] as const;
type _Param = typeof _PARAMS[number];

// What to do instead, for parameters of other clients' connection strings.
const _HINTS: Record<string, string> = {
  connection_limit: "the pool's size is DB_POOL_MAX",
  pool_timeout: "statements are bounded by DB_STATEMENT_TIMEOUT_MS",
  statement_timeout: "statements are bounded by DB_STATEMENT_TIMEOUT_MS",
};

// The parameters an error may name: those read, those with a hint, libpq's,
// Prisma's and the server settings people put in a URL. Any other name is
// not echoed: it may be text of a password (see connectionOptions).
const _NAMED: ReadonlySet<string> = new Set([
  ..._PARAMS,
  ...Object.keys(_HINTS),
  "channel_binding",
  "client_encoding",
  "dbname",
  "fallback_application_name",
  "gssencmode",
  "host",
  "hostaddr",
  "idle_in_transaction_session_timeout",
  "keepalives",
  "keepalives_count",
  "keepalives_idle",
  "keepalives_interval",
  "krbsrvname",
  "load_balance_hosts",
  "lock_timeout",
  "passfile",
  "password",
  "port",
  "replication",
  "require_auth",
  "requiressl",
  "schema",
  "search_path",
  "service",
  "socket_timeout",
  "ssl",
  "ssl_max_protocol_version",
  "ssl_min_protocol_version",
  "sslaccept",
  "sslcert",
  "sslcompression",
  "sslcrl",
  "sslcrldir",
  "sslidentity",
  "sslkey",
  "sslnegotiation",
  "sslpassword",
  "sslsni",
  "statement_cache_size",
  "target_session_attrs",
  "tcp_user_timeout",
  "timezone",
  "user",
]);

// A percent-decoded user name or password; a `%` that starts no escape is
// refused by what it is in, never with the text.
function _decoded(text: string, part: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    throw new TypeError(
      `database URL: the ${part} has a % that is not followed by two hex digits: percent-encode it as %25`,
    );
  }
}

function _connectTimeout(value: string | undefined): number {
  if (value === undefined) return 5;
  // libpq reads 0 or less as "wait for ever", which no request can afford.
  if (!/^\d+$/.test(value) || Number(value) < 1) {
    throw new TypeError(
      "database URL: connect_timeout must be a whole number of seconds, 1 or more",
    );
  }
  // libpq's floor: "a value of 1 is interpreted as 2".
  return Math.max(2, Number(value));
}

function _ssl(
  mode: string | undefined,
  loopback: boolean,
): ConnectionOptions["ssl"] {
  switch (mode) {
    case undefined:
      return loopback ? false : "prefer";
    case "disable":
      return false;
    case "allow":
    case "prefer":
      return "prefer";
    case "require":
      return "require";
    case "verify-ca":
    case "verify-full":
      return "verify-full";
    default:
      throw new TypeError(
        "database URL: sslmode must be disable, allow, prefer, require, verify-ca or verify-full",
      );
  }
}

/** The bounds of {@linkcode bounded}. */
export interface QueryBounds {
  /** Longest a statement may run, in milliseconds. */
  readonly timeoutMs: number;
  /** Cancels every statement still running when it aborts. */
  readonly signal?: AbortSignal;
  /**
   * Answer a statement 57014 once its cancel has gone unanswered for
   * {@linkcode CANCEL_GRACE_MS}. It may still run later (a pooler that
   * queued it forwards it), so only for work whose late effect a retry
   * would have anyway: a ping, a read. Default false: wait for the
   * server's answer.
   */
  readonly giveUpAfterCancel?: boolean;
  /**
   * What the pool remembers for its isolate ({@linkcode remember}); the
   * {@linkcode Pools} that made the pool owns it, and it goes with them.
   */
  readonly memory?: PoolMemory;
  /**
   * The pool's gate (`gate.ts`): with it, each statement outside a
   * transaction and each transaction waits for a connection of its own,
   * within its time and until its request is abandoned, and holds it
   * until postgres.js is done with it; and each statement is handed to
   * postgres.js so that its connection counts as full while it runs
   * (postgres.js queues the next rather than write it behind). A
   * transaction must not await a statement of the pool outside it: with
   * every place held, that statement waits out its time.
   */
  readonly gate?: Gate;
}

/**
 * Per-pool memory of one set of dependencies, by key: the optional columns
 * found (`columns.ts`), the reads watchers share (`presence/query.ts`).
 * Held by {@linkcode Pools}, not by the modules that use it, so that two
 * sets of dependencies (two tests, two local stacks) share nothing.
 */
export type PoolMemory = Map<symbol, unknown>;

/**
 * The value under `key` in the memory of the pool behind `sql`, made by
 * `make` on first use. A `sql` with no memory (a bare pool, or a view
 * bounded without one) remembers nothing: `make` runs on every call.
 *
 * @example
 * ```ts
 * const _SEEN = Symbol("seen");
 * const seen = remember(sql, _SEEN, () => new Set<string>());
 * ```
 */
export function remember<T>(sql: Sql, key: symbol, make: () => T): T {
  const memory = _boundsOf(sql)?.memory;
  if (!memory) return make();
  if (!memory.has(key)) memory.set(key, make());
  return memory.get(key) as T;
}

/**
 * `values` as a PostgreSQL array literal, each element quoted: bound as one
 * parameter and cast in the statement (`= any(${pgArray(ids)}::uuid[])`).
 * The functions' pools do not fetch the database's array types (see
 * {@linkcode Pools.database}), without which postgres.js cannot send a
 * JavaScript array; a literal needs no type from the database.
 *
 * @example
 * ```ts
 * pgArray(["a", 'b"c']); // '{"a","b\\"c"}'
 * ```
 */
export function pgArray(values: Iterable<string | number | bigint>): string {
  const quoted = [...values].map((v) =>
    `"${String(v).replace(/[\\"]/g, "\\$&")}"`
  );
  return `{${quoted.join(",")}}`;
}

/**
 * `sql` with every statement bounded: a statement still running after
 * `timeoutMs` (or when `signal` aborts) is cancelled on the server, so the
 * database stops the work instead of finishing it for nobody; its error
 * then answers 503 `db_timeout` (see {@linkcode asDbBusy}). Each
 * transaction (`begin`) instead starts with `SET LOCAL statement_timeout`
 * and `lock_timeout` ({@linkcode LOCK_TIMEOUT_MS}), which the transaction
 * pooler allows, and which the server enforces; a transaction may raise
 * them for itself.
 *
 * The client's timer, not a server setting, bounds statements outside a
 * transaction: a session `SET` would leak to other clients of a pooled
 * connection, and a `SET statement_timeout` attribute of a function does
 * not arm the timer of the statement that calls it (tested in
 * `tests/e2e/db_bounds_test.ts`).
 */
export function bounded(sql: Sql, bounds: QueryBounds): Sql {
  return _tracked(sql, bounds, true);
}

const _POOL = Symbol("pool");

/**
 * The pool behind a bounded `sql` ({@linkcode bounded} makes one per
 * request), or `sql` itself: which connections a request's statements use.
 *
 * @example
 * ```ts
 * poolOf(pools.database(env, req.signal)) === poolOf(pools.database(env)); // true
 * ```
 */
export function poolOf(sql: Sql): Sql {
  return (sql as unknown as { [_POOL]?: Sql })[_POOL] ?? sql;
}

const _BOUNDS = Symbol("bounds");

/**
 * Whether the request behind a bounded `sql` was abandoned (its signal
 * aborted): its statements are cancelled, for its own sake and for any
 * caller that shared one of them. `false` for an unbounded `sql`.
 *
 * @example
 * ```ts
 * const ac = new AbortController();
 * const sql = bounded(pool, { timeoutMs: 3_000, signal: ac.signal });
 * ac.abort();
 * abandoned(sql); // true
 * ```
 */
export function abandoned(sql: Sql): boolean {
  return _boundsOf(sql)?.signal?.aborted ?? false;
}

// The bounds of a view made by `bounded` (or a transaction of one);
// undefined for a bare pool.
function _boundsOf(sql: Sql): QueryBounds | undefined {
  return (sql as unknown as { [_BOUNDS]?: QueryBounds })[_BOUNDS];
}

// `timer`: whether the client's timer bounds each statement. Inside a
// transaction the server does (SET LOCAL, which a caller may raise for its
// own transaction, as auth-sync's leased writes do), and only an aborted
// request cancels from here. `link`, for a transaction, notes whether its
// connection was lost. The gate holds back the pool's own units only: a
// transaction's statements already have their connection.
function _tracked(
  sql: Sql,
  bounds: QueryBounds,
  timer: boolean,
  link?: _Link,
): Sql {
  const gate = timer && !link ? bounds.gate : undefined;
  const track = (query: unknown) => _bound(query, bounds, timer, link, gate);
  return new Proxy(sql, {
    apply: (target, self, args) => track(Reflect.apply(target, self, args)),
    get(target, key, receiver) {
      if (key === _POOL) return poolOf(target);
      if (key === _BOUNDS) return bounds;
      const value = Reflect.get(target, key, receiver);
      if (key === "unsafe" && typeof value === "function") {
        return (...args: unknown[]) => track(value.apply(target, args));
      }
      // No function needs a connection of its own beyond a transaction, and
      // one would have to hold a gate place for as long as it is reserved
      // and never be released once lost: refused, rather than handed out
      // past the gate.
      if (key === "reserve") {
        return () => Promise.reject(_coded("RESERVE_REFUSED", _NO_RESERVE));
      }
      if (key === "begin" && typeof value === "function") {
        return async (...args: unknown[]) => {
          const work = args.pop() as (tx: Sql) => unknown;
          const place = await _admitted(gate, bounds);
          const link: _Link = { lost: false };
          let over = false;
          try {
            return await value.call(target, ...args, async (tx: Sql) => {
              const timeout = String(bounds.timeoutMs);
              const lock = String(Math.min(LOCK_TIMEOUT_MS, bounds.timeoutMs));
              try {
                await tx`select set_config('statement_timeout', ${timeout}, true),
                                set_config('lock_timeout', ${lock}, true)`;
                const out = await work(_tracked(tx, bounds, false, link));
                // A statement's loss the work caught (and went on): no
                // COMMIT either.
                if (!link.lost) return out;
                throw _coded(
                  "CONNECTION_CLOSED",
                  "connection lost in the transaction",
                );
              } catch (error) {
                if (!link.lost && !_isConnectionError(error)) throw error;
                // Its connection lost, postgres.js would write its ROLLBACK
                // there, which leaves that connection unable to send again
                // or throws where nothing catches it (porsager/postgres
                // #1208, PRs #1209 and #1215, open in 3.4.9). Left
                // unanswered, `begin` fails as the connection closes; one
                // still open after the grace takes its ROLLBACK.
                await new Promise((r) => setTimeout(r, CANCEL_GRACE_MS));
                if (over) await new Promise(() => {});
                throw error;
              }
            });
          } finally {
            over = true;
            place?.leave();
          }
        };
      }
      return value;
    },
  }) as Sql;
}

// A transaction's connection: whether it was lost.
interface _Link {
  lost: boolean;
}

const _NO_RESERVE =
  "reserve() is not offered by the functions' pool: use begin() for work that needs one connection";

// What the log line says of a statement the bounds gave up on: what most
// likely held it, and the setting that bounds it.
const _NOT_STARTED =
  "statement not started in time: no connection of the pool (DB_POOL_MAX) came free, or the database was not reached, within DB_STATEMENT_TIMEOUT_MS";
const _NO_PLACE =
  "no connection in time: every connection of the pool (DB_POOL_MAX) stayed busy for DB_STATEMENT_TIMEOUT_MS";
const _NOT_ANSWERED =
  "statement not answered after its cancel (a transaction pooler waiting for a database connection, or a lost link)";

// The error of a statement or transaction that got no
// connection or was cancelled before its answer: 57014, as the server's
// own cancel, so that it answers 503 db_timeout (asDbBusy).
function _cancelled(message: string): Error {
  return _coded("57014", message);
}

// An error with postgres.js's shape: a `code` beside the message.
function _coded(code: string, message: string): Error {
  return Object.assign(new Error(message), { code });
}

// A place in the pool's gate (none without a gate), waited for at
// most the statement's time and until the request is abandoned.
function _admitted(
  gate: Gate | undefined,
  bounds: QueryBounds,
): Promise<Place | undefined> {
  if (!gate) return Promise.resolve(undefined);
  let place!: Place;
  return new Promise<void>((resolve, reject) => {
    const late = () => {
      if (!place.withdraw()) return;
      done();
      reject(_cancelled(_NO_PLACE));
    };
    const done = () => {
      clearTimeout(timeout);
      bounds.signal?.removeEventListener("abort", late);
    };
    const timeout = setTimeout(late, bounds.timeoutMs);
    bounds.signal?.addEventListener("abort", late, { once: true });
    place = gate.enter(() => {
      done();
      resolve();
    });
    if (bounds.signal?.aborted) late();
  }).then(() => place);
}

// postgres.js's error for a database it could not reach or lost, or a
// socket's error it passes on, whatever its code (a TLS failure, an
// unreachable host): never the server's own answer.
function _isConnectionError(error: unknown): boolean {
  if (isDbError(error)) return false;
  const { code, syscall } = (error ?? {}) as {
    code?: unknown;
    syscall?: unknown;
  };
  return typeof syscall === "string" ||
    (typeof code === "string" &&
      (_CONNECTION_CODES.has(code) || _SOCKET_CODE.test(code)));
}

// Arms the timer and the abort listener when the query is first awaited
// (postgres.js runs a query then, and a fragment is never awaited), and
// disarms them when it settles. With a gate, the query is handed to
// postgres.js only once it has a place, and gives the place back when
// postgres.js is done with its connection, which may be after its caller
// was answered; and nothing is written behind it on its connection.
function _bound(
  query: unknown,
  bounds: QueryBounds,
  timer: boolean,
  link?: _Link,
  gate?: Gate,
): unknown {
  const q = query as _Query | undefined;
  if (typeof q?.cancel !== "function" || typeof q.then !== "function") {
    return query;
  }
  const then = q.then;
  let outcome: Promise<postgres.RowList<postgres.Row[]>> | undefined;
  q.then = function (onFulfilled, onRejected) {
    outcome ??= new Promise((resolve, reject) => {
      let poll: ReturnType<typeof setInterval> | undefined;
      let grace: ReturnType<typeof setTimeout> | undefined;
      let place: Place | undefined;
      const stop = () => {
        // Still waiting for a place: it never runs.
        if (place?.withdraw()) {
          settle(reject)(_cancelled(_NOT_STARTED));
          return;
        }
        // Running on a connection: the server cancels it, and the query
        // fails with 57014. Not running yet: answer now, and cancel it once
        // it runs. postgres.js must not cancel a query before then: one
        // cancelled while its connection is being opened leaves that
        // connection wedged, out of the pool for good, and one cancelled
        // while queued behind another on a connection (pipelined) loses
        // track of the answers that follow.
        if (q.active) {
          _sendCancel(q);
          // A cancel nobody acts on: answered here after the grace (a
          // statement inside a transaction is not, since its ROLLBACK
          // would queue behind it on the same connection).
          if (timer && bounds.giveUpAfterCancel) {
            grace = setTimeout(
              () => reject(_cancelled(_NOT_ANSWERED)),
              CANCEL_GRACE_MS,
            );
          }
          return;
        }
        reject(_cancelled(_NOT_STARTED));
        // Given up after a minute: a statement that has not run by then
        // never will (its connection is gone). The system clock, not the
        // handler's: this bounds a real timer's polling, no rule of the API.
        const until = Date.now() + 60_000;
        poll ??= setInterval(() => {
          if (q.active) _sendCancel(q);
          if (q.active || Date.now() > until) clearInterval(poll);
        }, 10);
      };
      const settle = <T>(done: (value: T) => void) => (value: T) => {
        clearTimeout(timeout);
        clearTimeout(grace);
        clearInterval(poll);
        bounds.signal?.removeEventListener("abort", stop);
        done(value);
      };
      // Abandoned before it was awaited: it never runs.
      if (bounds.signal?.aborted) {
        reject(_cancelled(_NOT_STARTED));
        return;
      }
      // postgres.js refuses an `undefined` value only once the statement
      // has a connection, which it then leaves open to pipelining (see
      // below); another statement started in the same turn would be
      // written behind it: refused here, before the gate. Its other
      // refusals while building (too many parameters, a value a serializer
      // throws on) are not foreseen: no statement of the functions has one.
      if (gate && _undefinedValue(q.args)) {
        reject(_coded("UNDEFINED_VALUE", "Undefined values are not allowed"));
        return;
      }
      let timedOut = false;
      const timeout = timer
        ? setTimeout(() => {
          timedOut = true;
          stop();
        }, bounds.timeoutMs)
        : undefined;
      bounds.signal?.addEventListener("abort", stop, { once: true });
      // postgres.js rejects a statement it could not build or read (an
      // `undefined` parameter, a row it cannot parse, a bare BEGIN) before
      // its connection is done with it: the Sync it wrote, or the rest of
      // the answer, is still to come, and at that ReadyForQuery it calls
      // the query's resolve (or reject) once more, perhaps in the same read
      // (so decided as it rejects, not a turn later). Until then the place
      // is kept and the gate held shut: a statement it could not build
      // leaves its connection open to pipelining, and with no other
      // connection open or closed (one ending) postgres.js would write the
      // next statement behind that Sync. It comes back at that call (or,
      // if it never comes, after the statement's bound and grace).
      let first: { value: unknown } | undefined;
      let refused = false;
      let held: ReturnType<typeof setTimeout> | undefined;
      const handBack = () => {
        clearTimeout(held);
        place?.leave();
      };
      const own = q as unknown as Record<
        "resolve" | "reject",
        (x: unknown) => void
      >;
      if (gate) {
        for (const key of ["resolve", "reject"] as const) {
          const call = own[key];
          own[key] = (x) => {
            call(x);
            if (!first) {
              first = { value: x };
              refused = key === "reject" && _refusedEarly(q, x);
              if (refused) {
                place?.hold();
                held = setTimeout(handBack, bounds.timeoutMs + CANCEL_GRACE_MS);
              }
              // The same error twice is the same refusal (postgres.js
              // rejects a connection's first statement twice).
            } else if (refused && x !== first.value) handBack();
          };
        }
      }
      const failed = (error: unknown) => {
        if (!refused) place?.leave();
        // The server words the cancel this timer sent as a user's
        // ("canceling statement due to user request"): the log says whose.
        if (timedOut && isDbError(error) && error.code === "57014") {
          error.message +=
            ` (cancelled by the function at DB_STATEMENT_TIMEOUT_MS, ${bounds.timeoutMs} ms)`;
        }
        if (link && _isConnectionError(error)) link.lost = true;
        settle(reject)(error);
      };
      const start = () => {
        try {
          then.call(q, (rows) => {
            place?.leave();
            settle(resolve)(rows);
          }, failed);
        } catch (error) {
          failed(error);
        }
      };
      // postgres.js moves a connection whose statement's `onexecute`
      // answers false to `full`, and writes nothing behind it.
      if (gate) {
        q.options.onexecute ??= _nothingBehind;
        place = gate.enter(start);
      } else start();
    });
    return outcome.then(onFulfilled, onRejected);
  } as typeof q.then;
  // postgres.js's own `catch` and `finally` would run the query without
  // its `then`, past the timer and the gate; the Promise ones call `then`.
  q.catch = Promise.prototype.catch as typeof q.catch;
  q.finally = Promise.prototype.finally as typeof q.finally;
  return q;
}

// postgres.js's query: `active` is set once the query is the one its
// connection is running, `state` once it is written on a connection;
// `options.onexecute`, called as it is written, keeps its connection
// `busy` (open to pipelining) when it answers true. Not in its types.
type _Query = postgres.PendingQuery<postgres.Row[]> & {
  active?: boolean;
  args?: readonly unknown[];
  state?: unknown;
  options: { onexecute?: (connection: unknown) => boolean };
  /** What `cancel()` calls: the pool's cancel, whose promise it drops. */
  canceller?: ((query: unknown) => Promise<void>) | null;
};

const _nothingBehind = () => false;

// Sends a statement's cancel request, once, as `q.cancel()` would. That
// drops the promise of the request (3.4.9 query.js `cancel` returns null),
// which postgres.js rejects when the request cannot be sent (the database
// unreachable, the pool ended): left unhandled, that rejection would end
// the isolate. Nothing here acts on the outcome: the statement is answered
// by its end, or after the grace.
function _sendCancel(q: _Query): void {
  const send = q.canceller;
  if (!send) return;
  q.canceller = null;
  send(q).catch(() => {});
}

// Whether postgres.js rejected a statement it had written (`state`) before
// its connection was done with it, so that it calls the query once more at
// that connection's ReadyForQuery: not the server's answer, not a lost
// connection (postgres.js reports a socket's error once, and the close
// that follows calls nothing), not 57014 (a query it dropped from its
// queue).
function _refusedEarly(q: _Query, error: unknown): boolean {
  const code = (error as { code?: unknown } | undefined)?.code;
  return Boolean(q.state) && !isDbFailure(error) && code !== "57014";
}

// Whether a statement's values hold `undefined`: a value, one given a type
// (`sql.typed`, `sql.json`), or one in a fragment (or a list of them). A
// builder's values (`sql(row)`) are left to postgres.js: the functions send
// them only inside transactions, on a connection of their own.
function _undefinedValue(args: readonly unknown[] = []): boolean {
  const fragment = (x: unknown): x is { args: unknown[] } =>
    x instanceof Promise && Array.isArray((x as { args?: unknown }).args);
  return args.some((x) =>
    x === undefined ||
    (fragment(x) && _undefinedValue(x.args)) ||
    (Array.isArray(x) && fragment(x[0]) &&
      x.some((f) => fragment(f) && _undefinedValue(f.args))) ||
    (x?.constructor?.name === "Parameter" &&
      (x as { value?: unknown }).value === undefined)
  );
}

// A statement cancelled (by its timeout, the client's timer or an
// abandoned request: 57014, which postgres.js also gives a query it drops
// from its queue) or a lock not granted in time (55P03).
const _TIMEOUT_CODES = new Set(["57014", "55P03"]);

// A statement that met another transaction's write: a serialization
// failure (40001: a database whose default isolation is repeatable read or
// serializable, where a ping meets the app's concurrent write of the row)
// or a deadlock (40P01). Run again, it passes.
const _CONFLICT_CODES = new Set(["40001", "40P01"]);

/**
 * The 503 (with `Retry-After`) for a statement the database was too busy
 * for, found in `error` or its `cause` chain (a handler may have wrapped
 * it): `db_timeout` for one that ran out of time or waited too long for a
 * lock, `db_conflict` for one that met another transaction's write; `null`
 * for any other error.
 *
 * @example
 * ```ts
 * throw asDbBusy(error) ?? error;
 * ```
 */
export function asDbBusy(error: unknown): HttpError | null {
  for (let e = error, depth = 0; e && depth < 4; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string") {
      const busy = _TIMEOUT_CODES.has(code)
        ? "db_timeout"
        : _CONFLICT_CODES.has(code)
        ? "db_conflict"
        : null;
      if (busy) {
        return new HttpError(busy, {
          extra: { error: publicDbError(e) },
          headers: { "Retry-After": String(DB_RETRY_AFTER_S) },
          cause: e,
        });
      }
    }
    e = (e as { cause?: unknown }).cause;
  }
  return null;
}

// Conditions that say nothing about the statement itself: run again later,
// it may succeed.
const _TRANSIENT_CODES = new Set([
  ..._TIMEOUT_CODES,
  ..._CONFLICT_CODES,
  "53300",
  "57P01",
  "57P03",
]);

/**
 * Whether a failure may pass if the statement is run again later: a
 * timeout, a lock not granted, a serialization failure or deadlock, too
 * many connections, a server starting or shutting down, a connection lost
 * or refused (SQLSTATE class 08 included). Anything else (a constraint, a
 * value the column cannot hold, an app's trigger) is about the statement.
 *
 * @example
 * ```ts
 * if (isTransient(error)) throw error; // leave it for the next attempt
 * ```
 */
export function isTransient(error: unknown): boolean {
  if (_isConnectionError(error)) return true;
  const code = (error as { code?: unknown })?.code;
  return typeof code === "string" &&
    (_TRANSIENT_CODES.has(code) || code.startsWith("08"));
}

/**
 * Whether `error` is the database's own answer (a Postgres error with a
 * SQLSTATE), whose message belongs in the log line, not in a response.
 */
export function isDbError(error: unknown): error is postgres.PostgresError {
  return error instanceof postgres.PostgresError;
}

/**
 * Whether `error` is a database failure: the server's own error (with a
 * SQLSTATE), or postgres.js's for a database it could not reach or lost.
 */
export function isDbFailure(error: unknown): boolean {
  return isDbError(error) || _isConnectionError(error);
}

/** Whether a Postgres error is `undefined_column` (SQLSTATE 42703). */
export function isUndefinedColumn(error: unknown): boolean {
  return error instanceof postgres.PostgresError && error.code === "42703";
}

// Conditions a client may be told about by name; anything else is named by
// its SQLSTATE class only.
const _PUBLIC_CONDITIONS: Record<string, string> = {
  "57014": "statement timeout",
  "55P03": "lock not available",
  "40001": "serialization failure",
  "40P01": "deadlock detected",
  "42703": "undefined column",
  "42P01": "undefined table",
  "42501": "insufficient privilege",
  "53300": "too many connections",
  "57P01": "database shutting down",
  "57P03": "database starting up",
};

// postgres.js's own codes for a database that could not be reached or
// dropped the connection, and the codes of the socket errors it passes on
// (ECONNREFUSED, ECONNRESET, EHOSTUNREACH, ERR_SSL_…).
const _CONNECTION_CODES = new Set([
  "CONNECT_TIMEOUT",
  "CONNECTION_CLOSED",
  "CONNECTION_ENDED",
  "CONNECTION_DESTROYED",
]);
const _SOCKET_CODE = /^(E[A-Z]+|ERR_(SSL|TLS|SOCKET|STREAM)_\w+)$/;

/**
 * A description of a database failure that may be sent to any client: the
 * condition and its SQLSTATE, never the server's own message, which can
 * name a host, port, user, database or value. The full message goes to the
 * log line (redacted) instead.
 *
 * @example
 * ```ts
 * publicDbError(error); // "database unreachable (ECONNREFUSED)" or "statement timeout (SQLSTATE 57014)"
 * ```
 */
export function publicDbError(error: unknown): string {
  if (error instanceof postgres.PostgresError) {
    const name = _PUBLIC_CONDITIONS[error.code] ??
      `database error class ${error.code.slice(0, 2)}`;
    return `${name} (SQLSTATE ${error.code})`;
  }
  const code = (error as { code?: unknown })?.code;
  if (typeof code === "string" && _TIMEOUT_CODES.has(code)) {
    // postgres.js's own error for a query it dropped from its queue.
    return `${_PUBLIC_CONDITIONS[code]} (SQLSTATE ${code})`;
  }
  if (_isConnectionError(error)) {
    return `database unreachable (${
      typeof code === "string" ? code : "socket"
    })`;
  }
  return "database error";
}
