/**
 * What every reliability suite shares: a seeded PRNG, the tally of requests
 * and failures per category, a bounded worker pool, a raw HTTP/1.1 client
 * for requests `fetch` refuses to send, and the checks every function
 * response must pass.
 *
 * @module
 */
import type postgres from "postgres";

/**
 * A small seeded PRNG (mulberry32): the same seed gives the same sequence,
 * so a failing run is reproduced by passing its printed seed back.
 *
 * @example
 * ```ts
 * const rng = new Rng(42);
 * rng.int(10); // always the same number for seed 42
 * ```
 */
export class Rng {
  #state: number;

  constructor(seed: number) {
    this.#state = seed >>> 0;
  }

  /** A float in [0, 1). */
  next(): number {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** An integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  /** One element of a non-empty list. */
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)];
  }

  /** `true` with probability `p`. */
  chance(p: number): boolean {
    return this.next() < p;
  }

  /** `n` random bytes. */
  bytes(n: number): Uint8Array {
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i++) out[i] = this.int(256);
    return out;
  }
}

/** One failed check, with what is needed to reproduce it. */
export interface Failure {
  readonly category: string;
  readonly detail: string;
}

/**
 * Requests tried and failures per category, plus the figures (recovery
 * times, memory) the final table prints.
 */
export class Tally {
  /** Requests tried per category. */
  readonly tried = new Map<string, number>();
  /** Failures per category. */
  readonly failed = new Map<string, number>();
  /** Every failure, in order. */
  readonly failures: Failure[] = [];
  /** Named figures, e.g. `"recovery postgres (ms)"`. */
  readonly figures = new Map<string, string>();

  /** Counts `n` requests of a category. */
  count(category: string, n = 1): void {
    this.tried.set(category, (this.tried.get(category) ?? 0) + n);
    if (!this.failed.has(category)) this.failed.set(category, 0);
  }

  /** Records a failure (the request is counted separately). */
  fail(category: string, detail: string): void {
    this.failed.set(category, (this.failed.get(category) ?? 0) + 1);
    if (!this.tried.has(category)) this.tried.set(category, 0);
    this.failures.push({ category, detail });
  }

  /** Records `detail` as a failure unless `ok`. */
  check(category: string, ok: boolean, detail: () => string): boolean {
    if (!ok) this.fail(category, detail());
    return ok;
  }

  /** Sets a figure for the report. */
  figure(name: string, value: string | number): void {
    this.figures.set(name, String(value));
  }

  /** Total failures. */
  get failureCount(): number {
    let n = 0;
    for (const v of this.failed.values()) n += v;
    return n;
  }

  /** The table of categories, then the figures, as printable text. */
  table(): string {
    const rows = [...this.tried.keys()].sort();
    const width = Math.max(8, ...rows.map((r) => r.length));
    const lines = [
      `${"category".padEnd(width)}  ${"requests".padStart(8)}  ${
        "failures".padStart(8)
      }`,
    ];
    let total = 0;
    for (const r of rows) {
      const tried = this.tried.get(r) ?? 0;
      total += tried;
      lines.push(
        `${r.padEnd(width)}  ${String(tried).padStart(8)}  ${
          String(this.failed.get(r) ?? 0).padStart(8)
        }`,
      );
    }
    lines.push(
      `${"total".padEnd(width)}  ${String(total).padStart(8)}  ${
        String(this.failureCount).padStart(8)
      }`,
    );
    if (this.figures.size) {
      lines.push("");
      const w = Math.max(...[...this.figures.keys()].map((k) => k.length));
      for (const [k, v] of this.figures) lines.push(`${k.padEnd(w)}  ${v}`);
    }
    return lines.join("\n");
  }
}

/**
 * Runs `task(i)` for `i` in `[0, count)` on at most `concurrency` workers at
 * once; rejects with the first error after all workers stop.
 */
