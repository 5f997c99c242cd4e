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
