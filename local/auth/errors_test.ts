import assert from "node:assert/strict";
import {
  ApiError,
  errorResponse,
  OAuthError,
  requestApiVersion,
  WeakPasswordError,
} from "./errors.ts";

function req(version?: string): Request {
  const headers = new Headers();
  if (version !== undefined) headers.set("X-Supabase-Api-Version", version);
  return new Request("http://x/auth/v1/token", { headers });
}

Deno.test("requestApiVersion: 2024-01-01 or later selects the new shape, else the initial one", () => {
  assert.equal(requestApiVersion(req("2024-01-01")), "2024-01-01");
  assert.equal(requestApiVersion(req("2025-06-30")), "2024-01-01");
  assert.equal(requestApiVersion(req("2023-12-31")), null);
  assert.equal(requestApiVersion(req("not-a-date")), null);
  assert.equal(requestApiVersion(req()), null);
});

Deno.test("errorResponse: legacy shape carries code, error_code, msg and x-sb-error-code", async () => {
  const res = errorResponse(
    new ApiError(400, "invalid_credentials", "Invalid login credentials"),
    req(),
  );
  assert.equal(res.status, 400);
  assert.equal(res.headers.get("content-type"), "application/json");
  assert.equal(res.headers.get("x-sb-error-code"), "invalid_credentials");
  assert.equal(res.headers.get("x-supabase-api-version"), null);
  assert.deepEqual(await res.json(), {
    code: 400,
    error_code: "invalid_credentials",
    msg: "Invalid login credentials",
  });
});

Deno.test("errorResponse: 2024-01-01 shape is {code, message} and echoes the version header", async () => {
  const res = errorResponse(
    new ApiError(403, "bad_jwt", "invalid JWT"),
    req("2024-01-01"),
  );
  assert.equal(res.status, 403);
  assert.equal(res.headers.get("x-supabase-api-version"), "2024-01-01");
  assert.equal(res.headers.get("x-sb-error-code"), "bad_jwt");
  assert.deepEqual(await res.json(), {
    code: "bad_jwt",
    message: "invalid JWT",
  });
});

Deno.test("errorResponse: weak password adds weak_password.reasons; new shape sets no x-sb-error-code", async () => {
  const err = new WeakPasswordError(
    "Password should be at least 6 characters.",
    [
      "length",
    ],
  );
  const modern = errorResponse(err, req("2024-01-01"));
  assert.equal(modern.status, 422);
  assert.equal(modern.headers.get("x-sb-error-code"), null);
  assert.deepEqual(await modern.json(), {
    code: "weak_password",
    message: "Password should be at least 6 characters.",
    weak_password: { reasons: ["length"] },
  });
  const legacy = errorResponse(err, req());
  assert.equal(legacy.headers.get("x-sb-error-code"), "weak_password");
  assert.deepEqual(await legacy.json(), {
    code: 422,
    error_code: "weak_password",
    msg: "Password should be at least 6 characters.",
    weak_password: { reasons: ["length"] },
  });
});

Deno.test("errorResponse: legacyBody replaces only the legacy body", async () => {
  const err = new ApiError(500, "unexpected_failure", "Error updating user", {
    code: "23505",
    message: "duplicate key",
  });
  assert.deepEqual(await errorResponse(err, req()).json(), {
    code: "23505",
    message: "duplicate key",
  });
  assert.deepEqual(await errorResponse(err, req("2024-01-01")).json(), {
    code: "unexpected_failure",
    message: "Error updating user",
  });
});

Deno.test("errorResponse: OAuth errors and unknown errors", async () => {
  const oauth = errorResponse(
    new OAuthError("invalid_request", "refresh_token required"),
    req(),
  );
  assert.equal(oauth.status, 400);
  assert.deepEqual(await oauth.json(), {
    error: "invalid_request",
    error_description: "refresh_token required",
  });
  const unknown = errorResponse(new Error("secret detail"), req("2024-01-01"));
  assert.equal(unknown.status, 500);
  assert.deepEqual(await unknown.json(), {
    code: "unexpected_failure",
    message:
      "Unexpected failure, please check server logs for more information",
  });
});
