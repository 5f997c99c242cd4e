/**
 * Every Edge Function under `supabase/functions/`, served as `supabase
 * functions serve` serves it: each through its deployed entry (`index.ts`,
 * or `entrypoint` in `config.toml`) with its own `deno.json`, in a Deno
 * process of its own (`function_worker.ts`), started on its first
 * request and replaced when a file of the function or of a shared folder
 * (`_shared/`) has changed since, so every request runs the code as it is
 * now. A new folder with an `index.ts` is served without restarting the
 * stack.
 *
 * @module
 */
import { parse as parseToml } from "smol-toml";
import type { LocalFunction } from "./functions.ts";
import { WORKER_READY } from "./function_worker.ts";
import { parseProcStat } from "./proc_stat.ts";

/** Settings of {@linkcode FunctionHost}. */
export interface FunctionHostOptions {
  /** The project folder (holds `supabase/`). */
  projectDir: string;
  /** The functions' environment (as `functionEnv` builds it). */
  env: Map<string, string>;
  /** Where the functions' own output and the host's events go. */
  log: (line: string) => void;
}

interface Worker {
  readonly process: Deno.ChildProcess;
  /** {@linkcode _fingerprint} of the files it was started from. */
  readonly files: string;
  readonly ready: Promise<number>;
  inFlight: number;
  stale: boolean;
  /** Stopped for burning {@linkcode CPU_LIMIT_MS} without answering. */
  limited: boolean;
  /** Its CPU time when it last answered (or got busy), in ms. */
  cpuMark: number | null;
  watch?: ReturnType<typeof setInterval>;
}

/**
 * The Edge Runtime's CPU time hard limit, as `supabase functions serve`
 * sets it (2 s): a worker that burns that much CPU while serving, without
 * answering anything, is stopped and its requests answered 546
 * `WORKER_LIMIT`. So a function stuck in a busy loop cannot hang every
 * later call to it (its client gave up, the worker spins on). Counted from
 * the worker's last answer: under load it answers all along.
 */
export const CPU_LIMIT_MS = 2000;

const _WORKER_LIMIT = {
  code: "WORKER_LIMIT",
  message:
    "Worker failed to respond due to a resource limit (please check logs)",
};

// What the Edge Runtime answers when a function cannot start (a syntax
// error, a missing import, an entry that serves nothing).
const _BOOT_ERROR = {
  code: "BOOT_ERROR",
  message: "Worker failed to boot (please check logs)",
};

// What the Edge Runtime answers, with status 500 (as hosted), when a worker
// dies while answering (an uncaught error that ends it, `Deno.exit`).
const _WORKER_ERROR = {
  code: "WORKER_ERROR",
  message: "Function exited due to an error (please check logs)",
};

const _NAME = /^[A-Za-z0-9_-]+$/;

const _DENO_ENV = [
  "HOME",
  "PATH",
  "TMPDIR",
  "DENO_DIR",
  "DENO_CERT",
  "DENO_TLS_CA_STORE",
  "NPM_CONFIG_REGISTRY",
  "HTTP_PROXY",
  "HTTPS_PROXY",
  "NO_PROXY",
  "http_proxy",
  "https_proxy",
  "no_proxy",
  "SSL_CERT_FILE",
  "SSL_CERT_DIR",
];

/**
 * Serves the project's functions from worker processes and reloads them
 * when their files change.
 *
 * @example
 * ```ts
 * const host = new FunctionHost({ projectDir, env, log: console.log });
 * const fn = host.lookup("hello"); // undefined when there is no such function
 * const res = await fn?.handler(new Request("http://x/functions/v1/hello"));
 * await host.close();
 * ```
 */
export class FunctionHost {
  readonly #options: FunctionHostOptions;
  readonly #functionsDir: string;
  readonly #workers = new Map<string, Worker>();
  #closed = false;
  #config: { functions?: Record<string, Record<string, unknown>> } = {};

  constructor(options: FunctionHostOptions) {
    this.#options = options;
    this.#functionsDir = `${options.projectDir}supabase/functions/`;
  }

