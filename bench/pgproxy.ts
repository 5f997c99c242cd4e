/**
 * A counting TCP proxy in front of PostgreSQL, for the benchmark's
 * work-per-ping figures: it forwards bytes unchanged and reads the frontend
 * protocol on the way, so it can say how many statements a client ran, how
 * many times it waited for the server (round trips), and which SQL it sent.
 *
 * Statistics views cannot answer these: `pg_stat_database` counts
 * transactions, not the extra Parse/Describe round trip a driver may make
 * before each statement, and `pg_stat_statements` needs a server restart.
 *
 * @module
 */

/** Frontend protocol messages by type byte, as counted. */
export interface ProtocolCounts {
  /** `Q`: simple-protocol queries. */
  query: number;
  /** `P`: Parse. */
  parse: number;
  /** `B`: Bind. */
  bind: number;
  /** `E`: Execute. */
  execute: number;
  /** `S`: Sync. */
  sync: number;
  /** `H`: Flush (a driver asking for answers before Sync). */
  flush: number;
}

/** What the proxy saw since the last {@linkcode CountingProxy.reset}. */
export interface ProxyCounts extends ProtocolCounts {
  /** Statements run: Execute plus simple Query messages. */
  statements: number;
  /**
   * Round trips: how many times a client sent something after the server
   * had answered, on established connections (the startup and password
   * exchange are not counted).
   */
  roundTrips: number;
  /** New connections accepted. */
  connections: number;
}

const _UUID_LITERAL =
  /'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'/gi;

/**
 * One distinct SQL text seen in Parse messages. Texts that differ only in
 * quoted UUID literals (a statement with its ids written in rather than
 * sent as parameters) count as one, kept with the first text seen.
 */
export interface SeenStatement {
  /** SQL text as first parsed (placeholders `$1`, `$2`, ...). */
  readonly text: string;
  /** Parameter type OIDs the client declared (0: let the server infer). */
  readonly paramTypes: readonly number[];
  /** How many times it was parsed. */
  count: number;
  /** Parameter values of the first Bind after its Parse (text format). */
  sampleParams: (string | null)[] | null;
}

/** A running proxy. */
export interface CountingProxy {
  /** Connection string that reaches the upstream database through the proxy. */
  readonly url: string;
  /** Counts since the last reset. */
  counts(): ProxyCounts;
  /** Statements seen since the last reset, most frequent first. */
  statements(): SeenStatement[];
  /** Zeroes the counts and forgets the statements. */
  reset(): void;
  /** Stops listening and closes every proxied connection. */
  close(): Promise<void>;
}

const _STARTUP_V3 = 196608;
const _SSL_REQUEST = 80877103;
const _GSS_REQUEST = 80877104;

/**
 * Starts a proxy on a free loopback port in front of the database of
 * `upstreamUrl` (a `postgresql://` URL on a TCP host).
 *
 * @example
 * ```ts
 * const proxy = await startCountingProxy(databaseUrl);
 * const sql = postgres(proxy.url);
 * await sql`select 1`;
 * console.log(proxy.counts().statements); // 1
 * ```
 */
export function startCountingProxy(upstreamUrl: string): CountingProxy {
  const upstream = new URL(upstreamUrl);
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  const proxied = new URL(upstreamUrl);
  proxied.hostname = "127.0.0.1";
  proxied.port = String(port);

  let counts = _zero();
  let seen = new Map<string, SeenStatement>();
  const conns = new Set<Deno.Conn>();
  const tasks = new Set<Promise<void>>();

  const serveOne = async (client: Deno.Conn) => {
    let server: Deno.Conn;
    try {
      server = await Deno.connect({
        hostname: upstream.hostname,
        port: Number(upstream.port || 5432),
      });
    } catch {
      client.close();
      return;
    }
    conns.add(client);
    conns.add(server);
    counts.connections++;
    // Round trips are counted only once the server has said it is ready,
    // and a client send counts when the server has spoken since the last.
    let ready = false;
    let serverSpoke = false;
    let lastParsed: SeenStatement | null = null;
    const fromClient = new _Scanner(false, (type, body) => {
      switch (type) {
        case 0x51: // Q
          counts.query++;
          counts.statements++;
          break;
        case 0x50: { // P
          counts.parse++;
          const parsed = body ? _parseMessage(body) : null;
          if (parsed) {
            const shape = parsed.text.replace(_UUID_LITERAL, "'<uuid>'");
            let entry = seen.get(shape);
            if (!entry) {
              entry = { ...parsed, count: 0, sampleParams: null };
              seen.set(shape, entry);
            }
            entry.count++;
            lastParsed = entry;
          }
          break;
        }
        case 0x42: // B
          counts.bind++;
          if (lastParsed && !lastParsed.sampleParams && body) {
            lastParsed.sampleParams = _bindParams(body);
          }
          lastParsed = null;
          break;
        case 0x45: // E
          counts.execute++;
          counts.statements++;
          break;
        case 0x53: // S
          counts.sync++;
          break;
        case 0x48: // H
          counts.flush++;
          break;
      }
    }, (type) => type === 0x50 || type === 0x42);
    const fromServer = new _Scanner(true, (type) => {
      if (type === 0x5a) ready = true; // ReadyForQuery
    }, () => false);

    const pump = async (
      from: Deno.Conn,
      to: Deno.Conn,
      onChunk: (chunk: Uint8Array) => void,
    ) => {
      const buf = new Uint8Array(64 * 1024);
      try {
        while (true) {
          const n = await from.read(buf);
          if (n === null) break;
          const chunk = buf.subarray(0, n);
          onChunk(chunk);
          let off = 0;
          while (off < n) off += await to.write(chunk.subarray(off));
        }
      } catch {
        // A reset connection ends the pair; nothing to report.
      } finally {
        for (const c of [from, to]) {
          try {
            c.close();
          } catch {
            // already closed by the other direction
          }
          conns.delete(c);
        }
      }
    };
    await Promise.all([
      pump(client, server, (chunk) => {
        if (ready && serverSpoke) counts.roundTrips++;
        serverSpoke = false;
        fromClient.push(chunk);
        if (fromClient.sslRequested) fromServer.expectSingleByte();
      }),
      pump(server, client, (chunk) => {
        serverSpoke = true;
        fromServer.push(chunk);
      }),
    ]);
  };

  const accepting = (async () => {
    try {
      for await (const client of listener) {
        const task = serveOne(client);
        tasks.add(task);
        task.finally(() => tasks.delete(task));
      }
    } catch {
      // listener closed
    }
  })();

  return {
    url: proxied.toString(),
    counts: () => ({ ...counts }),
    statements: () => [...seen.values()].sort((a, b) => b.count - a.count),
    reset() {
      counts = { ..._zero(), connections: 0 };
      seen = new Map();
    },
    async close() {
      listener.close();
      for (const c of conns) {
        try {
          c.close();
        } catch {
          // already closed
        }
      }
      await accepting;
      await Promise.allSettled([...tasks]);
    },
  };
}

