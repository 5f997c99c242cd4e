/**
 * The Deno load client, run as its own process by load.ts: reads its
 * options (a {@linkcode DenoClientOptions} JSON file) and prints one
 * {@linkcode LoadResult} as JSON.
 *
 * It speaks HTTP/1.1 over raw keep-alive TCP connections with each request
 * prebuilt and sent in one write: `fetch` costs 2 to 4 ms per request of
 * client-side time here, which would be counted as the server's latency.
 *
 * The fixed-rate mode is open loop: request `i` is due at `start + i/rate`
 * and its latency counts from then, so a slow answer cannot hide the
 * requests queued behind it (no coordinated omission).
 *
 * @module
 */
import {
  type DenoClientOptions,
  type LoadResult,
  percentiles,
} from "./load.ts";

// Open loop: connections are opened as needed up to this many; requests
// due while all are busy wait in a queue, their wait counted as latency.
const _MAX_CONNECTIONS = 256;

const _encoder = new TextEncoder();
const _decoder = new TextDecoder();
const _CRLFCRLF = _encoder.encode("\r\n\r\n");
const _CRLF = _encoder.encode("\r\n");

/** One keep-alive HTTP/1.1 connection. */
class _Connection {
  #conn: Deno.TcpConn;
  #buf = new Uint8Array(64 * 1024);
  #start = 0;
  #end = 0;

  private constructor(conn: Deno.TcpConn) {
    this.#conn = conn;
  }

  static async open(host: string, port: number): Promise<_Connection> {
    const conn = await Deno.connect({ hostname: host, port });
    conn.setNoDelay(true);
    return new _Connection(conn);
  }

