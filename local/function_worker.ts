/**
 * The process one Edge Function runs in under the local stack, as the Edge
 * Runtime of `supabase functions serve` runs it: it imports the function's
 * deployed entry (`index.ts`) and serves what that entry serves, either the
 * handler it hands to `Deno.serve` or its `export default { fetch }`, on a
 * loopback port of the stack's choosing.
 *
 * Usage (by {@linkcode FunctionHost} only): `deno run <flags> function_worker.ts <entry URL>`.
 * The first line on stdout that starts with {@linkcode WORKER_READY} carries
 * the port; everything else the function prints is its log.
 *
 * @module
 */

/** Prefix of the line that tells the stack the worker serves, then the port. */
export const WORKER_READY = "__local_function_ready__";

type Handler = (req: Request, info: Deno.ServeHandlerInfo) =>
  | Response
  | Promise<Response>;

if (import.meta.main) await _main();

async function _main(): Promise<void> {
  const [entry] = Deno.args;
  // The stack holds this process's stdin open: when the stack is gone, even
  // killed outright, stdin ends and so does this worker, never an orphan.
  void (async () => {
    for await (const _ of Deno.stdin.readable) {
      // Nothing is ever written; only the end matters.
    }
    Deno.exit(0);
  })();
  const serve = Deno.serve.bind(Deno);
  let served = false;
  const listen = (handler: Handler): Deno.HttpServer => {
    served = true;
    return serve({
      hostname: "127.0.0.1",
      port: 0,
      onListen: ({ port }) => console.log(`${WORKER_READY} ${port}`),
    }, handler);
  };
  // An entry calls Deno.serve with options meant for the platform (a port
  // of its own, say); here the stack picks the address, so only the
  // handler is kept.
  Object.defineProperty(Deno, "serve", {
    configurable: true,
    value: (...args: unknown[]) => {
      const handler = _handlerOf(args);
      if (!handler) {
        throw new TypeError("Deno.serve was called without a handler");
      }
      return listen(handler);
    },
  });
  // The Edge Runtime's global for work that outlives the response; here
  // the process lives on, so the promise only needs its failure logged.
  const g = globalThis as { EdgeRuntime?: unknown };
  g.EdgeRuntime ??= {
    waitUntil: (work: Promise<unknown>) => {
      work.catch((error) => console.error(error));
    },
  };
  const mod = await import(entry);
  if (served) return;
  const fetch = (mod.default as { fetch?: unknown } | undefined)?.fetch;
  if (typeof fetch !== "function") {
    console.error(
      `${entry} neither calls Deno.serve nor exports default { fetch }: nothing to serve`,
    );
    Deno.exit(1);
  }
  listen((req, info) => fetch.call(mod.default, req, info));
}

function _handlerOf(args: unknown[]): Handler | undefined {
  for (const arg of args) {
    if (typeof arg === "function") return arg as Handler;
    const options = arg as { handler?: unknown } | null;
    if (typeof options?.handler === "function") {
      return options.handler as Handler;
    }
  }
  return undefined;
}