export async function pool(
  count: number,
  concurrency: number,
  task: (i: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  let firstError: unknown = null;
  const worker = async () => {
    while (next < count && firstError === null) {
      const i = next++;
      try {
        await task(i);
      } catch (error) {
        firstError ??= error;
      }
    }
  };
  await Promise.all(
    Array.from({ length: Math.min(concurrency, count) }, worker),
  );
  if (firstError !== null) throw firstError;
}

/** A request sent byte for byte by {@linkcode rawRequest}. */
export interface RawRequest {
  readonly method: string;
  /** Path and query, sent as they are. */
  readonly target: string;
  /** Header lines in order; repeats allowed; values are bytes or Latin-1 text. */
  readonly headers: readonly [string, string | Uint8Array][];
  readonly body: Uint8Array | null;
  /** Send the body chunked instead of with a Content-Length. */
  readonly chunked?: boolean;
}

/** What came back from {@linkcode rawRequest}. */
export interface RawResponse {
  /** 0 when the connection closed without a response. */
  readonly status: number;
  readonly headers: Headers;
  readonly body: Uint8Array;
}

const _encoder = new TextEncoder();
const _latin1 = (text: string) =>
  Uint8Array.from(text, (c) => c.charCodeAt(0) & 0xff);

/**
 * Sends one HTTP/1.1 request over a fresh loopback connection exactly as
 * given (any method, repeated or non-ASCII headers, any body bytes) and
 * reads the whole response. Bounded by `timeoutMs`.
 */
export async function rawRequest(
  base: string,
  req: RawRequest,
  timeoutMs = 15_000,
): Promise<RawResponse> {
  const url = new URL(base);
  const conn = await Deno.connect({
    hostname: url.hostname,
    port: Number(url.port),
  });
  const timer = setTimeout(() => {
    try {
      conn.close();
    } catch { /* already closed */ }
  }, timeoutMs);
  try {
    const parts: Uint8Array[] = [
      _latin1(`${req.method} ${req.target} HTTP/1.1\r\nHost: ${url.host}\r\n`),
    ];
    for (const [name, value] of req.headers) {
      parts.push(_latin1(`${name}: `));
      parts.push(typeof value === "string" ? _latin1(value) : value);
      parts.push(_latin1("\r\n"));
    }
    if (req.body && req.chunked) {
      parts.push(_latin1("Transfer-Encoding: chunked\r\n"));
    } else if (req.body) {
      parts.push(_latin1(`Content-Length: ${req.body.byteLength}\r\n`));
    }
    parts.push(_latin1("Connection: close\r\n\r\n"));
    if (req.body && req.chunked) {
      for (let i = 0; i < req.body.byteLength; i += 1000) {
        const chunk = req.body.subarray(i, i + 1000);
        parts.push(_latin1(`${chunk.byteLength.toString(16)}\r\n`));
        parts.push(chunk, _latin1("\r\n"));
      }
      parts.push(_latin1("0\r\n\r\n"));
    } else if (req.body) {
      parts.push(req.body);
    }
    const payload = _concat(parts);
    // The server may answer (413, 405) and close before reading everything.
    try {
      for (let off = 0; off < payload.byteLength;) {
        off += await conn.write(payload.subarray(off));
      }
    } catch { /* read what was answered */ }
    const chunks: Uint8Array[] = [];
    const buf = new Uint8Array(64 * 1024);
    for (;;) {
      let n: number | null;
      try {
        n = await conn.read(buf);
      } catch {
        break;
      }
      if (n === null) break;
      chunks.push(buf.slice(0, n));
    }
    return _parseResponse(_concat(chunks), req.method === "HEAD");
  } finally {
    clearTimeout(timer);
    try {
      conn.close();
    } catch { /* already closed */ }
  }
}

function _concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.byteLength;
  }
  return out;
}

function _parseResponse(bytes: Uint8Array, head: boolean): RawResponse {
  const text = new TextDecoder("latin1").decode(bytes);
  const end = text.indexOf("\r\n\r\n");
  if (!text.startsWith("HTTP/1.1 ") || end < 0) {
    return { status: 0, headers: new Headers(), body: new Uint8Array() };
  }
  const [statusLine, ...lines] = text.slice(0, end).split("\r\n");
  const headers = new Headers();
  for (const line of lines) {
    const colon = line.indexOf(":");
    if (colon > 0) {
      headers.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
    }
  }
  let body = head ? new Uint8Array() : bytes.subarray(end + 4);
  if (headers.get("transfer-encoding")?.includes("chunked")) {
    body = _dechunk(body);
  }
  return { status: Number(statusLine.split(" ")[1]), headers, body };
}

function _dechunk(bytes: Uint8Array): Uint8Array {
  const text = new TextDecoder("latin1").decode(bytes);
  const out: Uint8Array[] = [];
  let pos = 0;
  for (;;) {
    const eol = text.indexOf("\r\n", pos);
    if (eol < 0) break;
    const size = parseInt(text.slice(pos, eol), 16);
    if (!size) break;
    out.push(bytes.subarray(eol + 2, eol + 2 + size));
    pos = eol + 2 + size + 2;
  }
  return _concat(out);
}

/**
 * Patterns that must never appear in a function's response or a log line:
 * JWTs (tokens and keys), Supabase API keys, connection strings with
 * credentials.
 */
export const SECRET_SHAPES: readonly RegExp[] = [
  /eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*/,
  /sb_(secret|publishable)_[A-Za-z0-9_-]+/,
  /postgres(ql)?:\/\/[^\s/@:]+:[^\s/@]+@/i,
];

/**
 * The secrets a run used (tokens, passwords, keys, database URLs): nothing
 * of them may show in a response or a log line.
 */
export class Secrets {
  readonly #values = new Set<string>();

  /**
   * Remembers a secret. JWTs need no entry (their shape alone is refused);
   * values shorter than 8 characters are too common to scan for.
   */
  add(...values: (string | null | undefined)[]): void {
    for (const v of values) {
      if (v && v.length >= 8 && !SECRET_SHAPES[0].test(v)) this.#values.add(v);
    }
  }

  /** How many distinct secrets are known. */
  get size(): number {
    return this.#values.size;
  }

