/**
 * Ways a stand-in server in a test can fail, as a real Supabase Auth (or a
 * gateway in front of it) fails.
 *
 * @module
 */

/** A 500 with Supabase Auth's legacy error body. */
export function authServerError(msg = "fault injected by test"): Response {
  return Response.json(
    { code: 500, error_code: "unexpected_failure", msg },
    { status: 500 },
  );
}

/**
 * A 200 whose body breaks off mid-stream: the caller sees a network error
 * after the server has acted.
 */
export function droppedConnection(
  reason = "connection dropped by test proxy",
): Response {
  return new Response(
    new ReadableStream({
      start(c) {
        c.enqueue(new TextEncoder().encode('{"id":'));
        c.error(new Error(reason));
      },
    }),
    { status: 200, headers: { "Content-Type": "application/json" } },
  );
}

/** Waits `ms`, or less if the caller of `req` gives up first. */
export function delayUnlessAborted(req: Request, ms: number): Promise<void> {
  return new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    req.signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/**
 * A loopback proxy to the stack at `apiUrl` that lets `onWrite` answer the
 * Auth admin writes (`POST`/`PUT`/`DELETE` under `/auth/v1/admin/users`)
 * itself when it returns a response, and forwards everything else.
 * `forward` lets the write through to Auth and gives back Auth's answer.
 * Serve the functions against it with `withFunctionEnv({ SUPABASE_URL })`.
 */
export function adminWriteProxy(
  apiUrl: string,
  onWrite: (
    req: Request,
    forward: () => Promise<Response>,
  ) => Promise<Response | null>,
): { url: string; close: () => Promise<void> } {
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    async (req) => {
      const url = new URL(req.url);
      const forward = () =>
        fetch(`${apiUrl}${url.pathname}${url.search}`, {
          method: req.method,
          headers: req.headers,
          body: req.body,
        });
      if (
        req.method !== "GET" && url.pathname.startsWith("/auth/v1/admin/users")
      ) {
        const answer = await onWrite(req, forward);
        if (answer) return answer;
      }
      return await forward();
    },
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    close: () => server.shutdown(),
  };
}

/**
 * A loopback TCP proxy to the Postgres server of `dbUrl` that, once armed,
 * lets the next `COMMIT` through to the database and then cuts the
 * client's connection before the answer comes back: the transaction is
 * committed, and the client sees a dropped connection. Later connections
 * are forwarded untouched. Serve the functions against `url` with
 * `withFunctionEnv({ SUPABASE_DB_URL })`.
 */
export function commitAnswerDroppingProxy(dbUrl: string): {
  url: string;
  /** Drops the answer of the next COMMIT; resolves once it has. */
  arm: () => Promise<void>;
  close: () => Promise<void>;
} {
  let armed: (() => void) | null = null;
  const pipe = async (
    from: Deno.Conn,
    to: Deno.Conn,
    link: { silenced: boolean; cut: () => void },
    watch: boolean,
  ) => {
    const buf = new Uint8Array(64 * 1024);
    try {
      for (;;) {
        const n = await from.read(buf);
        if (n === null) break;
        const chunk = buf.subarray(0, n);
        // postgres.js sends COMMIT as the text of a Parse message.
        const done = watch && armed &&
            _COMMIT.test(new TextDecoder("latin1").decode(chunk))
          ? armed
          : null;
        // From here on, nothing the server says reaches the client.
        if (done) link.silenced = true;
        if (!watch && link.silenced) continue;
        await to.write(chunk);
        if (done) {
          armed = null;
          // Let the server act on it, then cut the client off.
          await new Promise((r) => setTimeout(r, 200));
          link.cut();
          done();
          break;
        }
      }
    } catch {
      // A side closed.
    }
    link.cut();
  };
  const proxy = _tcpProxy(dbUrl, (client, server, cut) => {
    const link = { silenced: false, cut };
    pipe(client, server, link, true);
    pipe(server, client, link, false);
  });
  return {
    ...proxy,
    arm: () => new Promise<void>((resolve) => (armed = resolve)),
  };
}

// The statement text `commit`, NUL-terminated, right after the statement
// name's NUL (Parse) or the message length (Query): the wire bytes are
// control characters by nature.
// deno-lint-ignore no-control-regex
const _COMMIT = /[\x00-\x1f]commit\x00/i;

/**
 * A loopback TCP proxy to the Postgres server of `dbUrl` that, once
 * `hold(from)` is called, keeps what the server says from the first chunk
 * whose latin1 text matches `from` (a command tag such as `SELECT 1`: the
 * statement has run, its snapshot taken) and passes on everything else: the
 * answer is still on the way. `release()` delivers what was kept, in
 * order; `held()` is what was kept so far, as latin1 text.
 */
export function answerHoldingProxy(dbUrl: string): {
  url: string;
  hold: (from: RegExp) => void;
  release: () => void;
  held: () => string;
  close: () => Promise<void>;
} {
  let released: Promise<void> | null = null;
  let release = () => {};
  let armed: RegExp | null = null;
  let kept = "";
  const pipe = async (
    from: Deno.Conn,
    to: Deno.Conn,
    cut: () => void,
    answers: boolean,
  ) => {
    const buf = new Uint8Array(64 * 1024);
    try {
      for (;;) {
        const n = await from.read(buf);
        if (n === null) break;
        const text = new TextDecoder("latin1").decode(buf.subarray(0, n));
        if (answers && armed?.test(text)) armed = null;
        // Kept: this pipe reads nothing more until the release, so what
        // follows cannot overtake it.
        if (answers && released && !armed) {
          kept += text;
          await released;
        }
        await to.write(buf.subarray(0, n));
      }
    } catch {
      // A side closed.
    }
    cut();
  };
  const proxy = _tcpProxy(dbUrl, (client, server, cut) => {
    pipe(client, server, cut, false);
    pipe(server, client, cut, true);
  });
  return {
    url: proxy.url,
    hold: (from) => {
      armed = from;
      released ??= new Promise<void>((r) => release = r);
    },
    release: () => {
      armed = null;
      released = null;
      release();
    },
    held: () => kept,
    close: () => {
      release();
      return proxy.close();
    },
  };
}

// A loopback TCP proxy to the Postgres server of `dbUrl`: each client's
// connection is joined to a new one to the server by `link`, given a `cut`
// that closes both; `close` stops listening and cuts every connection. The
// one home of the proxies above.
function _tcpProxy(
  dbUrl: string,
  link: (client: Deno.Conn, server: Deno.Conn, cut: () => void) => void,
): { url: string; close: () => Promise<void> } {
  const target = new URL(dbUrl);
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const open = new Set<Deno.Conn>();
  const closeAll = (conns: Iterable<Deno.Conn>) => {
    for (const c of [...conns]) {
      open.delete(c);
      try {
        c.close();
      } catch {
        // Already closed.
      }
    }
  };
  (async () => {
    for await (const client of listener) {
      const server = await Deno.connect({
        hostname: target.hostname,
        port: Number(target.port || 5432),
      });
      open.add(client);
      open.add(server);
      let closed = false;
      link(client, server, () => {
        if (closed) return;
        closed = true;
        closeAll([client, server]);
      });
    }
  })().catch(() => {});
  const proxied = new URL(dbUrl);
  proxied.hostname = "127.0.0.1";
  proxied.port = String((listener.addr as Deno.NetAddr).port);
  return {
    url: proxied.href,
    close: () => {
      listener.close();
      closeAll(open);
      return Promise.resolve();
    },
  };
}
