/**
 * Applies `supabase/migrations` and `supabase/seed.sql` with the real
 * Supabase CLI (`supabase db push --remote=<url> --include-seed`), so the
 * local stack runs exactly what deploys. The CLI records what it applied in
 * `supabase_migrations`, so a restart on the same data applies nothing twice.
 *
 * @module
 */
import { fileURLToPath } from "node:url";

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

/**
 * Pushes migrations and seed to the database at `url`; throws with the
 * CLI's output (credentials removed) when it fails.
 *
 * @example
 * ```ts
 * await pushMigrations("postgresql://postgres:postgres@127.0.0.1:54322/postgres");
 * ```
 */
export async function pushMigrations(url: string): Promise<string> {
  const { code, stdout, stderr } = await new Deno.Command(supabaseCli(), {
    args: [
      "db",
      "push",
      `--remote=${url}`,
      "--include-seed",
      "--yes",
      "--workdir",
      PROJECT_DIR,
    ],
    cwd: PROJECT_DIR,
    // Loopback only: no TLS to negotiate.
    env: { DO_NOT_TRACK: "1", SUPABASE_YES: "1", PGSSLMODE: "disable" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(stdout) +
    new TextDecoder().decode(stderr);
  const output = text.replaceAll(url, "<database>");
  if (code !== 0) {
    throw new Error(`Supabase CLI "db push" failed (exit ${code}):\n${output}`);
  }
  return output;
}