  /**
   * The first secret (or secret-shaped text) found in `text`, described
   * without repeating it, or `null`.
   */
  find(text: string): string | null {
    for (const shape of SECRET_SHAPES) {
      const m = shape.exec(text);
      if (m) return `text shaped like a secret (${shape.source.slice(0, 12)}…)`;
    }
    for (const v of this.#values) {
      if (text.includes(v)) {
        return `a known secret (${v.length} chars, starts "${v.slice(0, 3)}…")`;
      }
    }
    return null;
  }
}

/** What a function answered, parsed. */
export interface Answer {
  readonly status: number;
  readonly headers: Headers;
  readonly text: string;
  // deno-lint-ignore no-explicit-any
  readonly body: any;
}

/** Decodes a raw response into an {@linkcode Answer}. */
export function answerOf(res: RawResponse): Answer {
  const text = new TextDecoder().decode(res.body);
  let body: unknown = undefined;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch { /* left undefined: checked by the caller */ }
  return { status: res.status, headers: res.headers, text, body };
}

/** `fetch` to a function, read into an {@linkcode Answer}. */
export async function post(
  apiUrl: string,
  name: string,
  init: RequestInit & { query?: string } = {},
): Promise<Answer> {
  const res = await fetch(
    `${apiUrl}/functions/v1/${name}${init.query ?? ""}`,
    { method: "POST", ...init },
  );
  const text = await res.text();
  let body: unknown = undefined;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch { /* checked by the caller */ }
  return { status: res.status, headers: res.headers, text, body };
}

/**
 * Checks the contract every function answer keeps: JSON; errors with string
 * `message` and `code`; successes with `ok: true`; CORS without
 * credentials; no secret. Returns the problem, or `null`.
 */
export function contractProblem(
  a: Answer,
  secrets: Secrets,
  options: { head?: boolean } = {},
): string | null {
  if (a.headers.get("access-control-allow-credentials") !== null) {
    return "Access-Control-Allow-Credentials present";
  }
  if (a.headers.get("access-control-allow-origin") !== "*") {
    return `Access-Control-Allow-Origin is ${
      a.headers.get("access-control-allow-origin")
    }`;
  }
  const leak = secrets.find(a.text) ??
    secrets.find([...a.headers].map(([k, v]) => `${k}: ${v}`).join("\n"));
  if (leak) return `response contains ${leak}`;
  if (a.status === 204 || options.head) return null;
  if (!(a.headers.get("content-type") ?? "").includes("application/json")) {
    return `content-type ${a.headers.get("content-type")}`;
  }
  const b = a.body;
  if (b === null || typeof b !== "object" || Array.isArray(b)) {
    return `body is not a JSON object: ${a.text.slice(0, 120)}`;
  }
  if (a.status >= 400) {
    if (typeof b.message !== "string" || typeof b.code !== "string") {
      return `error without message/code: ${a.text.slice(0, 120)}`;
    }
  } else if (a.status === 200 && b.ok !== true) {
    return `200 without ok: true: ${a.text.slice(0, 120)}`;
  }
  return null;
}

/** Memory of a process as `Deno.memoryUsage()` gives it, in MiB. */
export interface Memory {
  rss: number;
  heapUsed: number;
  heapTotal: number;
}

/** Formats a {@linkcode Memory} for the report. */
export function formatMemory(m: Memory): string {
  return `rss ${m.rss.toFixed(1)} MiB, heap ${m.heapUsed.toFixed(1)}/${
    m.heapTotal.toFixed(1)
  } MiB`;
}

/** This process's memory in MiB, after a GC when `--expose-gc` allows one. */
export function ownMemory(): Memory {
  const gc = (globalThis as { gc?: () => void }).gc;
  gc?.();
  const m = Deno.memoryUsage();
  const mib = (n: number) => n / 1024 / 1024;
  return {
    rss: mib(m.rss),
    heapUsed: mib(m.heapUsed),
    heapTotal: mib(m.heapTotal),
  };
}

/**
 * A fingerprint of what in `usuarios` must never change under attack or bad
 * input: the identity columns of every row up to `upToId` (rows the run
 * adds later are its own) except `exceptIds`, their count, and the table's
 * columns. Presence is left out: pings legitimately change it.
 */
export async function usuariosFingerprint(
  sql: postgres.Sql,
  upToId: number,
  exceptIds: readonly number[] = [],
): Promise<string> {
  const except = exceptIds.length ? exceptIds : [-1];
  const [row] = await sql`
    select count(*)::int as n,
      md5(coalesce(string_agg(
        concat_ws('|', id, correo, nombre_usuario, rol, auth_user_id),
        ',' order by id), '')) as h,
      (select string_agg(column_name, ',' order by column_name)
         from information_schema.columns
        where table_schema = 'public' and table_name = 'usuarios') as cols
    from public.usuarios
    where id <= ${upToId} and not (id = any(${except}::bigint[]))`;
  return `${row.n}:${row.h}:${row.cols}`;
}

/** The highest `usuarios.id` so far (0 when empty). */
export async function maxUsuarioId(sql: postgres.Sql): Promise<number> {
  const [row] =
    await sql`select coalesce(max(id), 0)::int as m from public.usuarios`;
  return row.m;
}

/** Sleeps `ms`. */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
