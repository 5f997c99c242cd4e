/**
 * A throw-away PostgreSQL cluster for tests: created with Debian's `initdb`
 * in a temporary folder, served on a free loopback port, and deleted at the
 * end. Tests never start, stop or alter a cluster they did not create.
 *
 * @module
 */

import postgres from "postgres";

/** A database that can be stopped and started again at the same URL. */
export interface RestartableDb {
  readonly kind: "postgres" | "pglite";
  /** Connection string; its password is a random secret for the log scan. */
  readonly url: string;
  /**
   * With `hosted`: the superuser's (`supabase_admin`) connection string, for
   * what a hosted project's own services do with their roles (the Auth
   * stand-in, a test's setup); otherwise absent, `url` being the superuser.
   */
  readonly adminUrl?: string;
  /**
   * With `hosted`: the connection string of `supabase_auth_admin`, the role
   * hosted Auth connects as (the Auth stand-in's); otherwise absent.
   */
  readonly authUrl?: string;
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Stops it and deletes its files. */
  destroy(): Promise<void>;
}

/** A free loopback port (bound, then released). */
export function freePort(): number {
  return freePorts(1)[0];
}

/**
 * `count` loopback ports free now, all different: each is held until all
 * are chosen (a port closed at once may be the next one handed out, and
 * two settings given the same port collide).
 *
 * @example
 * ```ts
 * const [api, db, mail] = freePorts(3);
 * ```
 */
export function freePorts(count: number): number[] {
  const held = Array.from(
    { length: count },
    () => Deno.listen({ hostname: "127.0.0.1", port: 0 }),
  );
  const ports = held.map((l) => (l.addr as Deno.NetAddr).port);
  for (const l of held) l.close();
  return ports;
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
  /**
   * Shape the cluster as a hosted Supabase database is (see
   * {@linkcode HOSTED_ROLES_SQL}): the superuser is `supabase_admin`, and
   * `url` connects as a `postgres` that is not one.
   */
  readonly hosted?: boolean;
}

/**
 * The roles and `auth` schema of a hosted Supabase database, as
 * supabase/postgres sets them up (`migrations/db/migrate.sh`, which makes
 * the `postgres` database `postgres`'s; `init-scripts/00000000000000-initial-schema.sql`
 * and `…01-auth-schema.sql`; `migrations/10000000000000_demote-postgres.sql`;
 * `20211115181400_update-auth-permissions.sql`;
 * `20230201083204_grant_auth_roles_to_postgres.sql`;
 * `20230306081037_grant_pg_monitor_to_postgres.sql`;
 * `20240606060239_grant_predefined_roles_to_postgres.sql`;
 * `20250421084701_revoke_admin_roles_from_postgres.sql`, which takes
 * `supabase_auth_admin` from `postgres` and `create` on `auth`):
 *
 * - `anon`, `authenticated`, `service_role`: nologin, inherit
 *   (`20230529180330_alter_api_roles_for_inherit.sql`);
 * - `postgres`: not a superuser; createdb, createrole, replication,
 *   bypassrls, login; member of `anon`, `authenticated`, `service_role`,
 *   `pg_monitor`, `pg_read_all_data`, `pg_signal_backend`; owner of the
 *   database, whose `public` objects are granted to the Data API roles by
 *   default (the initial schema's `alter default privileges in schema
 *   public`, run as `postgres` while it was still the superuser: so on
 *   projects made before Supabase's change of 2026-05-30, applied to all
 *   projects' new tables from 2026-10-30, and where "Default privileges for
 *   new entities" is on; tables made before keep their grants); search
 *   path `"$user", public, extensions` (`00000000000003-post-setup.sql`);
 *   `usage` (not `create`) on `auth`, and every privilege on the
 *   tables, sequences and functions `supabase_auth_admin` creates there
 *   (its default privileges), though not their ownership;
 * - `supabase_auth_admin` (what Auth connects as): noinherit, nocreaterole
 *   (`20260821154147_revoke_createrole_from_auth_admin.sql`), login; `create`
 *   on the database (`20251121141100_supabase_auth_admin_db_grants.sql`);
 *   `all` on the schema `auth` (which `supabase_admin` owns) and owner of
 *   what it creates there, here `local/sql/10_auth.sql` run under its role.
 *
 * Not reproduced: extensions and their schemas' grants, the other
 * services' roles (`authenticator`, storage, realtime), and `supautils` /
 * `safeupdate` (preloaded for `postgres`, `safeupdate.enabled = 0`), which
 * Debian's server does not have.
 *
 * Read in supabase/postgres at 7db7e1a9 (2024-10-23), and the later files
 * at the commits the code index holds (20250421084701 at cd88df63,
 * 20251121141100 at aca19b4a, 20260821154147 at 85341702, the initial
 * schema at aec73818). Where they are silent: `postgres` keeps `all` (not
 * only DML) on the auth tables Auth creates, as the default privileges say.
 *
 * Run as the superuser, in the `postgres` database, before `10_auth.sql`.
 */
