/**
 * A throw-away PostgreSQL cluster for tests: created with Debian's `initdb`
 * in a temporary folder, served on a free loopback port, and deleted at the
 * end. Tests never start, stop or alter a cluster they did not create.
 *
 * @module
 */

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

/** A free loopback port (bound, then released). */
export function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

// Debian installs each major version's programs under its own folder; the
// newest one present is used.
function _pgBin(): string | null {
  let best: { version: number; dir: string } | null = null;
  try {
    for (const entry of Deno.readDirSync("/usr/lib/postgresql")) {
      const version = Number(entry.name);
      const dir = `/usr/lib/postgresql/${entry.name}/bin`;
      try {
        Deno.statSync(`${dir}/initdb`);
      } catch {
        continue;
      }
      if (Number.isFinite(version) && (!best || version > best.version)) {
        best = { version, dir };
      }
    }
  } catch {
    return null;
  }
  return best?.dir ?? null;
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
  return _pgBin() === null
    ? "no PostgreSQL server programs (/usr/lib/postgresql/<version>/bin/initdb); install Debian's postgresql package"
    : null;
}

/** Options of {@linkcode throwawayCluster}. */
export interface ClusterOptions {
  /**
   * Serve TLS too (`ssl = on`), with a self-signed certificate for
   * `localhost` made by `openssl`: what `sslmode=require` accepts and
   * `verify-full` refuses.
   */
  readonly tls?: boolean;
  /**
   * More server settings, each passed as `-c name=value` when the server
   * starts (and starts again), e.g. `{ wal_level: "logical" }` for a
   * publisher and a subscription in the same cluster. Names and values are
   * the test's own: letters, digits, `_`, `.` and `-` only.
   */
  readonly settings?: Readonly<Record<string, string | number>>;
}

/**
 * Creates and starts a throw-away PostgreSQL cluster on a free port (trust
 * authentication, loopback only, fsync off: its data is thrown away). As
 * root the server runs as `postgres`, since PostgreSQL refuses to run as
 * root.
 *
 * @example
 * ```ts
 * const db = await throwawayCluster();
 * try {
 *   // use db.url
 * } finally {
 *   await db.destroy();
 * }
 * ```
 */
export async function throwawayCluster(
  options: ClusterOptions = {},
): Promise<RestartableDb> {
  const bin = _pgBin();
  if (!bin) throw new Error(clusterUnavailable()!);
  // Checked before anything is made: they go into a shell line.
  const settings = Object.entries(options.settings ?? {}).map(
    ([name, value]) => {
      if (!/^[a-z_][a-z0-9_.]*$/i.test(name) || !/^[\w.-]+$/.test(`${value}`)) {
        throw new Error(`unsafe server setting ${name}=${value}`);
      }
      return ` -c ${name}=${value}`;
    },
  ).join("");
  const root = Deno.uid() === 0;
  const dir = await Deno.makeTempDir({ prefix: "test-pg-" });
  const data = `${dir}/data`;
  const log = `${dir}/server.log`;
  const port = freePort();
  const as = (line: string) =>
    root ? _run("su", ["postgres", "-c", line]) : _run("sh", ["-c", line]);
  if (root) await _run("chown", ["postgres", dir]);
  await as(
    `${bin}/initdb -D ${data} -A trust -U postgres --no-sync >/dev/null`,
  );
  if (options.tls) {
    // server.crt and server.key in the data folder: PostgreSQL's defaults.
    await as(
      `openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost -keyout ${data}/server.key -out ${data}/server.crt 2>/dev/null && chmod 600 ${data}/server.key`,
    );
  }
  const tls = options.tls ? " -c ssl=on" : "";
  const start = () =>
    as(
      `${bin}/pg_ctl -D ${data} -l ${log} -w -t 30 -o "-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300${tls}${settings}" start >/dev/null`,
    ).then(() => {});
  try {
    await start();
  } catch (error) {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    throw error;
  }
  const secret = `test-${crypto.randomUUID()}`;
  let running = true;
  return {
    kind: "postgres",
    url: `postgresql://postgres:${secret}@127.0.0.1:${port}/postgres`,
    async stop() {
      await as(`${bin}/pg_ctl -D ${data} -m fast -w stop >/dev/null`);
      running = false;
    },
    async start() {
      await start();
      running = true;
    },
    async destroy() {
      if (running) {
        await as(`${bin}/pg_ctl -D ${data} -m immediate -w stop >/dev/null`)
          .catch(() => {});
        running = false;
      }
      await Deno.remove(dir, { recursive: true });
    },
  };
}
