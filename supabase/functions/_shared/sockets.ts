/**
 * The sockets of a database pool, opened by the pool itself
 * (postgres.js's `socket` option) so that they can be paced, and the one
 * home of the delay between reconnect attempts.
 *
 * postgres.js 3.4.9 reconnects at once, with no backoff, when a connection
 * closes cleanly before its startup is done (connection.js `closed`: `if
 * (initial) return reconnect()`). A balancer or proxy that accepts and then
 * closes while the database behind it is down would get hundreds of
 * connections a second from each isolate, for as long as the outage lasts
 * (tested in `tests/e2e/db_bounds_test.ts`). A working pool opens no such
 * stream: a connection lives for its idle time at least, so more than two
 * sockets per connection of the pool within a second means they are being
 * closed as fast as they open, and each one beyond that waits as a
 * reconnect would ({@linkcode reconnectDelay}).
 *
 * Written here rather than taken from a library: the pacing has to sit in
 * front of postgres.js's own reconnect, which has no hook for it.
 *
 * @module
 */
import net from "node:net";

/**
 * Seconds before reconnect attempt `retries`: 50 ms doubling to 500 ms,
 * with jitter so that isolates do not reconnect in step. postgres.js's
 * `backoff` for the functions' pools (its default grows to 20 s), and the
 * wait of a paced socket.
 *
 * @example
 * ```ts
 * reconnectDelay(1); // between 0.05 and 0.1
 * reconnectDelay(9); // between 0.25 and 0.5
 * ```
 */
export function reconnectDelay(retries: number): number {
  return (0.5 + Math.random() / 2) * Math.min(0.05 * 2 ** retries, 0.5);
}

/** Where {@linkcode pacedSockets} connects, and how fast it may. */
export interface SocketTarget {
  readonly host: string;
  readonly port: number;
  /** Connections of the pool: up to twice as many sockets a second open at once. */
  readonly max: number;
  /** Aborted when the pool ends: a socket still waiting is never opened. */
  readonly signal?: AbortSignal;
}

/**
 * postgres.js's `socket` option for a pool: each call opens a TCP socket to
 * the target (still connecting: postgres.js writes its first message, which
 * the socket sends once connected, and a refused connection ends as it
 * would have), after a wait when more than `2 × max` opened within the last
 * second. Rejects once `signal` has aborted.
 *
 * @example
 * ```ts
 * postgres({ host, port, max: 2, socket: pacedSockets({ host, port, max: 2 }) });
 * ```
 */
export function pacedSockets(
  target: SocketTarget,
): () => Promise<net.Socket & { host: string; port: number }> {
  const { host, port, max, signal } = target;
  // When each of the last sockets was opened (performance.now()).
  const opened: number[] = [];
  let beyond = 0;
  return async () => {
    const now = performance.now();
    while (opened.length && opened[0] <= now - 1_000) opened.shift();
    if (opened.length >= 2 * max) {
      beyond++;
      await _wait(reconnectDelay(beyond) * 1_000, signal);
    } else beyond = 0;
    signal?.throwIfAborted();
    opened.push(performance.now());
    const socket = net.connect({ host, port });
    // What postgres.js reads of the sockets it opens itself: the TLS
    // server name (a host that is no IP address) and its error messages.
    return Object.assign(socket, { host, port });
  };
}

function _wait(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", stop);
    };
    const stop = () => {
      done();
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      done();
      resolve();
    }, ms);
    signal?.addEventListener("abort", stop, { once: true });
    if (signal?.aborted) stop();
  });
}
