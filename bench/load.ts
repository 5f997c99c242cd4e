/**
 * Load generators: wrk (Debian's) for closed-loop runs at a fixed
 * concurrency, with a Lua script that rotates the users' tokens, and a
 * small Deno client (load_worker.ts, in its own process) for what wrk
 * cannot do: a fixed count (each token once), a body per token, and the
 * open-loop fixed-rate pass (Debian's wrk is not wrk2).
 *
 * Every run targets a loopback URL and is bounded in time.
 *
 * @module
 */

/** CPU use over a run, per served request (bench/measure.ts reads it). */
export interface CpuUse {
  /** The bench process: gateway, functions, Auth stand-in. */
  denoMsPerRequest: number;
  /** The cluster's processes serving the bench database. */
  postgresMsPerRequest: number;
  /** Share of all cores busy, in percent (load generator included). */
  machineBusyPercent: number;
  /** Share of all cores used by other work (other sessions): noise, not cost. */
  otherBusyPercent: number;
}

/** Latency percentiles in milliseconds. */
export interface Latency {
  p50: number;
  p95: number;
  p99: number;
  max: number;
  mean: number;
}

/** The outcome of one load run. */
export interface LoadResult {
  /** `"wrk"`, `"pgbench"` or `"deno-client"`. */
  tool: string;
  concurrency: number;
  /** Measured duration in seconds. */
  durationS: number;
  /** Served requests (answered 2xx), or pgbench's transactions. */
  requests: number;
  /** Requests per second. */
  rps: number;
  latencyMs: Latency;
  /** Failed requests: connection errors, timeouts, non-2xx answers. */
  errors: number;
  /** Error kinds, for the JSON. */
  errorKinds: Record<string, number>;
  /** CPU use over the run, where measured (bench/measure.ts). */
  cpu?: CpuUse;
}

// Each thread builds every request once in init(), so request() only picks
// the next one: the generator costs as little CPU as it can on a machine
// the server shares. Threads start half the list apart so that concurrent
// requests belong to different users.
const _LUA = `
local reqs = {}
local n = 0
local idx = 0
local threads = 0
function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end
function init(args)
  local body = args[2] or '{"state":"online"}'
  local list = {}
  for line in io.lines(args[1]) do
    if #line > 0 then list[#list + 1] = line end
  end
  if #list == 0 then list[1] = "none" end
  for i, t in ipairs(list) do
    reqs[i] = wrk.format("POST", nil, {
      ["Authorization"] = "Bearer " .. t,
      ["Content-Type"] = "application/json",
    }, body)
  end
  n = #reqs
  idx = ((tid or 0) * math.floor(n / 2)) % n
end
function request()
  idx = idx % n + 1
  return reqs[idx]
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRK_JSON {"requests":%d,"durationS":%f,' ..
    '"errorKinds":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latencyMs":{"p50":%f,"p95":%f,"p99":%f,"max":%f,"mean":%f}}\\n',
    summary.requests, summary.duration / 1e6, e.connect, e.read, e.write,
    e.status, e.timeout, latency:percentile(50) / 1e3,
    latency:percentile(95) / 1e3, latency:percentile(99) / 1e3,
    latency.max / 1e3, latency.mean / 1e3))
end
`;

// Aborted when the run is undone (bench/main.ts, on Ctrl-C or SIGTERM): a
// signal sent to this process alone would otherwise leave wrk, pgbench and
// the Deno client running until their own time limit.
let _stop = new AbortController();

/** Kills every load generator still running (SIGTERM); later ones run. */
export function stopLoads(): void {
  _stop.abort();
  _stop = new AbortController();
}

/** A child process's signal: its time limit, or {@linkcode stopLoads}. */
export function childSignal(limitS: number): AbortSignal {
  return AbortSignal.any([AbortSignal.timeout(limitS * 1000), _stop.signal]);
}

/**
 * `name --version`'s first line; throws `missing` when it is not installed
 * (a program not found fails the spawn itself, synchronously: hence `try`,
 * not the promise's `catch`).
 */
