/**
 * Reading requests the way Supabase Auth's Go handlers do: JSON bodies
 * decoded into typed structs (wrong types are `bad_json`), Go's duration
 * syntax for `ban_duration`, the caller's address and user agent.
 *
 * @module
 */
import { ApiError, badRequest, errorResponse, notFound } from "./errors.ts";

/** A decoded JSON body; `null` or absent body decodes to `{}` as in Go. */
export type Body = Record<string, unknown>;

/** Go's `%q` for a string (close enough: JSON string syntax). */
export function goQuote(s: string): string {
  return JSON.stringify(s);
}

/**
 * Reads the request body as JSON like `retrieveRequestParams`: an
 * unparsable body is 400 `bad_json` "Could not parse request body as JSON:
 * ...", with Go's decoder messages for the common cases.
 */
export async function readJson(req: Request, goStruct: string): Promise<Body> {
  const text = await req.text();
  if (text.length > 1 << 20) {
    throw new ApiError(
      413,
      "request_entity_too_large",
      `Request body too large (max ${1 << 20} bytes)`,
    );
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw _badJson(_goJsonSyntaxError(text));
  }
  if (value === null) return {};
  if (typeof value !== "object" || Array.isArray(value)) {
    throw _badJson(
      `json: cannot unmarshal ${
        _jsonKind(value)
      } into Go value of type api.${goStruct}`,
    );
  }
  return value as Body;
}

/**
 * A string field: absent or `null` is `""` (Go leaves the zero value),
 * anything but a string is `bad_json`.
 */
export function stringField(
  body: Body,
  name: string,
  goStruct: string,
): string {
  const v = body[name];
  if (v === undefined || v === null) return "";
  if (typeof v !== "string") throw _typeError(v, goStruct, name, "string");
  return v;
}

/** A `*string` field: absent or `null` is `null`. */
export function optionalStringField(
  body: Body,
  name: string,
  goStruct: string,
): string | null {
  const v = body[name];
  if (v === undefined || v === null) return null;
  if (typeof v !== "string") throw _typeError(v, goStruct, name, "string");
  return v;
}

/** A `bool` field: absent or `null` is `false`. */
export function boolField(body: Body, name: string, goStruct: string): boolean {
  const v = body[name];
  if (v === undefined || v === null) return false;
  if (typeof v !== "boolean") throw _typeError(v, goStruct, name, "bool");
  return v;
}

/** A `map[string]interface{}` field: absent or `null` is `null`. */
export function mapField(
  body: Body,
  name: string,
  goStruct: string,
): Record<string, unknown> | null {
  const v = body[name];
  if (v === undefined || v === null) return null;
  if (typeof v !== "object" || Array.isArray(v)) {
    throw _typeError(v, goStruct, name, "map[string]interface {}");
  }
  return v as Record<string, unknown>;
}

function _badJson(detail: string): ApiError {
  return badRequest(
    "bad_json",
    `Could not parse request body as JSON: ${detail}`,
  );
}

function _typeError(
  value: unknown,
  goStruct: string,
  field: string,
  goType: string,
): ApiError {
  return _badJson(
    `json: cannot unmarshal ${
      _jsonKind(value)
    } into Go struct field ${goStruct}.${field} of type ${goType}`,
  );
}

function _jsonKind(value: unknown): string {
  if (Array.isArray(value)) return "array";
  if (typeof value === "object") return "object";
  return typeof value;
}

function _goJsonSyntaxError(text: string): string {
  const trimmed = text.trimStart();
  if (trimmed === "") return "unexpected end of JSON input";
  if (!/^[[{"\-0-9tfn]/.test(trimmed)) {
    return `invalid character '${trimmed[0]}' looking for beginning of value`;
  }
  return "unexpected end of JSON input";
}

const _UNITS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  "µs": 1e-3,
  "μs": 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

/**
 * Parses Go's `time.ParseDuration` syntax (`"24h"`, `"1h30m"`, `"-5m"`)
 * into ms, throwing Go's error text.
 */
export function parseGoDuration(text: string): number {
  const quoted = goQuote(text);
  let s = text;
  let sign = 1;
  if (s.startsWith("-") || s.startsWith("+")) {
    if (s[0] === "-") sign = -1;
    s = s.slice(1);
  }
  if (s === "0") return 0;
  if (s === "") throw new Error(`time: invalid duration ${quoted}`);
  let total = 0;
  while (s !== "") {
    const num = /^(\d*)(\.\d*)?/.exec(s)!;
    if (num[0] === "" || num[0] === ".") {
      throw new Error(`time: invalid duration ${quoted}`);
    }
    s = s.slice(num[0].length);
    const unit = /^[^\d.]*/.exec(s)![0];
    if (unit === "") {
      throw new Error(`time: missing unit in duration ${quoted}`);
    }
    const factor = _UNITS[unit];
    if (factor === undefined) {
      throw new Error(
        `time: unknown unit ${goQuote(unit)} in duration ${quoted}`,
      );
    }
    s = s.slice(unit.length);
    total += Number(num[0]) * factor;
  }
  return sign * total;
}

/**
 * The caller's address as Supabase Auth records it (from the first
 * X-Forwarded-For hop, as its xff middleware does), or `null` when the
 * request does not carry a valid one.
 */
export function clientIp(req: Request): string | null {
  const forwarded = req.headers.get("x-forwarded-for") ??
    req.headers.get("x-real-ip");
  const first = forwarded?.split(",")[0].trim();
  if (!first) return null;
  // Must fit the sessions.ip inet column.
  return /^[0-9a-fA-F:.]+$/.test(first) && first.length <= 45 ? first : null;
}

/** The User-Agent header, or `null`. */
export function userAgent(req: Request): string | null {
  return req.headers.get("user-agent") || null;
}

/** Whether `s` parses as a UUID the way gofrs/uuid's FromString accepts. */
export function isUuid(s: string): boolean {
  return /^(?:\{)?[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}(?:\})?$/
    .test(s) || /^urn:uuid:[0-9a-fA-F-]{36}$/.test(s);
}

/** Canonical lower-case hyphenated form of a UUID accepted by {@linkcode isUuid}. */
export function canonicalUuid(s: string): string {
  const hex = s.replace(/^urn:uuid:/, "").replace(/[{}-]/g, "").toLowerCase();
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${
    hex.slice(16, 20)
  }-${hex.slice(20)}`;
}

/** The answer for a route the stand-in does not serve: 404 `not_found`, JSON. */
export function notFoundRoute(req: Request): Response {
  const { pathname } = new URL(req.url);
  // Supabase Auth's router answers plain text here, which supabase-js
  // cannot parse ("AuthUnknownError"); the stand-in answers in Auth's JSON
  // error shape and says that the route may well exist on a hosted project.
  return errorResponse(
    notFound(
      "not_found",
      `${req.method} ${pathname} is not supported by the local Auth stand-in (docs/local.md lists what it serves)`,
    ),
    req,
  );
}

/** chi's 405 for a known route with another method. */
export function methodNotAllowed(): Response {
  return new Response(null, { status: 405 });
}