export const HOSTED_ROLES_SQL = `
create role anon nologin inherit;
create role authenticated nologin inherit;
create role service_role nologin inherit bypassrls;
create role supabase_auth_admin noinherit nocreaterole login noreplication;
create role postgres nosuperuser createdb createrole login replication bypassrls;
grant anon, authenticated, service_role to postgres;
grant pg_monitor, pg_read_all_data, pg_signal_backend to postgres;
alter database postgres owner to postgres;
grant all on database postgres to postgres;
grant create on database postgres to supabase_auth_admin;
grant usage on schema public to postgres, anon, authenticated, service_role;
alter default privileges for role postgres in schema public
  grant all on tables to postgres, anon, authenticated, service_role;
alter default privileges for role postgres in schema public
  grant all on functions to postgres, anon, authenticated, service_role;
alter default privileges for role postgres in schema public
  grant all on sequences to postgres, anon, authenticated, service_role;
create schema extensions;
grant usage on schema extensions to postgres, anon, authenticated, service_role;
alter role postgres set search_path to "$user", public, extensions;
alter role anon set statement_timeout = '3s';
alter role authenticated set statement_timeout = '8s';
create schema auth authorization supabase_admin;
grant all on schema auth to supabase_auth_admin;
grant usage on schema auth to postgres, anon, authenticated, service_role;
alter default privileges for role supabase_auth_admin in schema auth
  grant all on tables to postgres;
alter default privileges for role supabase_auth_admin in schema auth
  grant all on sequences to postgres;
alter default privileges for role supabase_auth_admin in schema auth
  grant all on routines to postgres;
`;

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
  // Checked before anything is made: they go into a shell line.
  const settings = Object.entries(options.settings ?? {}).map(
    ([name, value]) => {
      if (!/^[a-z_][a-z0-9_.]*$/i.test(name) || !/^[\w.-]+$/.test(`${value}`)) {
        throw new Error(`unsafe server setting ${name}=${value}`);
      }
      return ` -c ${name}=${value}`;
    },
  ).join("");
  const tls = options.tls ? " -c ssl=on" : "";
  const server = await _server("test-pg-", `${tls}${settings}`);
  const { as, bin, data, port } = server;
  const secret = `test-${crypto.randomUUID()}`;
  const at = `:${secret}@127.0.0.1:${port}/postgres`;
  try {
    const superuser = options.hosted ? "supabase_admin" : "postgres";
    await as(
      `${bin}/initdb -D ${data} -A trust -U ${superuser} --no-sync >/dev/null`,
    );
    if (options.tls) {
      // server.crt and server.key in the data folder: PostgreSQL's defaults.
      await as(
        `openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost -keyout ${data}/server.key -out ${data}/server.crt 2>/dev/null && chmod 600 ${data}/server.key`,
      );
    }
    await server.db.start();
    if (options.hosted) {
      await _hostedShape(`postgresql://supabase_admin${at}`, secret);
    }
  } catch (error) {
    await server.db.destroy().catch(() => {});
    throw error;
  }
  return {
    ...server.db,
    url: `postgresql://postgres${at}`,
    ...(options.hosted
      ? {
        adminUrl: `postgresql://supabase_admin${at}`,
        authUrl: `postgresql://supabase_auth_admin${at}`,
      }
      : {}),
  };
}

