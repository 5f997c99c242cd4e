/**
 * The one error type of both functions, and the one place errors become
 * responses.
 *
 * Handlers throw {@linkcode HttpError} where a failure arises;
 * {@linkcode errorResponse} turns it (or anything unknown, as a 500 with a
 * request id and no stack) into JSON with CORS headers.
 *
 * @module
 */
import { corsHeaders } from "./cors.ts";

/**
 * Frozen catalogue of error codes: the `code` field is API, never rename one.
 * Messages are the spec's Spanish texts, sent to clients as they are.
 */
export const ERRORS = {
  missing_bearer: {
    status: 401,
    message: "Authorization Bearer token requerido",
  },
  invalid_token: { status: 401, message: "Token inválido" },
  admin_required: {
    status: 403,
    message: "Acceso denegado (se requiere administrador)",
  },
  listed_account: {
    status: 403,
    message:
      "Acceso denegado (solo un administrador de ADMIN_EMAILS cambia esa cuenta)",
  },
  user_not_found: {
    status: 404,
    message: "No se encontró el usuario en la tabla usuarios",
  },
  method_not_allowed: { status: 405, message: "Method Not Allowed" },
  payload_too_large: {
    status: 413,
    message: "Cuerpo de la solicitud demasiado grande",
  },
  missing_env: {
    status: 500,
    message:
      "Faltan variables de entorno de Supabase (SUPABASE_URL, SUPABASE_ANON_KEY, SUPABASE_SERVICE_ROLE_KEY o SUPABASE_SERVICE_KEY, SUPABASE_DB_URL)",
  },
  invalid_env: {
    status: 500,
    message: "Configuración de la función inválida",
  },
  presence_update_failed: {
    status: 500,
    message: "Error actualizando presencia",
  },
  internal_error: { status: 500, message: "Error interno" },
  migration_missing: {
    status: 500,
    message: "Faltan migraciones de la base de datos",
  },
  idp_unavailable: {
    status: 503,
    message: "Proveedor de identidad no disponible",
  },
  db_timeout: {
    status: 503,
    message: "La base de datos no respondió a tiempo",
  },
  db_conflict: {
    status: 503,
    message: "Otra escritura en la base de datos chocó con esta; reintente",
  },
  bad_json: { status: 400, message: "JSON inválido" },
  validation_failed: { status: 400, message: "Solicitud inválida" },
  target_not_found: {
    status: 404,
    message: "No se encontró el usuario indicado",
  },
  email_exists: { status: 409, message: "El correo ya está en uso" },
  username_exists: {
    status: 409,
    message: "El nombre de usuario ya está en uso",
  },
  weak_password: { status: 422, message: "La contraseña es demasiado débil" },
  row_refused: {
    status: 422,
    message: "La base de datos rechaza esos valores",
  },
  idp_error: { status: 502, message: "Error del proveedor de identidad" },
  partial_failure: {
    status: 500,
    message:
      "Cambio aplicado en el proveedor de identidad pero no en la base de datos",
  },
  sync_failed: { status: 500, message: "Error sincronizando usuarios" },
  identity_unverified: {
    status: 409,
    message:
      "La cuenta con ese correo no ha demostrado ser dueña de la dirección",
  },
  shared_account: {
    status: 409,
    message: "Otra fila tiene el mismo correo: la cuenta es de las dos",
  },
  target_busy: {
    status: 409,
    message: "El usuario indicado se está modificando en otra solicitud",
  },
} as const satisfies Record<string, { status: number; message: string }>;

/** A code from the {@linkcode ERRORS} catalogue. */
export type ErrorCode = keyof typeof ERRORS;

/** Options for {@linkcode HttpError}. */
export interface HttpErrorOptions {
  /** Public extra fields merged into the body (e.g. `error`, `missing`). */
  extra?: Record<string, unknown>;
  /** Extra response headers (e.g. `Retry-After`). */
  headers?: Record<string, string>;
  /** Private cause: logged (redacted), never sent. */
  cause?: unknown;
}

/**
 * An expected failure with a status, a stable `code` and a public message.
 *
 * @example
 * ```ts
 * throw new HttpError("invalid_token", { extra: { error: "JWT expired" } });
 * ```
 */
export class HttpError extends Error {
  /** Stable snake_case code from the catalogue. */
  readonly code: ErrorCode;
  /** HTTP status. */
  readonly status: number;
  /** Public extra body fields. */
  readonly extra: Record<string, unknown>;
  /** Extra response headers. */
  readonly headers: Record<string, string>;

  constructor(code: ErrorCode, options: HttpErrorOptions = {}) {
    super(ERRORS[code].message, { cause: options.cause });
    this.name = "HttpError";
    this.code = code;
    this.status = ERRORS[code].status;
    this.extra = options.extra ?? {};
    this.headers = options.headers ?? {};
  }
}

/**
 * Builds a JSON response with the CORS headers every response carries.
 *
 * @example
 * ```ts
 * return json({ ok: true }, 200);
 * ```
 */
export function json(
  body: unknown,
  status = 200,
  headers: Record<string, string> = {},
): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: {
      ...corsHeaders,
      "Content-Type": "application/json; charset=utf-8",
      ...headers,
    },
  });
}

/**
 * Turns a thrown value into the error response. An {@linkcode HttpError}
 * keeps its status, code and extra fields; anything else becomes a 500
 * `internal_error` that hides the cause. Every 500 names the request id,
 * which finds its log lines (a 502 or 503 is a dependency's, and retried).
 */
export function errorResponse(error: unknown, requestId: string): Response {
  if (error instanceof HttpError) {
    const headers: Record<string, string> = { ...error.headers };
    if (error.status === 401) headers["WWW-Authenticate"] = "Bearer";
    return json(
      {
        message: error.message,
        code: error.code,
        ...error.extra,
        ...(error.status === 500 ? { request_id: requestId } : {}),
      },
      error.status,
      headers,
    );
  }
  return json(
    {
      message: ERRORS.internal_error.message,
      code: "internal_error",
      request_id: requestId,
    },
    500,
  );
}