function _zero(): ProxyCounts {
  return {
    query: 0,
    parse: 0,
    bind: 0,
    execute: 0,
    sync: 0,
    flush: 0,
    statements: 0,
    roundTrips: 0,
    connections: 0,
  };
}

/**
 * Splits a protocol byte stream into messages. The frontend stream starts
 * with untyped messages (SSL request, startup); the backend stream is typed
 * throughout except for the one-byte answer to an SSL request.
 */
class _Scanner {
  #typed: boolean;
  #onMessage: (type: number, body: Uint8Array | null) => void;
  #keep: (type: number) => boolean;
  #head = new Uint8Array(5);
  #headLen = 0;
  #type = 0;
  #remaining = -1;
  #body: Uint8Array | null = null;
  #bodyLen = 0;
  #singleBytes = 0;
  /** Set when the frontend just sent an SSL or GSS encryption request. */
  sslRequested = false;

  constructor(
    typed: boolean,
    onMessage: (type: number, body: Uint8Array | null) => void,
    keep: (type: number) => boolean,
  ) {
    this.#typed = typed;
    this.#onMessage = onMessage;
    this.#keep = keep;
  }

  /** The next byte is a bare `S`/`N` answer to an encryption request. */
  expectSingleByte(): void {
    this.#singleBytes++;
  }

  push(chunk: Uint8Array): void {
    this.sslRequested = false;
    let i = 0;
    while (i < chunk.length) {
      if (this.#remaining < 0) {
        if (this.#singleBytes > 0 && this.#headLen === 0) {
          this.#singleBytes--;
          i++;
          continue;
        }
        const headSize = this.#typed ? 5 : 4;
        const take = Math.min(headSize - this.#headLen, chunk.length - i);
        this.#head.set(chunk.subarray(i, i + take), this.#headLen);
        this.#headLen += take;
        i += take;
        if (this.#headLen < headSize) return;
        const view = new DataView(this.#head.buffer);
        this.#type = this.#typed ? this.#head[0] : 0;
        const length = view.getInt32(this.#typed ? 1 : 0);
        this.#remaining = Math.max(0, length - 4);
        this.#headLen = 0;
        const keep = !this.#typed || this.#keep(this.#type);
        this.#body = keep ? new Uint8Array(this.#remaining) : null;
        this.#bodyLen = 0;
      }
      const take = Math.min(this.#remaining, chunk.length - i);
      if (this.#body) {
        this.#body.set(chunk.subarray(i, i + take), this.#bodyLen);
      }
      this.#bodyLen += take;
      this.#remaining -= take;
      i += take;
      if (this.#remaining === 0) {
        const body = this.#body;
        this.#remaining = -1;
        this.#body = null;
        if (this.#typed) {
          this.#onMessage(this.#type, body);
        } else if (body && body.length >= 4) {
          const code = new DataView(body.buffer).getInt32(0);
          if (code === _STARTUP_V3) this.#typed = true;
          if (code === _SSL_REQUEST || code === _GSS_REQUEST) {
            this.sslRequested = true;
          }
        }
      }
    }
  }
}

const _decoder = new TextDecoder();

function _cstring(body: Uint8Array, at: number): [string, number] {
  let end = at;
  while (end < body.length && body[end] !== 0) end++;
  return [_decoder.decode(body.subarray(at, end)), end + 1];
}

function _parseMessage(
  body: Uint8Array,
): { text: string; paramTypes: number[] } | null {
  try {
    const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
    let at = _cstring(body, 0)[1];
    const [text, next] = _cstring(body, at);
    at = next;
    const n = view.getInt16(at);
    at += 2;
    const paramTypes: number[] = [];
    for (let k = 0; k < n; k++, at += 4) paramTypes.push(view.getUint32(at));
    return { text, paramTypes };
  } catch {
    return null;
  }
}

function _bindParams(body: Uint8Array): (string | null)[] | null {
  try {
    const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
    let at = _cstring(body, 0)[1];
    at = _cstring(body, at)[1];
    const formats = view.getInt16(at);
    at += 2 + 2 * formats;
    const n = view.getInt16(at);
    at += 2;
    const values: (string | null)[] = [];
    for (let k = 0; k < n; k++) {
      const len = view.getInt32(at);
      at += 4;
      if (len < 0) {
        values.push(null);
        continue;
      }
      values.push(_decoder.decode(body.subarray(at, at + len)));
      at += len;
    }
    return values;
  } catch {
    return null;
  }
}
