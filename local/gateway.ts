/**
 * The local API gateway, standing in for Kong and the Edge Runtime relay of
 * `supabase start`: `/auth/v1/*` to the Auth stand-in, `/functions/v1/<name>`
 * (and the spec's `/api/<name>`) to the functions.
 *
 * @module
 */
import {
  LOCAL_JWT_SECRET,
  type SigningKey,
  verifyAccessToken,
} from "./auth/mod.ts";
import type { LocalFunction } from "./functions.ts";

/** What the gateway routes to. */
export interface GatewayOptions {
  /** The Auth stand-in, for paths under `/auth/v1`. */
  auth: (req: Request) => Promise<Response>;
  /**
   * Functions by name: a fixed set (tests, benchmarks), or a lookup asked on
   * every request (the stack's `FunctionHost`, which finds new
   * functions as they appear).
   */
  functions:
    | Record<string, LocalFunction>
    | ((name: string) => LocalFunction | undefined);
  /** Whether a bearer token is a valid JWT of this project (for `verify_jwt`). */
  isValidJwt: (token: string) => Promise<boolean>;
  /**
   * The project's API keys (anon, service_role). When given, `/auth/v1/*`
   * requires one of them, or one of `opaqueKeys`, as the `apikey` header or
   * query parameter, as Supabase's hosted API gateway does ({@linkcode
   * checkApiKey}).
   */
  apiKeys?: readonly string[];
  /**
   * The publishable and secret keys (`sb_publishable_…`, `sb_secret_…`),
   * each with the legacy JWT it stands for on the way to Auth
   * ({@linkcode authorizationFor}).
   */
  opaqueKeys?: Readonly<Record<string, string>>;
  /**
   * Keys the project has turned off: the legacy anon and service_role keys
   * once a hosted project disables legacy API keys (the dashboard turns
   * both off together). `/auth/v1/*` refuses them as `apikey` with 401
   * `Legacy API keys are disabled`, as the hosted gateway does.
   */
  disabledKeys?: readonly string[];
  /** The demo page, for paths under `/demo` (none when absent). */
  demo?: (req: Request) => Promise<Response>;
  /** The local inbox, for paths under `/inbox` (none when absent). */
  inbox?: (req: Request) => Promise<Response>;
}

// Auth paths the hosted gateway and `supabase start`'s Kong serve without a
// key: links opened from emails and OAuth redirects, and the public keys
// that verify tokens.
const _OPEN_AUTH_PATHS = new Set([
  "/auth/v1/verify",
  "/auth/v1/callback",
  "/auth/v1/authorize",
  "/auth/v1/.well-known/jwks.json",
]);

/**
 * The hosted gateway's answer to an Auth request without a valid `apikey`
 * (header or query parameter), or `null` when it may pass: 401 `No API key
 * found in request` when there is none (or it is empty), 401 `Legacy API
 * keys are disabled` when it is one of `disabled`, 401 `Invalid API key`
 * when it is not one of `keys`. Functions are not checked here: the
 * gateway lets `/functions/v1/*` through, and a function with `verify_jwt`
 * checks its bearer token. CORS preflights pass.
 *
 * @example
 * ```ts
 * checkApiKey(new Request("http://x/auth/v1/user"), [anonKey])?.status; // 401
 * ```
 */
export function checkApiKey(
  req: Request,
  keys: readonly string[],
  disabled: readonly string[] = [],
): Response | null {
  const url = new URL(req.url);
  if (req.method === "OPTIONS" || _OPEN_AUTH_PATHS.has(url.pathname)) {
    return null;
  }
  const key = req.headers.get("apikey") ?? url.searchParams.get("apikey");
  if (!key) {
    return Response.json({
      message: "No API key found in request",
      hint: "No `apikey` request header or url param was found.",
    }, { status: 401, headers: _CORS });
  }
  if (disabled.includes(key)) {
    return Response.json({ message: "Legacy API keys are disabled" }, {
      status: 401,
      headers: _CORS,
    });
  }
  if (!keys.includes(key)) {
    return Response.json({
      message: "Invalid API key",
      hint: "Double check your Supabase `anon` or `service_role` API key.",
    }, { status: 401, headers: _CORS });
  }
  return null;
}

const _CORS = { "Access-Control-Allow-Origin": "*" };

/**
 * The `Authorization` header Auth receives, as the CLI's Kong sets it: a
 * caller's own bearer token passes unless it is an `sb_` key (not a JWT:
 * supabase-js sends its API key there when there is no session); otherwise
 * an opaque `apikey` header is replaced by the legacy JWT it stands for, so the
 * secret key acts as `service_role` and the publishable key as `anon`.
 * `null`: leave the header as it is.
 *
 * @example
 * ```ts
 * authorizationFor(null, LOCAL_SECRET_KEY, LOCAL_OPAQUE_KEYS);
 * // `Bearer ${LOCAL_SERVICE_ROLE_KEY}`
 * ```
 */