  /** Sends one request and reads its response; returns the status. */
  async exchange(request: Uint8Array): Promise<number> {
    let off = 0;
    while (off < request.length) {
      off += await this.#conn.write(request.subarray(off));
    }
    const headEnd = await this.#until(_CRLFCRLF);
    const head = _decoder.decode(this.#buf.subarray(this.#start, headEnd));
    this.#start = headEnd + 4;
    const status = Number(head.slice(9, 12));
    const length = /\r\ncontent-length:\s*(\d+)/i.exec(head);
    if (length) {
      await this.#skip(Number(length[1]));
    } else if (/\r\ntransfer-encoding:\s*chunked/i.test(head)) {
      while (true) {
        const lineEnd = await this.#until(_CRLF);
        const size = parseInt(
          _decoder.decode(this.#buf.subarray(this.#start, lineEnd)),
          16,
        );
        this.#start = lineEnd + 2;
        await this.#skip(size + 2);
        if (size === 0) break;
      }
    }
    return status;
  }

  close(): void {
    try {
      this.#conn.close();
    } catch {
      // already closed
    }
  }

  async #fill(): Promise<void> {
    if (this.#start === this.#end) this.#start = this.#end = 0;
    if (this.#end === this.#buf.length) {
      this.#buf.copyWithin(0, this.#start, this.#end);
      this.#end -= this.#start;
      this.#start = 0;
    }
    const n = await this.#conn.read(this.#buf.subarray(this.#end));
    if (n === null) throw new Error("connection closed");
    this.#end += n;
  }

  async #skip(count: number): Promise<void> {
    let left = count;
    while (left > 0) {
      if (this.#start === this.#end) await this.#fill();
      const take = Math.min(left, this.#end - this.#start);
      this.#start += take;
      left -= take;
    }
  }

  #find(needle: Uint8Array): number {
    outer: for (let i = this.#start; i + needle.length <= this.#end; i++) {
      for (let k = 0; k < needle.length; k++) {
        if (this.#buf[i + k] !== needle[k]) continue outer;
      }
      return i;
    }
    return -1;
  }

  // Fills the buffer until `needle` is in it; returns its offset.
  async #until(needle: Uint8Array): Promise<number> {
    let at = this.#find(needle);
    while (at < 0) {
      await this.#fill();
      at = this.#find(needle);
    }
    return at;
  }
}

async function main(): Promise<void> {
  const options = JSON.parse(
    await Deno.readTextFile(Deno.args[0]),
  ) as DenoClientOptions;
  const url = new URL(options.url);
  const host = url.hostname;
  const port = Number(url.port || 80);
  const tokens = options.tokens.length ? options.tokens : ["none"];
  const requests = tokens.map((token, i) => {
    const text = options.bodies?.[i] ?? '{"state":"online"}';
    return _encoder.encode(
      `POST ${url.pathname}${url.search} HTTP/1.1\r\nHost: ${url.host}\r\n` +
        `Authorization: Bearer ${token}\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${_encoder.encode(text).length}\r\n\r\n${text}`,
    );
  });
  const latencies: number[] = [];
  const errorKinds: Record<string, number> = {};
  const count = (kind: string) =>
    errorKinds[kind] = (errorKinds[kind] ?? 0) + 1;
  let next = 0;

  /** Runs request number `next` on `conn`; `null` when the connection broke. */
  const once = async (
    conn: _Connection,
    scheduled: number,
  ): Promise<_Connection | null> => {
    const request = requests[next++ % requests.length];
    try {
      const status = await conn.exchange(request);
      if (status >= 200 && status < 300) {
        latencies.push(performance.now() - scheduled);
      } else {
        count(`status_${status}`);
      }
      return conn;
    } catch {
      count("network");
      conn.close();
      return null;
    }
  };

  const start = performance.now();
  if (options.mode === "rate") {
    const rate = options.rate ?? 100;
    const end = start + (options.durationS ?? 10) * 1000;
    const idle: _Connection[] = [];
    const queue: number[] = [];
    let open = 0;
    let sent = 0;
    const inFlight = new Set<Promise<void>>();
    const dispatch = () => {
      while (queue.length && (idle.length || open < _MAX_CONNECTIONS)) {
        const scheduled = queue.shift()!;
        const task = (async () => {
          let conn = idle.pop();
          if (!conn) {
            open++;
            try {
              conn = await _Connection.open(host, port);
            } catch {
              open--;
              count("connect");
              return;
            }
          }
          const kept = await once(conn, scheduled);
          if (kept) idle.push(kept);
          else open--;
          dispatch();
        })();
        inFlight.add(task);
        task.finally(() => inFlight.delete(task));
      }
    };
    while (true) {
      const now = performance.now();
      if (now >= end) break;
      // Request i is due at i/rate: send every request whose time has come.
      const due = Math.floor((now - start) * rate / 1000) + 1;
      while (sent < due) queue.push(start + sent++ * 1000 / rate);
      dispatch();
      await new Promise((r) => setTimeout(r, 1));
    }
    // The timer is cleared: a pending one would keep this process alive
    // for 15 s, and the pass's CPU reading (taken when it exits) with it.
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      Promise.all([...inFlight]),
      new Promise((r) => timer = setTimeout(r, 15_000)),
    ]);
    clearTimeout(timer);
    if (queue.length) errorKinds.not_sent_in_time = queue.length;
    for (const conn of idle) conn.close();
  } else {
    const concurrency = options.concurrency ?? 1;
    const total = options.count ?? 100;
    let sent = 0;
    const loop = async () => {
      let conn: _Connection | null = null;
      while (sent < total) {
        sent++;
        if (!conn) {
          try {
            conn = await _Connection.open(host, port);
          } catch {
            count("connect");
            continue;
          }
        }
        conn = await once(conn, performance.now());
      }
      conn?.close();
    };
    await Promise.all(Array.from({ length: concurrency }, loop));
  }
  const durationS = (performance.now() - start) / 1000;
  const errors = Object.values(errorKinds).reduce((a, b) => a + b, 0);
  const result: LoadResult = {
    tool: "deno-client",
    concurrency: options.concurrency ?? 0,
    durationS,
    requests: latencies.length,
    rps: latencies.length / durationS,
    latencyMs: percentiles(latencies),
    errors,
    errorKinds,
  };
  console.log(JSON.stringify(result));
}

if (import.meta.main) await main();
