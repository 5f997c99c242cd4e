/**
 * A throw-away database for tests: a fresh database on the PostgreSQL named
 * by `TEST_DATABASE_URL` when set, otherwise an in-memory PGlite served on a
 * free loopback port.
 *
 * @module
 */
import postgres from "postgres";
import { startPgliteServer } from "../db/pglite_server.ts";

/** A database that exists until {@linkcode TestDatabase.close} is called. */
export interface TestDatabase {
  /** Connection string of the fresh database. */
  readonly url: string;
  /** `"pglite"` or `"postgres"`. */
  readonly kind: "pglite" | "postgres";
  /** Drops the database (PostgreSQL) or stops the server (PGlite). */
  close(): Promise<void>;
}

/**
 * Creates an empty database. Nothing is bootstrapped or migrated.
 *
 * @example
 * ```ts
 * const db = await createTestDatabase();
 * try {
 *   // use db.url
 * } finally {
 *   await db.close();
 * }
 * ```
 */
export async function createTestDatabase(): Promise<TestDatabase> {
  const admin = Deno.env.get("TEST_DATABASE_URL");
  if (!admin) {
    const server = await startPgliteServer({ port: 0 });
    return { url: server.url, kind: "pglite", close: () => server.close() };
  }
  const name = `t_${crypto.randomUUID().replaceAll("-", "").slice(0, 16)}`;
  const sql = postgres(admin, { max: 1, prepare: false, onnotice: () => {} });
  await sql.unsafe(`create database ${name}`);
  await sql.end();
  const url = new URL(admin);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    kind: "postgres",
    async close() {
      const drop = postgres(admin, {
        max: 1,
        prepare: false,
        onnotice: () => {},
      });
      try {
        await drop.unsafe(`drop database if exists ${name} with (force)`);
      } finally {
        await drop.end();
      }
    },
  };
}