/**
 * A point-in-time restore of `source` (a {@linkcode throwawayCluster}
 * without `tls` or `hosted`) as a throw-away cluster of its own, as a
 * project's restore or a failover to an asynchronous standby makes one: a
 * base backup taken now (`pg_basebackup`), recovered to its end and
 * promoted. The same system and data as `source` at this moment, on a new
 * timeline; its transaction ids go on from the backup's, so the ids
 * `source` hands out after this call are handed out again here.
 */
export async function restoredCopy(
  source: RestartableDb,
): Promise<RestartableDb> {
  const server = await _server("test-pg-restored-", "");
  const { as, bin, data, port } = server;
  const from = new URL(source.url);
  const url = source.url.replace(`:${from.port}/`, `:${port}/`);
  try {
    // The source's password is a secret for the log scan; trust
    // authentication ignores it, and it goes nowhere here.
    await as(
      `${bin}/pg_basebackup -h 127.0.0.1 -p ${from.port} -U ${from.username} -D ${data} -X stream --no-sync`,
    );
    // Targeted recovery (recovery.signal) to the backup's end, from its own
    // WAL (no archive: restore_command fails), then a new timeline.
    await Deno.writeTextFile(`${data}/recovery.signal`, "");
    await Deno.writeTextFile(
      `${data}/postgresql.auto.conf`,
      "restore_command = 'false'\nrecovery_target = 'immediate'\nrecovery_target_action = 'promote'\n",
      { append: true },
    );
    if (Deno.uid() === 0) await _run("chown", ["-R", "postgres", data]);
    await server.db.start();
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    try {
      for (let i = 0;; i++) {
        const [{ recovering }] = await sql`
          select pg_is_in_recovery() as recovering`;
        if (!recovering) break;
        if (i >= 300) throw new Error(`the restore was not promoted in 30 s`);
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      await sql.end();
    }
  } catch (error) {
    await server.db.destroy().catch(() => {});
    throw error;
  }
  return { ...server.db, url };
}

// A server's folder (made now, for the postgres user when run as root),
// with its data folder (made by the caller), socket, log and loopback port;
// and how the server there is started with `extra` settings, stopped, and
// deleted with its folder: the one home of every throw-away cluster's
// lifecycle. `db` has no URL yet: its caller knows the user and password.
async function _server(prefix: string, extra: string): Promise<{
  as: (line: string) => Promise<string>;
  bin: string;
  data: string;
  port: number;
  db: Omit<RestartableDb, "url">;
}> {
  const bin = _pgBin();
  if (!bin) throw new Error(clusterUnavailable()!);
  const root = Deno.uid() === 0;
  const dir = await Deno.makeTempDir({ prefix });
  const data = `${dir}/data`;
  const log = `${dir}/server.log`;
  const port = freePort();
  const as = (line: string) =>
    root ? _run("su", ["postgres", "-c", line]) : _run("sh", ["-c", line]);
  if (root) await _run("chown", ["postgres", dir]);
  let running = false;
  return {
    as,
    bin,
    data,
    port,
    db: {
      kind: "postgres",
      async start() {
        await as(
          `${bin}/pg_ctl -D ${data} -l ${log} -w -t 30 -o "-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300${extra}" start >/dev/null`,
        );
        running = true;
      },
      async stop() {
        await as(`${bin}/pg_ctl -D ${data} -m fast -w stop >/dev/null`);
        running = false;
      },
      async destroy() {
        if (running) {
          await as(`${bin}/pg_ctl -D ${data} -m immediate -w stop >/dev/null`)
            .catch(() => {});
          running = false;
        }
        await Deno.remove(dir, { recursive: true });
      },
    },
  };
}

// The roles, then the local auth schema made by supabase_auth_admin, then
// postgres's password (trust authentication ignores it; it is there for the
// log scan, as every cluster's).
async function _hostedShape(adminUrl: string, secret: string): Promise<void> {
  const sql = postgres(adminUrl, {
    max: 1,
    prepare: false,
    onnotice: () => {},
  });
  try {
    await sql.unsafe(HOSTED_ROLES_SQL);
    const auth = await Deno.readTextFile(
      new URL("../sql/10_auth.sql", import.meta.url),
    );
    await sql.begin(async (tx) => {
      await tx.unsafe("set local role supabase_auth_admin");
      await tx.unsafe(auth);
    });
    await sql.unsafe(`alter role postgres password '${secret}'`);
  } finally {
    await sql.end();
  }
}
