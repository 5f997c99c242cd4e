/**
 * Databases the fault suites may stop and start: a throw-away PostgreSQL
 * cluster of their own (never the shared one), and a PGlite wire server
 * restarted on the same port and data folder.
 *
 * @module
 */
import {
  type PgliteServer,
  startPgliteServer,
} from "../../local/db/pglite_server.ts";

/** A database that can be stopped and started again at the same URL. */
export interface RestartableDb {
  readonly kind: "postgres" | "pglite";
  /** Connection string; its password is a random secret for the log scan. */
  readonly url: string;
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Stops it and deletes its files. */
  destroy(): Promise<void>;
}

const _PG_BIN = "/usr/lib/postgresql/15/bin";

/** A free loopback port (bound, then released). */
export function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

async function _run(cmd: string, args: string[]): Promise<string> {
  const out = await new Deno.Command(cmd, {
    args,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout) +
    new TextDecoder().decode(out.stderr);
  if (!out.success) throw new Error(`"${cmd} ${args[0]}" failed: ${text}`);
  return text;
}

/** Whether a throw-away PostgreSQL cluster can be made here, or why not. */
export function clusterUnavailable(): string | null {
  try {
    Deno.statSync(`${_PG_BIN}/initdb`);
  } catch {
    return `no ${_PG_BIN}/initdb`;
  }
  return null;
}

/**
 * Creates and starts a throw-away PostgreSQL 15 cluster on a free port
 * (trust authentication, loopback only). As root the server runs as
 * `postgres`, since PostgreSQL refuses to run as root.
 */
export async function throwawayCluster(): Promise<RestartableDb> {
  const root = Deno.uid() === 0;
  const dir = await Deno.makeTempDir({ prefix: "verify-pg-" });
  const data = `${dir}/data`;
  const log = `${dir}/server.log`;
  const port = freePort();
  const as = (line: string) =>
    root ? _run("su", ["postgres", "-c", line]) : _run("sh", ["-c", line]);
  if (root) await _run("chown", ["postgres", dir]);
  await as(
    `${_PG_BIN}/initdb -D ${data} -A trust -U postgres --no-sync >/dev/null`,
  );
  const start = () =>
    as(
      `${_PG_BIN}/pg_ctl -D ${data} -l ${log} -w -t 30 -o "-p ${port} -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300" start >/dev/null`,
    ).then(() => {});
  await start();
  const secret = `verify-${crypto.randomUUID()}`;
  let running = true;
  return {
    kind: "postgres",
    url: `postgresql://postgres:${secret}@127.0.0.1:${port}/postgres`,
    async stop() {
      await as(`${_PG_BIN}/pg_ctl -D ${data} -m fast -w stop >/dev/null`);
      running = false;
    },
    async start() {
      await start();
      running = true;
    },
    async destroy() {
      if (running) {
        await as(`${_PG_BIN}/pg_ctl -D ${data} -m immediate -w stop >/dev/null`)
          .catch(() => {});
      }
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/**
 * A PGlite wire server on a free port with its data in a temporary folder,
 * stopped by closing it and started again on the same port and folder.
 */
export async function restartablePglite(): Promise<RestartableDb> {
  const dir = await Deno.makeTempDir({ prefix: "verify-pglite-" });
  const port = freePort();
  let server: PgliteServer | null = await startPgliteServer({
    dataDir: dir,
    port,
  });
  return {
    kind: "pglite",
    url: server.url,
    async stop() {
      await server?.close();
      server = null;
    },
    async start() {
      server = await startPgliteServer({ dataDir: dir, port });
    },
    async destroy() {
      await server?.close();
      server = null;
      await Deno.remove(dir, { recursive: true });
    },
  };
}
