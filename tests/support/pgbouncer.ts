/**
 * Debian's PgBouncer in transaction mode in front of a test's PostgreSQL,
 * as Supabase's transaction pooler (Supavisor, port 6543) stands in front
 * of a hosted project's: each transaction may run on another server
 * connection, no named prepared statement is kept (PgBouncer 1.18 keeps
 * none), and session state (`SET`, advisory locks, `set_config(…, false)`)
 * stays on the server connection for whichever client gets it next.
 *
 * @module
 */
import postgres from "postgres";
import { freePort } from "../../local/testing/cluster.ts";

/**
 * The PgBouncer program: `PGBOUNCER_PATH`, else where Debian's `pgbouncer`
 * package puts it.
 */
export function pgbouncerPath(): string {
  return Deno.env.get("PGBOUNCER_PATH") ?? "/usr/sbin/pgbouncer";
}

/** One server connection of the pool, as `SHOW SERVERS` lists it. */
export interface PooledServer {
  /** The PostgreSQL backend's pid. */
  readonly pid: number;
  /** `active`, `idle`, `used`, `tested` or `new`. */
  readonly state: string;
}

/** A running PgBouncer ({@linkcode startPgBouncer}). */
export interface PgBouncer {
  /** `url` (a database behind it) as reached through the pooler. */
  pooled(url: string): string;
  /** The server connections it holds now, from its admin console. */
  servers(): Promise<PooledServer[]>;
  /** How many client connections it holds now (its admin console's aside). */
  clients(): Promise<number>;
  /**
   * Closes every server connection once its client lets it go (admin
   * `RECONNECT`): the next transaction of any client runs on a new one.
   */
  reconnect(): Promise<void>;
  /** Stops it and deletes its folder. */
  close(): Promise<void>;
}

/**
 * Starts PgBouncer on a free loopback port, in a temporary folder of its
 * own, in `pool_mode = transaction` with `poolSize` server connections per
 * database and user (none in reserve), in front of the server of
 * `targetUrl` (any database on it, same user and password; SCRAM for the
 * clients). As root it runs as `postgres`, since it refuses to run as root.
 *
 * @example
 * ```ts
 * const bouncer = await startPgBouncer(db.url, { poolSize: 2 });
 * try {
 *   const sql = postgres(bouncer.pooled(db.url), { prepare: false });
 * } finally {
 *   await bouncer.close();
 * }
 * ```
 */
export async function startPgBouncer(
  targetUrl: string,
  options: { poolSize: number },
): Promise<PgBouncer> {
  const target = new URL(targetUrl);
  const user = decodeURIComponent(target.username);
  const password = decodeURIComponent(target.password);
  const root = Deno.uid() === 0;
  const dir = await Deno.makeTempDir({ prefix: "test-pgbouncer-" });
  const port = freePort();
  const quoted = (s: string) => `"${s.replaceAll('"', '""')}"`;
  await Deno.writeTextFile(
    `${dir}/users.txt`,
    `${quoted(user)} ${quoted(password)}\n`,
  );
  await Deno.writeTextFile(
    `${dir}/pgbouncer.ini`,
    `[databases]
* = host=${target.hostname.replace(/^\[(.*)\]$/, "$1")} port=${
      target.port || 5432
    }

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${port}
unix_socket_dir =
auth_type = scram-sha-256
auth_file = ${dir}/users.txt
admin_users = ${user}
pool_mode = transaction
default_pool_size = ${options.poolSize}
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 500
logfile = ${dir}/pgbouncer.log
log_connections = 0
log_disconnections = 0
`,
  );
  if (root) {
    await new Deno.Command("chown", { args: ["-R", "postgres", dir] })
      .output();
  }
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command(pgbouncerPath(), {
      args: [...(root ? ["-u", "postgres"] : []), "-q", `${dir}/pgbouncer.ini`],
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
  } catch (error) {
    await Deno.remove(dir, { recursive: true });
    throw new Error(
      `No PgBouncer at ${pgbouncerPath()} (${
        (error as Error).message
      }): install Debian's pgbouncer (apt-get install pgbouncer) or set PGBOUNCER_PATH`,
    );
  }
  const stderr = new Response(child.stderr).text();
  let exited = false;
  const status = child.status.then((s) => {
    exited = true;
    return s;
  });
  const stop = async () => {
    if (!exited) child.kill("SIGTERM");
    await status;
    await stderr;
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  };
  try {
    await _listening(port, () => exited);
  } catch (error) {
    const log = await Deno.readTextFile(`${dir}/pgbouncer.log`).catch(() => "");
    await stop();
    throw new Error(
      `PgBouncer did not start (${
        (error as Error).message
      }): ${await stderr}${log}`,
    );
  }
  const pooled = (url: string) => {
    const u = new URL(url);
    u.hostname = "127.0.0.1";
    u.port = String(port);
    return u.toString();
  };
  // The admin console speaks the simple protocol only, and has no pg_type.
  const admin = () =>
    postgres(pooled(new URL("/pgbouncer", targetUrl).toString()), {
      max: 1,
      fetch_types: false,
      onnotice: () => {},
    });
  const command = async (text: string) => {
    const sql = admin();
    try {
      return await sql.unsafe(text);
    } finally {
      await sql.end();
    }
  };
  return {
    pooled,
    servers: async () =>
      (await command("SHOW SERVERS")).map((r) => ({
        pid: Number(r.remote_pid),
        state: String(r.state),
      })),
    clients: async () =>
      (await command("SHOW CLIENTS")).filter((r) => r.database !== "pgbouncer")
        .length,
    reconnect: async () => {
      await command("RECONNECT");
    },
    close: stop,
  };
}

// Waits until something accepts connections on `port` (at most 10 s).
async function _listening(port: number, exited: () => boolean): Promise<void> {
  const until = Date.now() + 10_000;
  for (;;) {
    if (exited()) throw new Error("it exited");
    try {
      const conn = await Deno.connect({ hostname: "127.0.0.1", port });
      conn.close();
      return;
    } catch {
      if (Date.now() > until) throw new Error(`nothing on port ${port}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}
