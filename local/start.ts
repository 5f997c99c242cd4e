/**
 * `npm start` / `deno task start`: runs the Docker-free local stack until
 * Ctrl-C.
 *
 * Settings (flags, or environment variables):
 *   --port / LOCAL_API_PORT        API port (54321)
 *   --db-port / LOCAL_DB_PORT      PGlite port (54322)
 *   --data-dir / LOCAL_DATA_DIR    PGlite data and signing key (.local/data)
 *   --database-url / DATABASE_URL  use this PostgreSQL instead of PGlite
 *   --seed / LOCAL_SEED=1          write the local fixture even into an
 *                                  existing public.usuarios
 *
 * Any failure prints one line, "npm start failed: <what>. <what to do>.",
 * and exits 1.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { SEED_IDENTITIES } from "./fixture.ts";
import { DEFAULT_DATA_DIR, type Stack, startStack } from "./stack.ts";
import { StartError } from "./start_error.ts";

const _USAGE =
  'Flags: --port <n>, --db-port <n>, --data-dir <path>, --database-url <url>, --seed (README, "Settings of the local stack")';

let stack: Stack;
try {
  stack = await _start();
} catch (error) {
  // One line that says what failed and what to do; the stack trace helps
  // nobody who typed npm start.
  console.error(`npm start failed: ${_line(error)}`);
  Deno.exit(1);
}

async function _start(): Promise<Stack> {
  let values;
  try {
    ({ values } = parseArgs({
      args: Deno.args,
      options: {
        port: { type: "string" },
        "db-port": { type: "string" },
        "data-dir": { type: "string" },
        "database-url": { type: "string" },
        seed: { type: "boolean" },
      },
    }));
  } catch (error) {
    throw new StartError(
      error instanceof Error ? error.message : String(error),
      _USAGE,
    );
  }
  return await startStack({
    apiPort: _port(
      "--port",
      values.port ?? Deno.env.get("LOCAL_API_PORT"),
      54321,
    ),
    dbPort: _port(
      "--db-port",
      values["db-port"] ?? Deno.env.get("LOCAL_DB_PORT"),
      54322,
    ),
    dataDir: values["data-dir"] ?? Deno.env.get("LOCAL_DATA_DIR") ??
      DEFAULT_DATA_DIR,
    databaseUrl: values["database-url"] ?? Deno.env.get("DATABASE_URL"),
    seed: values.seed || _flagEnv("LOCAL_SEED") ? true : undefined,
    log: (line) => console.log(line.trimEnd()),
  });
}

// A bad value is an error naming the setting, never a silent default.
function _port(
  flag: string,
  value: string | undefined,
  fallback: number,
): number {
  if (value === undefined || value === "") return fallback;
  const port = Number(value);
  if (!/^\d+$/.test(value.trim()) || port > 65535) {
    throw new StartError(
      `${flag} must be a port number from 0 to 65535, not "${value}"`,
      "Pass a number (0 picks a free port)",
    );
  }
  return port;
}

function _flagEnv(name: string): boolean {
  const value = Deno.env.get(name)?.trim().toLowerCase();
  if (
    value === undefined || value === "" || value === "0" || value === "false"
  ) {
    return false;
  }
  if (value === "1" || value === "true") return true;
  throw new StartError(
    `${name} must be 1, true, 0 or false, not "${Deno.env.get(name)}"`,
    "Set it to 1 to write the local fixture",
  );
}

function _line(error: unknown): string {
  if (error instanceof StartError) return error.line();
  const text = error instanceof Error ? error.message : String(error);
  return `${
    text.split("\n")[0]
  }. Run it again; if it keeps failing, report this line`;
}

// The same fields `supabase status` prints. These are the well-known local
// development keys, not secrets of any deployed project.
console.log(`
Local stack is running (${stack.database}).

         API URL: ${stack.apiUrl}
   Functions URL: ${stack.apiUrl}/functions/v1
       Demo page: ${stack.apiUrl}/demo/
          DB URL: ${stack.dbUrl}
      JWT secret: ${stack.jwtSecret}
 Publishable key: ${stack.publishableKey}
      Secret key: ${stack.secretKey}
        anon key: ${stack.anonKey}
service_role key: ${stack.serviceRoleKey}

For a shell (the README's examples use these):
  export API_URL=${stack.apiUrl}
  export PUBLISHABLE_KEY=${stack.publishableKey}
  export SECRET_KEY=${stack.secretKey}
  export ANON_KEY=${stack.anonKey}
  export SERVICE_ROLE_KEY=${stack.serviceRoleKey}

${
  stack.seeded
    ? `Seeded users (email / password):\n${
      SEED_IDENTITIES.map((u) =>
        `  ${u.email.padEnd(24)} ${u.password.padEnd(18)} ${u.role}`
      ).join("\n")
    }`
    : "No local fixture: public.usuarios existed before this stack (--seed writes it)."
}

Press Ctrl-C to stop.`);

let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  console.log("Stopping the local stack...");
  await stack.close();
  Deno.exit(0);
};
Deno.addSignalListener("SIGINT", stop);
Deno.addSignalListener("SIGTERM", stop);
