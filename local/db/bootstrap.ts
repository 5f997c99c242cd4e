/**
 * Prepares a bare Postgres (PGlite or a plain PostgreSQL) so that the
 * project's migrations run on it unchanged: it creates, only where missing,
 * what a Supabase database already has (roles, the `auth` schema the local
 * Auth stand-in stores identities in, `auth.uid()`).
 *
 * @module
 */
import postgres from "postgres";

const _SQL_DIR = new URL("../sql/", import.meta.url);

/**
 * Runs every `local/sql/*.sql` file in name order. Each file is idempotent.
 *
 * @example
 * ```ts
 * await bootstrapDatabase("postgresql://postgres:postgres@127.0.0.1:54322/postgres");
 * ```
 */
export async function bootstrapDatabase(url: string): Promise<void> {
  const files = [...Deno.readDirSync(_SQL_DIR)]
    .filter((e) => e.isFile && e.name.endsWith(".sql"))
    .map((e) => e.name)
    .sort();
  const sql = postgres(url, { max: 1, prepare: false, onnotice: () => {} });
  try {
    for (const name of files) {
      await sql.unsafe(await Deno.readTextFile(new URL(name, _SQL_DIR)));
    }
  } finally {
    await sql.end();
  }
}
