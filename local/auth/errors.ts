/**
 * Errors of the Auth stand-in and how they are written on the wire.
 *
 * Supabase Auth (internal/api/errors.go) has two body shapes and picks one
 * from the request's `X-Supabase-Api-Version` header: from `2024-01-01` on it
 * sends `{code: "<error_code>", message}` and echoes the version header;
 * without it (or with an older or unparsable date) it sends the legacy
 * `{code: <status>, error_code, msg}`. `x-sb-error-code` is set on every
 * error that has a code, except weak-password errors in the new shape.
 *
 * @module
 */

/** Name of the header supabase-js sends and Supabase Auth echoes. */
export const API_VERSION_HEADER = "X-Supabase-Api-Version";

/** The only API version Supabase Auth knows besides the initial one. */
export const API_VERSION_2024_01_01 = "2024-01-01";

/** An error answered with a status, a snake_case code and a message. */
export class ApiError extends Error {
  /** HTTP status. */
  readonly status: number;
  /** Supabase Auth `error_code`, e.g. `"invalid_credentials"`. */
  readonly errorCode: string;
  /**
   * Body sent instead of the legacy shape: Supabase Auth shows Postgres
   * constraint errors behind an error as `{code, message, detail}` there.
   */
  readonly legacyBody?: Record<string, unknown>;

  /**
   * @param status HTTP status
   * @param errorCode snake_case code from Supabase Auth's errorcode.go
   * @param message text shown to the client
   * @param legacyBody replaces the legacy (no API version) body
   */
  constructor(
    status: number,
    errorCode: string,
    message: string,
    legacyBody?: Record<string, unknown>,
  ) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.errorCode = errorCode;
    this.legacyBody = legacyBody;
  }
}

/** A password that does not meet the strength rules (always 422). */
export class WeakPasswordError extends Error {
  /** Why, e.g. `["length"]`. */
  readonly reasons: string[];

  /**
   * @param message joined human-readable messages
   * @param reasons machine-readable reasons
   */
  constructor(message: string, reasons: string[]) {
    super(message);
    this.name = "WeakPasswordError";
    this.reasons = reasons;
  }
}

/** An OAuth2-style error (`{error, error_description}`, always 400). */
export class OAuthError extends Error {
  /** OAuth2 error, e.g. `"invalid_request"`. */
  readonly error: string;

  /**
   * @param error OAuth2 error name
   * @param description human-readable description
   */
  constructor(error: string, description: string) {
    super(description);
    this.name = "OAuthError";
    this.error = error;
  }
}

/** Shorthand for a 400 {@linkcode ApiError}. */
export function badRequest(code: string, message: string): ApiError {
  return new ApiError(400, code, message);
}

/** Shorthand for a 403 {@linkcode ApiError}. */
export function forbidden(code: string, message: string): ApiError {
  return new ApiError(403, code, message);
}

/** Shorthand for a 404 {@linkcode ApiError}. */
export function notFound(code: string, message: string): ApiError {
  return new ApiError(404, code, message);
}

/** Shorthand for a 422 {@linkcode ApiError}. */
export function unprocessable(code: string, message: string): ApiError {
  return new ApiError(422, code, message);
}

/**
 * 422 `email_exists`: another account has the address (Supabase Auth's
 * `DuplicateEmailMsg`).
 */
export function emailExists(): ApiError {
  return unprocessable(
    "email_exists",
    "A user with this email address has already been registered",
  );
}

/** Shorthand for a 500 {@linkcode ApiError} (`unexpected_failure`). */
export function internal(message: string): ApiError {
  return new ApiError(500, "unexpected_failure", message);
}

/**
 * The API version a request asks for: `"2024-01-01"` when its header names
 * that day or later, otherwise `null` (the initial version). Like Supabase
 * Auth, an unparsable header silently means the initial version.
 */
export function requestApiVersion(req: Request): string | null {
  const value = req.headers.get(API_VERSION_HEADER);
  if (!value || !/^\d{4}-\d{2}-\d{2}$/.test(value)) return null;
  const time = Date.parse(`${value}T00:00:00Z`);
  if (Number.isNaN(time)) return null;
  return time >= Date.parse("2024-01-01T00:00:00Z")
    ? API_VERSION_2024_01_01
    : null;
}

/**
 * A JSON response as Supabase Auth writes it (`Content-Type:
 * application/json`, no charset).
 */
export function jsonResponse(
  status: number,
  body: unknown,
  headers: HeadersInit = {},
): Response {
  const h = new Headers(headers);
  h.set("Content-Type", "application/json");
  return new Response(JSON.stringify(body), { status, headers: h });
}

/**
 * Turns any thrown value into the response Supabase Auth would send for it;
 * unknown errors become the generic 500 so that nothing internal leaks.
 */
export function errorResponse(err: unknown, req: Request): Response {
  const version = requestApiVersion(req);
  const headers = new Headers();
  if (version) headers.set(API_VERSION_HEADER, version);

  if (err instanceof WeakPasswordError) {
    if (version) {
      return jsonResponse(422, {
        code: "weak_password",
        message: err.message,
        weak_password: { reasons: err.reasons },
      }, headers);
    }
    headers.set("x-sb-error-code", "weak_password");
    return jsonResponse(422, {
      code: 422,
      error_code: "weak_password",
      msg: err.message,
      weak_password: { reasons: err.reasons },
    }, headers);
  }
  if (err instanceof ApiError) {
    headers.set("x-sb-error-code", err.errorCode);
    const body = version
      ? { code: err.errorCode, message: err.message }
      : err.legacyBody ??
        { code: err.status, error_code: err.errorCode, msg: err.message };
    return jsonResponse(err.status, body, headers);
  }
  if (err instanceof OAuthError) {
    return jsonResponse(400, {
      error: err.error,
      error_description: err.message,
    }, headers);
  }
  const message =
    "Unexpected failure, please check server logs for more information";
  return jsonResponse(
    500,
    version
      ? { code: "unexpected_failure", message }
      : { code: 500, error_code: "unexpected_failure", msg: message },
    headers,
  );
}