export async function toolVersion(
  name: string,
  missing: string,
): Promise<string> {
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command(name, {
      args: ["--version"],
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
  } catch {
    throw new Error(missing);
  }
  const text = new TextDecoder().decode(out.stdout) +
    new TextDecoder().decode(out.stderr);
  return text.split("\n")[0].trim();
}

/**
 * Runs wrk for `durationS` at `concurrency` connections (2 threads at
 * most: the machine has 2 cores and the server needs them too), rotating
 * through the tokens in `tokensFile` (one per line).
 */
export async function runWrk(o: {
  url: string;
  tokensFile: string;
  concurrency: number;
  durationS: number;
  body?: string;
}): Promise<LoadResult> {
  assertLoopback(o.url);
  const script = await Deno.makeTempFile({ suffix: ".lua" });
  try {
    await Deno.writeTextFile(script, _LUA);
    const out = await new Deno.Command("wrk", {
      args: [
        ...[`-t${Math.min(2, o.concurrency)}`, `-c${o.concurrency}`],
        ...[`-d${o.durationS}s`, "--timeout", "10s", "-s", script, o.url],
        ...["--", o.tokensFile, o.body ?? '{"state":"online"}'],
      ],
      stdout: "piped",
      stderr: "piped",
      signal: childSignal(o.durationS + 30),
    }).output();
    const line = new TextDecoder().decode(out.stdout).split("\n")
      .find((l) => l.startsWith("WRK_JSON "));
    if (!line) {
      const stderr = new TextDecoder().decode(out.stderr).slice(0, 500);
      throw new Error(`wrk printed no result (exit ${out.code}): ${stderr}`);
    }
    const r = JSON.parse(line.slice("WRK_JSON ".length));
    // wrk's requests include answers >= 400 (errorKinds.status): only the
    // rest were served, as with the Deno client.
    const requests = r.requests - r.errorKinds.status;
    return {
      tool: "wrk",
      concurrency: o.concurrency,
      ...r,
      requests,
      rps: requests / r.durationS,
      errors: Object.values<number>(r.errorKinds).reduce((a, b) => a + b, 0),
    };
  } finally {
    await Deno.remove(script).catch(() => {});
  }
}

/** Options of {@linkcode runDenoClient}. */
export interface DenoClientOptions {
  url: string;
  tokens: readonly string[];
  /** One body per token (same index); default `{"state":"online"}`. */
  bodies?: readonly string[];
  /**
   * `"count"`: `count` requests, `concurrency` at a time (closed loop);
   * `"rate"`: open loop, `rate` requests per second for `durationS`,
   * latency measured from each request's scheduled start.
   */
  mode: "count" | "rate";
  concurrency?: number;
  count?: number;
  durationS?: number;
  rate?: number;
}

/**
 * Runs the Deno load client in its own process, so that it does not share
 * the server's event loop.
 */
export async function runDenoClient(
  options: DenoClientOptions,
): Promise<LoadResult> {
  assertLoopback(options.url);
  const input = await Deno.makeTempFile({ suffix: ".json" });
  try {
    await Deno.writeTextFile(input, JSON.stringify(options));
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-net=127.0.0.1",
        `--allow-read=${input}`,
        new URL("./load_worker.ts", import.meta.url).pathname,
        input,
      ],
      stdout: "piped",
      stderr: "piped",
      signal: childSignal((options.durationS ?? 60) + 60),
    }).output();
    if (!out.success) {
      const stderr = new TextDecoder().decode(out.stderr).slice(0, 800);
      throw new Error(`load_worker failed: ${stderr}`);
    }
    return JSON.parse(new TextDecoder().decode(out.stdout)) as LoadResult;
  } finally {
    await Deno.remove(input).catch(() => {});
  }
}

/** Percentiles of latencies in milliseconds (nearest rank). */
export function percentiles(values: number[]): Latency {
  if (values.length === 0) return { p50: 0, p95: 0, p99: 0, max: 0, mean: 0 };
  const sorted = Float64Array.from(values).sort();
  const at = (p: number) =>
    sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)];
  let sum = 0;
  for (const v of sorted) sum += v;
  return {
    p50: at(0.5),
    p95: at(0.95),
    p99: at(0.99),
    max: sorted[sorted.length - 1],
    mean: sum / sorted.length,
  };
}

/** Throws unless `url` names a loopback host: the bench loads nothing else. */
export function assertLoopback(url: string): void {
  const host = new URL(url).hostname;
  if (!/^127\.\d+\.\d+\.\d+$/.test(host) && host !== "localhost") {
    throw new Error(`Refusing to load "${host}": loopback only`);
  }
}
