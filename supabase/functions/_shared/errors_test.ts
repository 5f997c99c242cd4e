import assert from "node:assert/strict";
import { errorResponse, ERRORS, HttpError } from "./errors.ts";

Deno.test("errorResponse: an HttpError keeps status, message, code and extra fields, with CORS", async () => {
  const res = errorResponse(
    new HttpError("invalid_token", { extra: { error: "JWT expired" } }),
    "req-1",
  );
  assert.equal(res.status, 401);
  assert.equal(res.headers.get("www-authenticate"), "Bearer");
  assert.equal(res.headers.get("access-control-allow-origin"), "*");
  assert.deepEqual(await res.json(), {
    message: "Token inválido",
    code: "invalid_token",
    error: "JWT expired",
  });
});

Deno.test("errorResponse: anything unknown is a 500 with the request id and no detail", async () => {
  const res = errorResponse(new Error("secret stack detail"), "req-2");
  assert.equal(res.status, 500);
  const body = await res.json();
  assert.deepEqual(body, {
    message: "Error interno",
    code: "internal_error",
    request_id: "req-2",
  });
});

Deno.test("errorResponse: extra headers such as Retry-After are sent", () => {
  const res = errorResponse(
    new HttpError("idp_unavailable", { headers: { "Retry-After": "5" } }),
    "r",
  );
  assert.equal(res.status, 503);
  assert.equal(res.headers.get("retry-after"), "5");
});

Deno.test("ERRORS: the spec's messages are kept word for word", () => {
  assert.equal(
    ERRORS.missing_bearer.message,
    "Authorization Bearer token requerido",
  );
  assert.equal(
    ERRORS.admin_required.message,
    "Acceso denegado (se requiere administrador)",
  );
  assert.equal(
    ERRORS.user_not_found.message,
    "No se encontró el usuario en la tabla usuarios",
  );
  assert.equal(ERRORS.method_not_allowed.message, "Method Not Allowed");
  assert.equal(
    ERRORS.presence_update_failed.message,
    "Error actualizando presencia",
  );
  for (const [code, { status }] of Object.entries(ERRORS)) {
    assert.match(code, /^[a-z]+(_[a-z]+)*$/);
    assert.ok(status >= 400 && status < 600, code);
  }
});
