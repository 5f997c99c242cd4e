/**
 * Applies `supabase/migrations` and `supabase/seed.sql` with the real
 * Supabase CLI (`supabase db push --remote=<url> --include-seed`), so the
 * local stack runs exactly what deploys. The CLI records what it applied in
 * `supabase_migrations`, so a restart on the same data applies nothing twice.
 *
 * The CLI sends each migration file as one pipeline of statements, so the
 * files that build an index `CONCURRENTLY` run here exactly as on a hosted
 * `db push`: the build is the first statement of its file, the only place
 * in a pipeline where it may run outside a transaction (PGlite runs them
 * too; docs/adoption.md, "Online-safe migrations").
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import postgres from "postgres";
import { isLoopbackHost } from "../supabase/functions/_shared/db.ts";
import { StartError } from "./start_error.ts";

/** The project folder that holds `supabase/`. */
export const PROJECT_DIR = fileURLToPath(new URL("../", import.meta.url));

/**
 * The Supabase CLI to run: `SUPABASE_CLI` when set, else the one `npm ci`
 * installed, else `supabase` on the PATH.
 */
export function supabaseCli(): string {
  const configured = Deno.env.get("SUPABASE_CLI");
  if (configured) return configured;
  const local = `${PROJECT_DIR}node_modules/.bin/supabase`;
  try {
    Deno.statSync(local);
    return local;
  } catch {
    return "supabase";
  }
}

/** Options of {@linkcode pushMigrations}. */
export interface PushOptions {
  /** Also apply `supabase/seed.sql` (default true). */
  includeSeed?: boolean;
  /**
   * Also apply migrations dated before the newest one the database has
   * applied (`--include-all`; default false).
   */
  includeAll?: boolean;
}

/**
 * Pushes migrations (and, unless told not to, the seed) to the database at
 * `url`; throws a {@linkcode StartError} naming the refused statement, with
 * the CLI's whole output (credentials removed) as its `detail`, when it
 * fails.
 *
 * @example
 * ```ts
 * await pushMigrations("postgresql://postgres:postgres@127.0.0.1:54322/postgres");
 * ```
 */