  /**
   * The function `name` as the gateway calls it, or `undefined` when
   * `supabase/functions/<name>/` has no entry (`_shared` and other folders
   * starting with `_` are never functions, as for the CLI).
   */
  lookup(name: string): LocalFunction | undefined {
    if (!_NAME.test(name) || name.startsWith("_")) return undefined;
    const settings = this.#settings(name);
    if (settings.enabled === false) return undefined;
    const entry = settings.entrypoint
      ? new URL(
        settings.entrypoint,
        `file://${this.#options.projectDir}supabase/`,
      )
        .pathname
      : `${this.#functionsDir}${name}/index.ts`;
    try {
      if (!Deno.statSync(entry).isFile) return undefined;
    } catch {
      return undefined;
    }
    return {
      verifyJwt: settings.verify_jwt ?? true,
      handler: (req) => this.#forward(name, entry, settings.import_map, req),
    };
  }

  /** Stops every worker. */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all(
      [...this.#workers.values()].map((w) => this.#kill(w)),
    );
    this.#workers.clear();
  }

  async #forward(
    name: string,
    entry: string,
    importMap: string | undefined,
    req: Request,
  ): Promise<Response> {
    // Checked on every request rather than by a file watcher, so the
    // first request after an edit runs the edited code, never the old one.
    const files = _fingerprint([
      `${this.#functionsDir}${name}`,
      ...this.#sharedDirs(),
    ]);
    let worker = this.#workers.get(name);
    if (worker && worker.files !== files) {
      this.#options.log(`[${name}] Files changed: reloading`);
      this.#retire(name, worker);
      worker = undefined;
    }
    if (!worker) {
      worker = this.#spawn(name, entry, importMap, files);
      this.#workers.set(name, worker);
    }
    worker.inFlight++;
    try {
      let port: number;
      try {
        port = await worker.ready;
      } catch {
        if (this.#workers.get(name) === worker) this.#workers.delete(name);
        return Response.json(_BOOT_ERROR, { status: 503 });
      }
      // Watched once started: a cold start's compiling is not serving.
      if (worker.watch === undefined) this.#watchCpu(name, worker);
      const url = new URL(req.url);
      // The function sees the path `supabase functions serve` gives it:
      // `/<name>` and whatever follows, with the query string.
      const rest = url.pathname.replace(
        /^\/(?:functions\/v1|api)\/[^/]+/,
        "",
      );
      const target = `http://127.0.0.1:${port}/${name}${rest}${url.search}`;
      try {
        return await fetch(target, {
          method: req.method,
          headers: req.headers,
          body: req.body,
          redirect: "manual",
          signal: req.signal,
        });
      } catch (error) {
        if (worker.limited) {
          return Response.json(_WORKER_LIMIT, { status: 546 });
        }
        // The client went away: the worker is fine and answers on (or is
        // stopped by the CPU limit if it is not).
        if (req.signal.aborted) return new Response(null, { status: 499 });
        // Not used again, and stopped once its other requests are answered:
        // a worker that failed one may still be running.
        this.#retire(name, worker);
        this.#options.log(
          `[${name}] The worker stopped while answering: ${
            error instanceof Error ? error.message : String(error)
          }`,
        );
        return Response.json(_WORKER_ERROR, { status: 500 });
      }
    } finally {
      worker.inFlight--;
      if (worker.inFlight === 0) {
        clearInterval(worker.watch);
        worker.watch = undefined;
      } else if (worker.watch !== undefined) {
        // An answer: the worker is making progress.
        worker.cpuMark = _cpuMs(worker.process.pid);
      }
      if (worker.stale && worker.inFlight === 0) void this.#kill(worker);
    }
  }

  // Stops the worker once it has burned CPU_LIMIT_MS since its last answer
  // while busy (Linux: /proc; elsewhere nothing is watched).
  #watchCpu(name: string, worker: Worker): void {
    worker.cpuMark = _cpuMs(worker.process.pid);
    if (worker.cpuMark === null) return;
    clearInterval(worker.watch);
    worker.watch = setInterval(() => {
      const now = _cpuMs(worker.process.pid);
      if (now === null || worker.cpuMark === null) return;
      if (now - worker.cpuMark <= CPU_LIMIT_MS) return;
      clearInterval(worker.watch);
      worker.limited = true;
      this.#options.log(
        `[${name}] CPU time limit reached (${CPU_LIMIT_MS} ms without an answer): worker stopped`,
      );
      this.#retire(name, worker);
      void this.#kill(worker); // now, though requests are in flight
    }, 100);
  }

  #spawn(
    name: string,
    entry: string,
    importMap: string | undefined,
    files: string,
  ): Worker {
    const config = this.#configFlag(name, importMap);
    const args = [
      "run",
      "--allow-all",
      "--no-prompt",
      "--no-lock",
      // As the project's deno.json: request.signal aborts only for a request
      // its client abandoned (no legacy-behaviour warning in the logs).
      "--unstable-no-legacy-abort",
      // npm: imports come from the project's node_modules, which `npm ci`
      // filled, so nothing is fetched while the stack runs; a function that
      // pins other packages (a new one from `supabase functions new`) gets
      // them from Deno's cache, fetched once, as `functions serve` does.
      npmImportsInstalled(
          config.slice(config.indexOf("=") + 1),
          this.#options.projectDir,
        )
        ? "--node-modules-dir=manual"
        : "--node-modules-dir=none",
      config,
      new URL("./function_worker.ts", import.meta.url).pathname,
      `file://${entry}`,
    ];
    const env: Record<string, string> = Object.fromEntries(this.#options.env);
    // Deno needs these to find its cache and reach registries (proxies,
    // certificates); nothing else of the stack's own environment reaches
    // a function, as on the platform.
    for (const key of _DENO_ENV) {
      const value = Deno.env.get(key);
      if (value !== undefined) env[key] = value;
    }
    env.NO_COLOR = "1";
    env.DENO_NO_UPDATE_CHECK = "1";
    const process = new Deno.Command(Deno.execPath(), {
      args,
      cwd: this.#options.projectDir,
      clearEnv: true,
      env,
      // Held open, never written: the worker exits when it closes.
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const log = this.#options.log;
    log(`[${name}] Starting ${entry.slice(this.#options.projectDir.length)}`);
    const ready = new Promise<number>((resolve, reject) => {
      void _lines(process.stdout, (line) => {
        if (line.startsWith(WORKER_READY)) {
          resolve(Number(line.slice(WORKER_READY.length)));
        } else log(`[${name}] ${line}`);
      });
      void _lines(process.stderr, (line) => log(`[${name}] ${line}`));
      void process.status.then(({ code }) => {
        // The end of the pipe that kept it alive.
        process.stdin.close().catch(() => {});
        reject(new Error(`exited with code ${code}`));
        if (!this.#closed && this.#workers.get(name)?.process === process) {
          this.#workers.delete(name);
          log(`[${name}] Stopped (exit code ${code})`);
        }
      });
    });
    ready.catch(() => {});
    return {
      process,
      files,
      ready,
      inFlight: 0,
      stale: false,
      limited: false,
      cpuMark: null,
    };
  }

  // As the CLI chooses a function's imports: `import_map` in config.toml,
  // else the function's own deno.json, else none (the project's root
  // deno.json, with the stack's own dev packages, is never used).
  #configFlag(name: string, importMap: string | undefined): string {
    if (importMap) {
      const path =
        new URL(importMap, `file://${this.#options.projectDir}supabase/`)
          .pathname;
      return path.endsWith(".json") && !/deno\.jsonc?$/.test(path)
        ? `--import-map=${path}`
        : `--config=${path}`;
    }
    for (const file of ["deno.json", "deno.jsonc"]) {
      const path = `${this.#functionsDir}${name}/${file}`;
      if (_exists(path)) return `--config=${path}`;
    }
    return "--no-config";
  }

  // Folders every function may import from: `_shared/` and its siblings
  // whose names start with `_`.
  #sharedDirs(): string[] {
    const dirs: string[] = [];
    for (const entry of Deno.readDirSync(this.#functionsDir)) {
      if (entry.isDirectory && entry.name.startsWith("_")) {
        dirs.push(`${this.#functionsDir}${entry.name}`);
      }
    }
    return dirs.sort();
  }

  // A retired worker finishes the requests it has, then stops.
  #retire(name: string, worker: Worker): void {
    if (this.#workers.get(name) === worker) this.#workers.delete(name);
    worker.stale = true;
    if (worker.inFlight === 0) void this.#kill(worker);
  }

  async #kill(worker: Worker): Promise<void> {
    clearInterval(worker.watch);
    try {
      worker.process.kill("SIGKILL");
    } catch {
      // Already gone.
    }
    await worker.process.status;
  }

  #settings(name: string): {
    enabled?: boolean;
    verify_jwt?: boolean;
    entrypoint?: string;
    import_map?: string;
  } {
    // Read on every request: a function added to config.toml (as
    // `supabase functions new` does) applies without a restart. A file
    // caught half-edited keeps the last settings that could be read.
    const path = `${this.#options.projectDir}supabase/config.toml`;
    try {
      this.#config = parseToml(Deno.readTextFileSync(path)) as {
        functions?: Record<string, Record<string, unknown>>;
      };
    } catch (error) {
      this.#options.log(
        `supabase/config.toml cannot be read (${
          error instanceof Error ? error.message.split("\n")[0] : error
        }): using the last settings read`,
      );
    }
    return this.#config.functions?.[name] ?? {};
  }
}

