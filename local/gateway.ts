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
  /** Functions by name. */
  functions: Record<string, LocalFunction>;
  /** Whether a bearer token is a valid JWT of this project (for `verify_jwt`). */
  isValidJwt: (token: string) => Promise<boolean>;
  /** The demo page, for paths under `/demo` (none when absent). */
  demo?: (req: Request) => Promise<Response>;
}

const _FUNCTION_PATH = /^\/(?:functions\/v1|api)\/([A-Za-z0-9_-]+)\/?$/;

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
      return await options.auth(req);
    }
    if (
      options.demo && (pathname === "/demo" || pathname.startsWith("/demo/"))
    ) {
      return await options.demo(req);
    }
    const match = _FUNCTION_PATH.exec(pathname);
    if (!match) {
      return Response.json({ message: "no Route matched with those values" }, {
        status: 404,
      });
    }
    const fn = options.functions[match[1]];
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
