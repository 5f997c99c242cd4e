/**
 * Embedded Postgres for the local stack: PGlite, served on the Postgres wire
 * protocol so that the Supabase CLI, postgres.js and psql connect to it as to
 * any other Postgres.
 *
 * @module
 */
import { PGlite } from "@electric-sql/pglite";
import { PGLiteSocketHandler } from "@electric-sql/pglite-socket";
import { createServer, type Server, type Socket } from "node:net";

/** A running PGlite wire server. */
export interface PgliteServer {
  /** Connection string, e.g. `postgresql://postgres:postgres@127.0.0.1:54322/postgres`. */
  readonly url: string;
  /** Port actually bound (useful when 0 was asked for). */
  readonly port: number;
  /** Stops accepting connections and closes the database cleanly. */
  close(): Promise<void>;
}

/** Options for {@linkcode startPgliteServer}. */
export interface PgliteServerOptions {
  /** Folder that persists the data; in memory when omitted. */
  dataDir?: string;
  /** Interface to bind; loopback by default. */
  host?: string;
  /** Port to bind; 0 picks a free one. */
  port?: number;
  /** Client connections allowed at once. */
  maxConnections?: number;
  /**
   * How long a connection may sit idle inside a transaction while others
   * wait for the session, before it is rolled back and closed
   * (PostgreSQL's `idle_in_transaction_session_timeout`); default
   * {@linkcode IDLE_IN_TRANSACTION_MS}.
   */
  idleInTransactionMs?: number;
  /** Told when a connection is closed for that (the stack logs it). */
  log?: (line: string) => void;
}

/**
 * Default of {@linkcode PgliteServerOptions.idleInTransactionMs}: on one
 * shared session, a `BEGIN` left open in psql or a database GUI holds every
 * other connection (sign-in included) until it ends.
 */
export const IDLE_IN_TRANSACTION_MS = 10_000;

/**
 * Starts PGlite and serves it on the wire.
 *
 * PGlite is a single Postgres session: every client connection shares it,
 * one statement (or one whole transaction) at a time. A transaction that
 * waits for another connection therefore waits for ever; the functions never
 * hold one across a network call.
 *
 * @example
 * ```ts
 * const server = await startPgliteServer({ port: 0 });
 * console.log(server.url);
 * await server.close();
 * ```
 */
export async function startPgliteServer(
  options: PgliteServerOptions = {},
): Promise<PgliteServer> {
  const host = options.host ?? "127.0.0.1";
  const maxConnections = options.maxConnections ?? 64;
  const db = await PGlite.create(options.dataDir ?? "memory://");
  const handlers = new Set<PGLiteSocketHandler>();
  const sockets = new Map<
    number,
    { handler: PGLiteSocketHandler; socket: Socket }
  >();
  const idleMs = options.idleInTransactionMs ?? IDLE_IN_TRANSACTION_MS;
  const queue = new SessionQueue(db, {
    idleInTransactionMs: idleMs,
    onIdleTimeout: (handlerId) => {
      const held = sockets.get(handlerId);
      if (!held) return;
      options.log?.(
        `PGlite: closed a connection idle in a transaction for ${idleMs} ms while others waited (its transaction was rolled back)`,
      );
      // What PostgreSQL sends before it closes such a connection.
      if (held.socket.writable) held.socket.write(_IDLE_FATAL);
      void held.handler.detach(true);
    },
  });
  const server: Server = createServer((socket: Socket) => {
    if (handlers.size >= maxConnections) {
      socket.end();
      return;
    }
    const handler = new PGLiteSocketHandler({
      // The handler only calls the three methods SessionQueue has.
      queryQueue: queue as unknown as ConstructorParameters<
        typeof PGLiteSocketHandler
      >[0]["queryQueue"],
      closeOnDetach: true,
    });
    handlers.add(handler);
    sockets.set(handler.handlerId, { handler, socket });
    const forget = () => {
      handlers.delete(handler);
      sockets.delete(handler.handlerId);
    };
    handler.addEventListener("close", forget);
    handler.addEventListener("error", forget);
    handler.attach(socket).catch(forget);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 54322, host, () => resolve());
  });
  const { port } = server.address() as { port: number };
  return {
    url: `postgresql://postgres:postgres@${host}:${port}/postgres`,
    port,
    async close() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const handler of handlers) handler.detach(true);
      });
      handlers.clear();
      await db.close();
    },
  };
}

// ErrorResponse: FATAL 25P03, as PostgreSQL words it.
const _IDLE_FATAL = (() => {
  const fields = [
    "SFATAL",
    "VFATAL",
    "C25P03",
    "Mterminating connection due to idle-in-transaction timeout",
  ].map((f) => f + "\0").join("") + "\0";
  const body = new TextEncoder().encode(fields);
  const out = new Uint8Array(5 + body.length);
  out[0] = "E".charCodeAt(0);
  new DataView(out.buffer).setInt32(1, 4 + body.length);
  out.set(body, 5);
  return out;
})();

