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