export async function pushMigrations(
  url: string,
  options: PushOptions = {},
): Promise<string> {
  const { code, stdout, stderr } = await new Deno.Command(supabaseCli(), {
    args: [
      "db",
      "push",
      `--remote=${url}`,
      ...(options.includeSeed ?? true ? ["--include-seed"] : []),
      ...(options.includeAll ? ["--include-all"] : []),
      "--yes",
      "--workdir",
      PROJECT_DIR,
    ],
    cwd: PROJECT_DIR,
    env: {
      DO_NOT_TRACK: "1",
      SUPABASE_YES: "1",
      // A database on this machine has no TLS to negotiate; any other keeps
      // its URL's sslmode (default: prefer), never sent in clear by us.
      ...(isLoopbackUrl(url) ? { PGSSLMODE: "disable" } : {}),
    },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(stdout) +
    new TextDecoder().decode(stderr);
  const output = text.replaceAll(url, "<database>");
  if (code !== 0) throw _pushError(code, output);
  return output;
}

/**
 * Whether `url` (a database's, or an API's) names this machine: a loopback
 * host (`localhost`, `127.x.x.x`, `::1`) or a Unix socket (`?host=/path`).
 *
 * @example
 * ```ts
 * isLoopbackUrl("postgresql://postgres@127.0.0.1:5432/postgres"); // true
 * isLoopbackUrl("postgresql://postgres@db.abc.supabase.co:5432/postgres"); // false
 * ```
 */
export function isLoopbackUrl(url: string): boolean {
  // Read before parsing: a socket URL may have no host (`u@/db?host=/run`),
  // which URL refuses.
  const socket = /[?&]host=([^&]*)/.exec(url);
  if (socket) return decodeURIComponent(socket[1]).startsWith("/");
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return false;
  }
  const host = parsed.hostname.replace(/^\[|\]$/g, "");
  // No host is libpq's local socket, in a postgres URL only: a string with
  // no scheme ("db.x.supabase.co:5432/postgres") parses with its host as
  // the scheme and an empty host.
  if (host === "") return /^postgres(ql)?:$/.test(parsed.protocol);
  return isLoopbackHost(host);
}

/**
 * Whether the local fixture (the rows of `supabase/seed.sql` and the seeded
 * identities, whose passwords the README prints) belongs in the database at
 * `url`: never on another machine (a hosted project, a shared server);
 * there, it does when `public.usuarios` does not exist yet (the migrations
 * are about to create it) or when the CLI already applied the seed once (a
 * database the stack made). A `public.usuarios` that exists without the
 * seed ever applied is someone's data: an existing project adopted, or one
 * where the migrations were pushed without the seed. Checked before
 * pushing, so a second start on an adopted database decides the same.
 *
 * @example
 * ```ts
 * const seed = await fixtureBelongs(url);
 * await pushMigrations(url, { includeSeed: seed });
 * ```
 */
export async function fixtureBelongs(url: string): Promise<boolean> {
  if (!isLoopbackUrl(url)) return false;
  const sql = postgres(url, { max: 1, prepare: false, onnotice: () => {} });
  try {
    const [row] = await sql<{ usuarios: boolean; seeded: boolean }[]>`
      select to_regclass('public.usuarios') is not null as usuarios,
             to_regclass('supabase_migrations.seed_files') is not null as seeded
    `;
    if (!row.usuarios) return true;
    if (!row.seeded) return false;
    const [seed] = await sql<{ applied: boolean }[]>`
      select exists (
        select 1 from supabase_migrations.seed_files
        where path = 'supabase/seed.sql'
      ) as applied
    `;
    return seed.applied;
  } finally {
    await sql.end();
  }
}

// The CLI prints which file it was applying, then the server's error line
// (`ERROR: ... (SQLSTATE 42703)`); those two say what failed.
function _pushError(code: number, output: string): StartError {
  const lines = output.split("\n").map((l) => l.trim());
  const history = _historyError(output);
  if (history) return new StartError(history.message, history.hint, output);
  const error = lines.find((l) => l.startsWith("ERROR:"));
  const file = lines.findLast((l) =>
    /^(Applying migration|Seeding data from) /.test(l)
  )?.replace(/^(Applying migration|Seeding data from) /, "").replace(
    /\.\.\.$/,
    "",
  );
  const seed = file?.endsWith("seed.sql") ?? false;
  if (!error) {
    // The CLI's own refusal: its first line after the target says what.
    const target = lines.findIndex((l) => l.startsWith("Target:"));
    const said = lines.slice(target + 1).find((l) => l !== "") ??
      lines.findLast((l) => l !== "") ?? "no output";
    return new StartError(
      `Supabase CLI "db push" failed (exit ${code}): ${
        said.replace(/\.$/, "")
      }`,
      "Its whole output is in <data dir>/logs/stack.log",
      output,
    );
  }
  return new StartError(
    `The database refused ${file ?? "the migrations"}: ${
      error.replace(/^ERROR:\s*/, "")
    }`,
    seed
      ? "The fixture needs this project's usuarios columns; start without --seed, or run supabase/upgrades/add_optional_columns.sql first"
      : "Fix the table or the data it names (see docs/adoption.md); nothing of that migration was applied",
    output,
  );
}

// The two migration histories a team meets every week, which the CLI
// refuses before applying anything: a database that applied migrations this
// checkout lacks (another branch), and migration files dated before the
// newest one applied (a teammate's, merged later).
function _historyError(
  output: string,
): { message: string; hint: string } | null {
  if (/Remote migration versions not found in local migrations/.test(output)) {
    const versions = /repair --status reverted ([\d ]+)/.exec(output)?.[1]
      .trim() ?? "?";
    return {
      message:
        `The database has applied migrations this checkout does not have (${versions})`,
      hint:
        `Check out the branch that has them, or start the local database over with npm run reset; for a database you passed in, supabase migration repair --status reverted ${versions} --remote=<url>`,
    };
  }
  if (
    /Found local migration files to be inserted before the last/.test(output)
  ) {
    const files = [...output.matchAll(/supabase\/migrations\/(\S+\.sql)/g)]
      .map((m) => m[1]);
    return {
      message:
        `Migrations dated before the newest one the database has applied are not applied yet (${
          files.join(", ") || "?"
        })`,
      hint:
        "Start the local database over with npm run reset; for a database you passed in, apply them with supabase db push --include-all --remote=<url>",
    };
  }
  return null;
}
