/**
 * `npm start` / `deno task start`: runs the Docker-free local stack until
 * Ctrl-C.
 *
 * Settings: see {@linkcode USAGE} (`npm start -- --help`).
 *
 * Any failure prints one line, "npm start failed: <what>. <what to do>.",
 * and exits 1.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { SEED_IDENTITIES } from "./fixture.ts";
import {
  configPorts,
  DEFAULT_DATA_DIR,
  type Stack,
  startStack,
} from "./stack.ts";
import { StartError } from "./start_error.ts";
import { statusText } from "./status.ts";

/** What `npm start -- --help` prints. */
export const USAGE = `Usage: npm start [-- <flags>]

Runs the Docker-free local stack (Auth, functions, PGlite) until Ctrl-C.

Flags (or environment variables):
  --port <n>            LOCAL_API_PORT      API port (config.toml [api] port, 54321;
                                            0 picks a free one)
  --db-port <n>         LOCAL_DB_PORT       PGlite port (config.toml [db] port, 54322)
  --mail-port <n>       LOCAL_MAIL_PORT     Mailpit-compatible mail API (config.toml
                                            [local_smtp] port, 54324; none with
                                            [local_smtp] enabled = false)
  --data-dir <path>     LOCAL_DATA_DIR      PGlite data and signing key (.local/data)
  --database-url <url>  LOCAL_DATABASE_URL  use this PostgreSQL instead of PGlite
                                            (prefer the variable: a flag shows in
                                            your shell history; DATABASE_URL is
                                            ignored)
  --seed                LOCAL_SEED=1        write the local fixture even into an
                                            existing public.usuarios, or a
                                            database on another machine
  --reset                                   delete the local PGlite database first
                                            (npm run reset)
  --help                                    this text

Also: npm run status (URLs and keys of the running stack), npm test.
Logs: this terminal, and <data dir>/logs/stack.log (.local/data/logs/stack.log).`;

const _USAGE =
  "Flags: --port <n>, --db-port <n>, --mail-port <n>, --data-dir <path>, --database-url <url>, --seed, --reset (npm start -- --help)";

if (Deno.args.includes("--help") || Deno.args.includes("-h")) {
  console.log(USAGE);
  Deno.exit(0);
}

// Every line goes to the terminal and to one file in the data folder,
// `<data dir>/logs/stack.log`, kept across restarts and resets (the
// README's "Logs" section points here).
let logFile: Deno.FsFile | null = null;
const encoder = new TextEncoder();
function log(line: string): void {
  console.log(line.trimEnd());
  logOnly(line);
}

/** Writes a line to the log file only (output too long for the terminal). */
function logOnly(line: string): void {
  logFile?.writeSync(
    encoder.encode(`${new Date().toISOString()} ${line.trimEnd()}\n`),
  );
}

let stack: Stack;
try {
  stack = await _start();
} catch (error) {
  // One line that says what failed and what to do; the stack trace helps
  // nobody who typed npm start.
  const failed = `npm start failed: ${_line(error)}`;
  console.error(failed);
  // In the log file too (where it was opened: a failure before, such as a
  // flag it does not know, has none), with the output behind it (the CLI's,
  // credentials removed), which goes to the log file only.
  logOnly(failed);
  if (error instanceof StartError && error.detail) logOnly(error.detail);
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
        "mail-port": { type: "string" },
        "data-dir": { type: "string" },
        "database-url": { type: "string" },
        seed: { type: "boolean" },
        reset: { type: "boolean" },
      },
    }));
  } catch (error) {
    throw new StartError(
      error instanceof Error ? error.message : String(error),
      _USAGE,
    );
  }
  const dataDir = values["data-dir"] ?? Deno.env.get("LOCAL_DATA_DIR") ??
    DEFAULT_DATA_DIR;
  await Deno.mkdir(`${dataDir}/logs`, { recursive: true });
  logFile = await Deno.open(`${dataDir}/logs/stack.log`, {
    append: true,
    create: true,
  });
  const ports = configPorts();
  return await startStack({
    apiPort: _port(
      "--port",
      values.port ?? Deno.env.get("LOCAL_API_PORT"),
      ports.api,
    ),
    dbPort: _port(
      "--db-port",
      values["db-port"] ?? Deno.env.get("LOCAL_DB_PORT"),
      ports.db,
    ),
    mailPort: ports.mail === null ? null : _port(
      "--mail-port",
      values["mail-port"] ?? Deno.env.get("LOCAL_MAIL_PORT"),
      ports.mail,
    ),
    dataDir,
    databaseUrl: values["database-url"] ?? _databaseUrl(log),
    seed: values.seed || _flagEnv("LOCAL_SEED") ? true : undefined,
    reset: values.reset,
    functions: "workers",
    log,
  });
}

// LOCAL_DATABASE_URL, not DATABASE_URL: that name is set in many shells for
// another app (Prisma, Rails, Django, a devcontainer), and the stack pushes
// migrations into the database it names without asking.
function _databaseUrl(log: (line: string) => void): string | undefined {
  const url = Deno.env.get("LOCAL_DATABASE_URL")?.trim() || undefined;
  if (url === undefined && Deno.env.get("DATABASE_URL")) {
    log(
      "DATABASE_URL is set in this shell and ignored: the stack uses PGlite. To use that database, pass it as LOCAL_DATABASE_URL (or --database-url)",
    );
  }
  return url;
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

console.log(`
${statusText(stack)}

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
// A closed terminal: stop as cleanly, and let the data folder go.
if (Deno.build.os !== "windows") Deno.addSignalListener("SIGHUP", stop);