// What changes when any file under `dirs` is added, removed or edited:
// each file's path, modification time and size.
function _fingerprint(dirs: string[]): string {
  const parts: string[] = [];
  const walk = (dir: string) => {
    let entries;
    try {
      entries = [...Deno.readDirSync(dir)];
    } catch {
      return;
    }
    for (const entry of entries) {
      const path = `${dir}/${entry.name}`;
      if (entry.isDirectory) walk(path);
      else {
        try {
          const { mtime, size } = Deno.statSync(path);
          parts.push(`${path}@${mtime?.getTime()}:${size}`);
        } catch {
          // Removed while walking: the next request sees the new state.
        }
      }
    }
  };
  for (const dir of dirs) walk(dir);
  return parts.sort().join("\n");
}

/**
 * Whether every `npm:` import of a deno.json or import map at `path` is
 * installed in `projectDir`'s node_modules at exactly the pinned version
 * (a range or a missing package is not).
 *
 * @example
 * ```ts
 * npmImportsInstalled("supabase/functions/presence/deno.json", "./"); // true
 * ```
 */
export function npmImportsInstalled(path: string, projectDir: string): boolean {
  if (!path.endsWith(".json") && !path.endsWith(".jsonc")) return true;
  let imports: Record<string, string>;
  try {
    imports = JSON.parse(Deno.readTextFileSync(path)).imports ?? {};
  } catch {
    return true; // Unreadable: let Deno say what is wrong.
  }
  for (const specifier of Object.values(imports)) {
    const match = /^npm:(@?[^@/]+(?:\/[^@/]+)?)@([^/]+)/.exec(specifier);
    if (!specifier.startsWith("npm:")) continue;
    if (!match) return false;
    try {
      const installed = JSON.parse(
        Deno.readTextFileSync(
          `${projectDir}node_modules/${match[1]}/package.json`,
        ),
      ).version;
      if (installed !== match[2]) return false;
    } catch {
      return false;
    }
  }
  return true;
}

function _exists(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

async function _lines(
  stream: ReadableStream<Uint8Array>,
  onLine: (line: string) => void,
): Promise<void> {
  let buffer = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    buffer += chunk;
    let at;
    while ((at = buffer.indexOf("\n")) !== -1) {
      onLine(buffer.slice(0, at));
      buffer = buffer.slice(at + 1);
    }
  }
  if (buffer) onLine(buffer);
}

// A process's CPU time in ms (Linux /proc, 10 ms a tick); null elsewhere or
// once it is gone.
function _cpuMs(pid: number): number | null {
  try {
    return parseProcStat(Deno.readTextFileSync(`/proc/${pid}/stat`)).ticks *
      10;
  } catch {
    return null;
  }
}
