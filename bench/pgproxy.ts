/**
 * A counting TCP proxy in front of PostgreSQL, for the work-per-ping
 * figures: it forwards bytes unchanged and reads the message types on the
 * way, so it can say how many statements a client ran, how many times it
 * waited for the server (round trips) and which SQL texts it parsed.
 *
 * Statistics views cannot answer these: `pg_stat_database` counts
 * transactions, not the extra Parse/Describe round trip a driver may make
 * before a statement, and `pg_stat_statements` needs a server restart.
 *
 * @module
 */

/** What the proxy saw since the last reset, by frontend message. */
export interface ProxyCounts {
  /** Execute plus simple Query messages. */
  statements: number;
  /** A client send after the server had answered, once the session is ready. */
  roundTrips: number;
  parse: number;
  sync: number;
  /** Flush: a driver asking for answers before Sync (an extra round trip). */
  flush: number;
  connections: number;
}

/** A running proxy. */
export interface CountingProxy {
  /** The upstream URL with the proxy's loopback port. */
  readonly url: string;
  counts(): ProxyCounts;
  /**
   * Parsed SQL texts with how often each came, most frequent first. Texts
   * that differ only in quoted UUIDs (values written into the text) are
   * one, kept as first seen.
   */
  statements(): { text: string; count: number }[];
  reset(): void;
  close(): Promise<void>;
}

const _UUID =
  /'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'/gi;
const _zero = (): ProxyCounts => ({
  statements: 0,
  roundTrips: 0,
  parse: 0,
  sync: 0,
  flush: 0,
  connections: 0,
});

/** Starts a proxy on a free loopback port in front of `upstreamUrl`'s host. */
export function startCountingProxy(upstreamUrl: string): CountingProxy {
  const upstream = new URL(upstreamUrl);
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const proxied = new URL(upstreamUrl);
  proxied.hostname = "127.0.0.1";
  proxied.port = String((listener.addr as Deno.NetAddr).port);
  let counts = _zero();
  let seen = new Map<string, { text: string; count: number }>();
  const conns = new Set<Deno.Conn>();
  const tasks = new Set<Promise<void>>();

  const serve = async (client: Deno.Conn) => {
    const server = await Deno.connect({
      hostname: upstream.hostname,
      port: Number(upstream.port || 5432),
    }).catch(() => null);
    if (!server) return client.close();
    conns.add(client).add(server);
    counts.connections++;
    // Round trips count once the server said ReadyForQuery: the startup
    // and password exchange are not the ping's.
    let ready = false;
    let serverSpoke = false;
    const fromClient = new _Frames(false, (type, body) => {
      if (type === 0x51 || type === 0x45) counts.statements++; // Q, E
      else if (type === 0x53) counts.sync++;
      else if (type === 0x48) counts.flush++;
      else if (type === 0x50) { // Parse: name\0 text\0 ...
        counts.parse++;
        const text = _decoder.decode(body.subarray(body.indexOf(0) + 1))
          .split("\0")[0];
        const shape = text.replace(_UUID, "'<uuid>'");
        const entry = seen.get(shape) ?? { text, count: 0 };
        entry.count++;
        seen.set(shape, entry);
      }
    });
    const fromServer = new _Frames(true, (type) => {
      if (type === 0x5a) ready = true;
    });
    const pump = async (
      from: Deno.Conn,
      to: Deno.Conn,
      onChunk: (chunk: Uint8Array) => void,
    ) => {
      const buf = new Uint8Array(64 * 1024);
      try {
        for (let n; (n = await from.read(buf)) !== null;) {
          onChunk(buf.subarray(0, n));
          for (let off = 0; off < n;) {
            off += await to.write(buf.subarray(off, n));
          }
        }
      } catch {
        // A reset connection ends the pair.
      } finally {
        for (const c of [from, to]) {
          conns.delete(c);
          _close(c);
        }
      }
    };
    await Promise.all([
      pump(client, server, (chunk) => {
        if (ready && serverSpoke) counts.roundTrips++;
        serverSpoke = false;
        fromClient.push(chunk);
        // The answer to an SSL or GSS request is one untyped byte.
        if (fromClient.encryptionAsked) fromServer.skipByte = true;
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
        const task = serve(client);
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
      conns.forEach(_close);
      await accepting;
      await Promise.allSettled([...tasks]);
    },
  };
}

const _decoder = new TextDecoder();
const _close = (c: Deno.Conn) => {
  try {
    c.close();
  } catch {
    // already closed by the other direction
  }
};

/**
 * Splits a protocol stream into messages (type byte, int32 length, body).
 * The frontend starts untyped (SSL request, startup) until the startup
 * message (protocol 3.0).
 */
class _Frames {
  encryptionAsked = false;
  skipByte = false;
  #pending = new Uint8Array(0);

  constructor(
    private typed: boolean,
    private onMessage: (type: number, body: Uint8Array) => void,
  ) {}

  push(chunk: Uint8Array): void {
    this.encryptionAsked = false;
    let data = chunk;
    if (this.#pending.length) {
      data = new Uint8Array(this.#pending.length + chunk.length);
      data.set(this.#pending);
      data.set(chunk, this.#pending.length);
    }
    if (this.skipByte && data.length) {
      this.skipByte = false;
      data = data.subarray(1);
    }
    let at = 0;
    while (true) {
      const head = this.typed ? 5 : 4;
      if (data.length - at < head) break;
      const view = new DataView(data.buffer, data.byteOffset + at);
      const length = view.getInt32(this.typed ? 1 : 0);
      const end = at + (this.typed ? 1 : 0) + length;
      if (data.length < end) break;
      const body = data.subarray(at + head, end);
      if (this.typed) this.onMessage(data[at], body);
      else if (body.length >= 4) {
        const code = new DataView(body.buffer, body.byteOffset).getInt32(0);
        if (code === 196608) this.typed = true; // StartupMessage, v3.0
        // SSLRequest, GSSENCRequest
        if (code === 80877103 || code === 80877104) this.encryptionAsked = true;
      }
      at = end;
    }
    this.#pending = data.slice(at);
  }
}
