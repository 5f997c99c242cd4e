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
}

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
  const queue = new SessionQueue(db);
  const handlers = new Set<PGLiteSocketHandler>();
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
    const forget = () => handlers.delete(handler);
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

  constructor(db: PGlite) {
    this.#db = db;
  }

  /** Queues one protocol message of a connection; resolves once it ran. */
  enqueue(
    handlerId: number,
    message: Uint8Array,
    onData: (data: Uint8Array) => void,
  ): Promise<number> {
    return new Promise((resolve, reject) => {
      this.#waiting.push({ handlerId, message, onData, resolve, reject });
      void this.#pump();
    });
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
    }
  }
}
