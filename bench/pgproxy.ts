/**
 * A counting TCP proxy in front of PostgreSQL, for the work-per-ping
 * figures: it forwards bytes unchanged and reads the client's message
 * types on the way, so it can say how many statements a client ran, how
 * many times it waited for the server (round trips) and which SQL texts it
 * parsed.
 *
 * Statistics views cannot answer these: `pg_stat_database` counts
 * transactions, not the extra Parse/Describe round trip a driver may make
 * before a statement, and `pg_stat_statements` needs a server restart.
 * The bench's drivers connect without TLS on loopback, so the stream is
 * the plain protocol: an untyped startup message, then typed messages.
 *
 * @module
 */

/** What the proxy saw since the last reset, by frontend message. */
export interface ProxyCounts {
  /** Execute plus simple Query messages. */
  statements: number;
  /**
   * A client send after the server had answered, once the session is set
   * up (the startup and password exchange are not the ping's).
   */
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
// Frontend message types: Query, Execute, Sync, Flush, Parse, Password.
const [_Q, _E, _S, _H, _P, _PASSWORD] = [..."QESHPp"].map((c) =>
  c.charCodeAt(0)
);
const _decoder = new TextDecoder();

/** Starts a proxy on a free loopback port in front of `upstreamUrl`'s host. */
export function startCountingProxy(upstreamUrl: string): CountingProxy {
  const upstream = new URL(upstreamUrl);
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const proxied = new URL(upstreamUrl);
  proxied.hostname = "127.0.0.1";
  proxied.port = String((listener.addr as Deno.NetAddr).port);
  const zero = (): ProxyCounts => ({
    statements: 0,
    roundTrips: 0,
    parse: 0,
    sync: 0,
    flush: 0,
    connections: 0,
  });
  let counts = zero();
  let seen = new Map<string, { text: string; count: number }>();
  const conns = new Set<Deno.Conn>();

  const onMessage = (type: number, body: Uint8Array) => {
    if (type === _Q || type === _E) counts.statements++;
    else if (type === _S) counts.sync++;
    else if (type === _H) counts.flush++;
    else if (type === _P) { // Parse: name\0 text\0 ...
      counts.parse++;
      const text = _decoder.decode(body.subarray(body.indexOf(0) + 1))
        .split("\0")[0];
      const shape = text.replace(_UUID, "'<uuid>'");
      const entry = seen.get(shape) ?? { text, count: 0 };
      entry.count++;
      seen.set(shape, entry);
    }
  };

  const serve = async (client: Deno.Conn) => {
    const server = await Deno.connect({
      hostname: upstream.hostname,
      port: Number(upstream.port || 5432),
    }).catch(() => null);
    if (!server) return client.close();
    conns.add(client).add(server);
    counts.connections++;
    let pending = new Uint8Array(0);
    let started = false; // past the untyped startup message
    let ready = false; // past the password exchange
    let serverSpoke = false;
    const fromClient = (chunk: Uint8Array) => {
      const data = new Uint8Array(pending.length + chunk.length);
      data.set(pending);
      data.set(chunk, pending.length);
      let at = 0;
      let asked = false;
      while (true) {
        const head = started ? 5 : 4;
        if (data.length - at < head) break;
        const view = new DataView(data.buffer, at);
        const end = at + view.getInt32(started ? 1 : 0) + (started ? 1 : 0);
        if (data.length < end) break;
        if (started) {
          if (data[at] !== _PASSWORD) ready = true;
          if (ready) onMessage(data[at], data.subarray(at + head, end));
          asked = true;
        }
        started = true;
        at = end;
      }
      pending = data.slice(at);
      if (asked && ready && serverSpoke) counts.roundTrips++;
      if (asked) serverSpoke = false;
    };
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
      pump(client, server, fromClient),
      pump(server, client, () => serverSpoke = true),
    ]);
  };
  const tasks = new Set<Promise<void>>();
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
      counts = zero();
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

const _close = (c: Deno.Conn) => {
  try {
    c.close();
  } catch {
    // already closed by the other direction
  }
};