/** Options of {@linkcode SessionQueue}. */
export interface SessionQueueOptions {
  /** Idle time inside a transaction while others wait; 0: no limit. */
  idleInTransactionMs?: number;
  /** Called with the connection to close when that time runs out. */
  onIdleTimeout?: (handlerId: number) => void;
}

interface _Queued {
  handlerId: number;
  message: Uint8Array;
  onData: (data: Uint8Array) => void;
  resolve: (bytes: number) => void;
  reject: (error: Error) => void;
}

// Extended-protocol messages that leave a unit of work open until Sync:
// Parse, Bind, Describe, Execute, Flush, Close.
const _OPEN_UNIT = new Set([..."PBDEHC"].map((c) => c.charCodeAt(0)));

/**
 * Gives PGlite's one session to one connection at a time, for a whole unit
 * of work: from its first message until a `Sync` or simple `Query` has run
 * outside a transaction.
 *
 * Written here because pglite-socket 0.2.17's own queue hands the session
 * over between any two messages outside a transaction, so two clients'
 * `Parse`/`Bind` pairs interleave on the shared unnamed statement ("bind
 * message supplies 1 parameters, but prepared statement "" requires 0").
 */
export class SessionQueue {
  #db: PGlite;
  #owner: number | null = null;
  #waiting: _Queued[] = [];
  #running = false;
  #idleMs: number;
  #onIdle: (handlerId: number) => void;
  #idleTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(db: PGlite, options: SessionQueueOptions = {}) {
    this.#db = db;
    this.#idleMs = options.idleInTransactionMs ?? 0;
    this.#onIdle = options.onIdleTimeout ?? (() => {});
  }

  /** Queues one protocol message of a connection; resolves once it ran. */
  enqueue(
    handlerId: number,
    message: Uint8Array,
    onData: (data: Uint8Array) => void,
  ): Promise<number> {
    // The owner is active again: its idle time starts over.
    if (handlerId === this.#owner) this.#stopIdleClock();
    return new Promise((resolve, reject) => {
      this.#waiting.push({ handlerId, message, onData, resolve, reject });
      void this.#pump();
    });
  }

  #stopIdleClock(): void {
    if (this.#idleTimer !== null) clearTimeout(this.#idleTimer);
    this.#idleTimer = null;
  }

  // The owner holds the session between messages and someone else waits:
  // the clock runs; any message of the owner stops it.
  #watchIdle(): void {
    const idle = this.#owner !== null &&
      !this.#waiting.some((q) => q.handlerId === this.#owner) &&
      this.#waiting.some((q) => q.handlerId !== this.#owner);
    if (!idle || this.#idleMs <= 0) return this.#stopIdleClock();
    if (this.#idleTimer !== null) return;
    const owner = this.#owner!;
    this.#idleTimer = setTimeout(() => {
      this.#idleTimer = null;
      if (this.#owner === owner) this.#onIdle(owner);
    }, this.#idleMs);
  }

  /** Drops what a disconnected connection still had queued. */
  clearQueueForHandler(handlerId: number): void {
    this.#waiting = this.#waiting.filter((q) => {
      if (q.handlerId !== handlerId) return true;
      q.reject(new Error("Handler disconnected"));
      return false;
    });
  }

  /** Rolls back and releases the session if a disconnected connection held it. */
  async clearTransactionIfNeeded(handlerId: number): Promise<void> {
    if (this.#owner !== handlerId) return;
    if (this.#db.isInTransaction()) await this.#db.exec("ROLLBACK");
    this.#owner = null;
    void this.#pump();
  }

  async #pump(): Promise<void> {
    if (this.#running) return;
    this.#running = true;
    // One loop, no await between its end and the flag's reset: a message
    // queued meanwhile is either seen by the loop or starts a new pump.
    try {
      for (;;) {
        const index = this.#owner === null
          ? (this.#waiting.length > 0 ? 0 : -1)
          : this.#waiting.findIndex((q) => q.handlerId === this.#owner);
        if (index === -1) break;
        const [job] = this.#waiting.splice(index, 1);
        this.#owner = job.handlerId;
        let bytes = 0;
        try {
          await this.#db.runExclusive(() =>
            this.#db.execProtocolRawStream(job.message, {
              onRawData: (data) => {
                bytes += data.length;
                job.onData(data);
              },
            })
          );
        } catch (error) {
          this.#owner = null;
          job.reject(error as Error);
          continue;
        }
        if (!_OPEN_UNIT.has(job.message[0]) && !this.#db.isInTransaction()) {
          this.#owner = null;
        }
        job.resolve(bytes);
      }
    } finally {
      this.#running = false;
      this.#watchIdle();
    }
  }
}
