/**
 * A lock on a data folder, so two stacks never open the same PGlite data
 * (PGlite has no lock of its own, and two writers corrupt it). The lock is
 * a file, `stack.json`, holding the owner's process id and what `npm run
 * status` prints; a file left by a stack that died is taken over.
 *
 * @module
 */
import { StartError } from "./start_error.ts";

/** What a running stack records in its data folder. */
export interface StackInfo {
  pid: number;
  database: "pglite" | "postgres";
  apiUrl: string;
  dbUrl: string;
  /** The Mailpit-compatible mail API, if served (absent before it was). */
  mailUrl?: string | null;
  startedAt: string;
}

/** A held lock. */
export interface DataLock {
  /** Records what the stack serves, once it does. */
  record(info: Omit<StackInfo, "pid" | "startedAt">): Promise<void>;
  /** Lets the folder go. */
  release(): Promise<void>;
}

/**
 * Takes the lock on `dataDir`, or throws a {@linkcode StartError} naming
 * the process that holds it.
 */
export async function lockDataDir(dataDir: string): Promise<DataLock> {
  const path = _path(dataDir);
  const processStart = await _processStart(Deno.pid);
  const mine = JSON.stringify({ pid: Deno.pid, processStart });
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      await Deno.writeTextFile(path, mine, { createNew: true, mode: 0o600 });
      return _held(path, processStart);
    } catch (error) {
      if (!(error instanceof Deno.errors.AlreadyExists)) throw error;
    }
    const holder = await readStackInfo(dataDir);
    if (holder) {
      throw new StartError(
        `The data folder ${dataDir} is in use by another local stack (process ${holder.pid}, ${
          holder.apiUrl || "starting"
        })`,
        "Stop that one (Ctrl-C in its terminal), or pass --data-dir <another folder>",
      );
    }
    // Left by a stack that is gone: take it over.
    await Deno.remove(path).catch(() => {});
  }
  throw new StartError(
    `Could not lock the data folder ${dataDir}`,
    "Run it again",
  );
}

/**
 * What the stack running on `dataDir` recorded, or `null` when none runs
 * there (no lock file, or its process is gone).
 */
export async function readStackInfo(
  dataDir: string,
): Promise<Partial<StackInfo> & { pid: number } | null> {
  let info: Partial<StackInfo> & { pid: number; processStart?: string | null };
  try {
    info = JSON.parse(await Deno.readTextFile(_path(dataDir)));
  } catch {
    return null;
  }
  if (!Number.isInteger(info.pid) || !(await _alive(info.pid))) return null;
  // A file left by a stack that died (a closed terminal, a reboot) whose
  // process id another process now has: the same id, another start.
  if (
    info.processStart && info.processStart !== await _processStart(info.pid)
  ) {
    return null;
  }
  return info;
}

// When process `pid` started, in clock ticks since boot (Linux's
// /proc/<pid>/stat, field 22): with its id, it names one process for good.
// `null` where that is not known (other systems).
async function _processStart(pid: number): Promise<string | null> {
  if (Deno.build.os !== "linux") return null;
  try {
    const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
    // The name (field 2) is in parentheses and may hold spaces.
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19] ?? null;
  } catch {
    return null;
  }
}

function _held(path: string, processStart: string | null): DataLock {
  const startedAt = new Date().toISOString();
  return {
    // Readable by its owner only: a database URL passed in holds a password.
    record: (info) =>
      Deno.writeTextFile(
        path,
        JSON.stringify(
          { pid: Deno.pid, processStart, startedAt, ...info },
          null,
          2,
        ),
        { mode: 0o600 },
      ),
    release: () => Deno.remove(path).catch(() => {}),
  };
}

function _path(dataDir: string): string {
  return `${dataDir}/stack.json`;
}

// Linux shows live processes in /proc; elsewhere `kill -0` asks whether
// the process exists without signalling it.
async function _alive(pid: number): Promise<boolean> {
  if (Deno.build.os === "linux") {
    try {
      await Deno.stat(`/proc/${pid}`);
      return true;
    } catch {
      return false;
    }
  }
  try {
    const { success } = await new Deno.Command("kill", {
      args: ["-0", String(pid)],
      stdout: "null",
      stderr: "null",
    }).output();
    return success;
  } catch {
    return false;
  }
}
