/**
 * The project's functions served on a port of their own, under an
 * environment the test chose (a dead `SUPABASE_DB_URL`, an identity
 * provider that fails, another setting), with dependencies of their own:
 * the one home of "the same handlers, served elsewhere" for the end-to-end
 * tests and `tests/verify`.
 *
 * @module
 */
import {
  functionEnv,
  type FunctionEnvInput,
  localFunctions,
} from "../../local/functions.ts";
import { createGateway } from "../../local/gateway.ts";
import { createDeps } from "../../supabase/functions/_shared/deps.ts";

/** Functions served by {@linkcode serveFunctions}. */
export interface ServedFunctions {
  /** The gateway's URL: `/functions/v1/<name>` and `/auth/v1/…`. */
  readonly apiUrl: string;
  /** Stops the server, then ends the functions' own pools. */
  close(): Promise<void>;
}

/**
 * Serves the functions over `functionEnv(input)` on a free loopback port.
 * `/auth/v1` goes to `auth` (default: 404, no Auth behind this gateway).
 * The gateway's own JWT check refuses every token: the project's functions
 * are `verify_jwt = false` and check their callers themselves.
 */
export function serveFunctions(
  input: FunctionEnvInput,
  auth: (req: Request) => Promise<Response> = () =>
    Promise.resolve(new Response(null, { status: 404 })),
): ServedFunctions {
  const deps = createDeps();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    createGateway({
      auth,
      functions: localFunctions(functionEnv(input), deps),
      isValidJwt: () => Promise.resolve(false),
    }),
  );
  return {
    apiUrl: `http://127.0.0.1:${server.addr.port}`,
    async close() {
      await server.shutdown();
      await deps.close();
    },
  };
}

/** `req` sent on to the same path and query under `baseUrl`. */
export function forwardTo(baseUrl: string, req: Request): Promise<Response> {
  const url = new URL(req.url);
  return fetch(`${baseUrl}${url.pathname}${url.search}`, req);
}
