/**
 * Embedded Postgres for the local stack: PGlite, served on the Postgres wire
 * protocol so that the Supabase CLI, postgres.js and psql connect to it as to
 * any other Postgres.
 *
 * @module
 */
import { PGlite } from "@electric-sql/pglite";
import { PGLiteSocketServer } from "@electric-sql/pglite-socket";

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
  /** Client connections multiplexed onto the single PGlite session. */
  maxConnections?: number;
}

/**
 * Starts PGlite and serves it on the wire.
 *
 * PGlite is a single session: pglite-socket multiplexes several client
 * connections onto it, one statement at a time, which is enough for a
 * development stack but is not a connection pool with real parallelism.
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
  const db = await PGlite.create(options.dataDir ?? "memory://");
  const port = options.port ?? 54322;
  const server = new PGLiteSocketServer({
    db,
    host,
    port: port === 0 ? await _freePort(host) : port,
    maxConnections: options.maxConnections ?? 32,
  });
  await server.start();
  const bound = Number(server.getServerConn().split(":").pop());
  return {
    url: `postgresql://postgres:postgres@${host}:${bound}/postgres`,
    port: bound,
    async close() {
      await server.stop();
      await db.close();
    },
  };
}

// pglite-socket does not report the port the OS picked for port 0, so one is
// reserved and released just before binding.
async function _freePort(host: string): Promise<number> {
  const listener = Deno.listen({ hostname: host, port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return await Promise.resolve(port);
}
