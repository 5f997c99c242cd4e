/**
 * `npm start` / `deno task start`: runs the Docker-free local stack until
 * Ctrl-C.
 *
 * Settings (flags, or environment variables):
 *   --port / LOCAL_API_PORT        API port (54321)
 *   --db-port / LOCAL_DB_PORT      PGlite port (54322)
 *   --data-dir / LOCAL_DATA_DIR    PGlite data and signing key (.local/data)
 *   --database-url / DATABASE_URL  use this PostgreSQL instead of PGlite
 *
 * @module
 */
import { parseArgs } from "node:util";
import { SEED_IDENTITIES } from "./fixture.ts";
import { DEFAULT_DATA_DIR, startStack } from "./stack.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    port: { type: "string" },
    "db-port": { type: "string" },
    "data-dir": { type: "string" },
    "database-url": { type: "string" },
  },
});

const stack = await startStack({
  apiPort: Number(values.port ?? Deno.env.get("LOCAL_API_PORT") ?? 54321),
  dbPort: Number(values["db-port"] ?? Deno.env.get("LOCAL_DB_PORT") ?? 54322),
  dataDir: values["data-dir"] ?? Deno.env.get("LOCAL_DATA_DIR") ??
    DEFAULT_DATA_DIR,
  databaseUrl: values["database-url"] ?? Deno.env.get("DATABASE_URL"),
  log: (line) => console.log(line.trimEnd()),
});

// The same fields `supabase status` prints. These are the well-known local
// development keys, not secrets of any deployed project.
console.log(`
Local stack is running (${stack.database}).

         API URL: ${stack.apiUrl}
   Functions URL: ${stack.apiUrl}/functions/v1
          DB URL: ${stack.dbUrl}
      JWT secret: ${stack.jwtSecret}
        anon key: ${stack.anonKey}
service_role key: ${stack.serviceRoleKey}

Seeded users (email / password):
${
  SEED_IDENTITIES.map((u) =>
    `  ${u.email.padEnd(24)} ${u.password.padEnd(18)} ${u.role}`
  ).join("\n")
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