export function authorizationFor(
  authorization: string | null,
  apikey: string | null,
  opaqueKeys: Readonly<Record<string, string>>,
): string | null {
  if (authorization !== null && !authorization.startsWith("Bearer sb_")) {
    return null;
  }
  const stands = apikey !== null && Object.hasOwn(opaqueKeys, apikey)
    ? opaqueKeys[apikey]
    : null;
  if (stands !== null) return `Bearer ${stands}`;
  // An `sb_` bearer that stands for nothing known is no token: Auth sees
  // the request as it would without one.
  return authorization === null ? null : "";
}

function _withAuthorization(
  req: Request,
  opaqueKeys: Readonly<Record<string, string>>,
): Request {
  // The `apikey` header only, as the CLI's Kong builds the bearer: a key in
  // the query passes the key check but gives Auth no token.
  const apikey = req.headers.get("apikey");
  const header = authorizationFor(
    req.headers.get("authorization"),
    apikey,
    opaqueKeys,
  );
  if (header === null) return req;
  const headers = new Headers(req.headers);
  if (header === "") headers.delete("authorization");
  else headers.set("authorization", header);
  return new Request(req, { headers });
}

// `/functions/v1/<name>` and any path below it (a function may route on
// it), and the spec's `/api/<name>`.
const _FUNCTION_PATH =
  /^\/(?:functions\/v1\/([A-Za-z0-9_-]+)(?:\/.*)?|api\/([A-Za-z0-9_-]+)\/?)$/;

/**
 * Builds the gateway's request handler.
 *
 * @example
 * ```ts
 * Deno.serve({ port: 54321 }, createGateway({ auth, functions, isValidJwt }));
 * ```
 */
export function createGateway(
  options: GatewayOptions,
): (req: Request) => Promise<Response> {
  return async (req) => {
    const { pathname } = new URL(req.url);
    if (pathname === "/_internal/health") {
      return Response.json({ ok: true });
    }
    if (pathname === "/auth/v1" || pathname.startsWith("/auth/v1/")) {
      if (!options.apiKeys) return await options.auth(req);
      const opaque = options.opaqueKeys ?? {};
      const refused = checkApiKey(req, [
        ...options.apiKeys,
        ...Object.keys(opaque),
      ], options.disabledKeys);
      return refused || await options.auth(_withAuthorization(req, opaque));
    }
    if (
      options.demo && (pathname === "/demo" || pathname.startsWith("/demo/"))
    ) {
      return await options.demo(req);
    }
    if (
      options.inbox &&
      (pathname === "/inbox" || pathname.startsWith("/inbox/"))
    ) {
      return await options.inbox(req);
    }
    const match = _FUNCTION_PATH.exec(pathname);
    if (!match) {
      return Response.json({ message: "no Route matched with those values" }, {
        status: 404,
      });
    }
    const name = match[1] ?? match[2];
    const fn = typeof options.functions === "function"
      ? options.functions(name)
      : Object.hasOwn(options.functions, name)
      ? options.functions[name]
      : undefined;
    if (!fn) {
      return Response.json({
        code: "NOT_FOUND",
        message: "Requested function was not found",
      }, { status: 404 });
    }
    if (fn.verifyJwt && req.method !== "OPTIONS") {
      const header = req.headers.get("authorization") ?? "";
      const token = header.startsWith("Bearer ") ? header.slice(7) : "";
      if (!token) {
        return Response.json({
          code: "UNAUTHORIZED_NO_AUTH_HEADER",
          message: "Missing authorization header",
        }, { status: 401 });
      }
      if (!(await options.isValidJwt(token))) {
        return Response.json({
          code: "UNAUTHORIZED_INVALID_JWT_FORMAT",
          message: "Invalid JWT",
        }, { status: 401 });
      }
    }
    return await fn.handler(req);
  };
}

/**
 * The `verify_jwt` check of the local stack: a JWT signed with the local
 * JWT secret (anon and service keys, HS256 tokens) or with the stack's
 * ES256 signing key, and not expired.
 */
export function localJwtCheck(
  signingKey: SigningKey,
): (token: string) => Promise<boolean> {
  return async (token) => {
    try {
      await verifyAccessToken(token, {
        jwtSecret: LOCAL_JWT_SECRET,
        publicJwks: [signingKey.publicJwk],
      });
      return true;
    } catch {
      return false;
    }
  };
}
