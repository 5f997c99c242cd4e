/**
 * The request bodies auth-sync accepts, as zod schemas: parsed at the edge
 * into typed values, or refused with 400 `validation_failed` and the issues.
 *
 * @module
 */
import { z } from "zod";
import { AUTH_EMAIL_FORMAT, parseBody } from "../_shared/validation.ts";

/** Most rows one `sync` call looks at. */
export const MAX_SYNC_LIMIT = 500;

/** Rows a `sync` call looks at when `limit` is not given. */
export const DEFAULT_SYNC_LIMIT = 100;

// bcrypt, and therefore Supabase Auth, refuses passwords over 72 bytes.
const _MAX_PASSWORD_BYTES = 72;

const _RowId = z.int().positive();

// Postgres text cannot hold U+0000 ("invalid byte sequence for encoding
// UTF8: 0x00"), and an account's email or password with one would be
// refused or cut short somewhere along the way: refused here, as a 400
// naming the field, instead of a 500 from the database.
const _NUL_MESSAGE = "Must not contain the NUL character (U+0000)";
const _noNul = (value: string) => !value.includes("\u0000");

// Supabase Auth stores emails trimmed and lower-cased; usuarios.correo keeps
// the same spelling so the two compare equal. An address whose format Auth
// would refuse (AUTH_EMAIL_FORMAT) is the request's fault, answered 400
// here, not a 502 from Auth.
const _Email = z.string().refine(_noNul, { message: _NUL_MESSAGE }).trim()
  .toLowerCase().pipe(
    z.email({ abort: true }).max(255).regex(AUTH_EMAIL_FORMAT, {
      message: "Invalid email address: not a format Supabase Auth accepts",
    }),
  );

// Strength (length, character classes) is Supabase Auth's to judge, so that
// its configured policy applies; only what it can never accept is refused.
const _Password = z.string().min(1).refine(
  (value) => new TextEncoder().encode(value).length <= _MAX_PASSWORD_BYTES,
  { message: `Too big: expected at most ${_MAX_PASSWORD_BYTES} bytes` },
).refine(_noNul, { message: _NUL_MESSAGE });

// Invisible characters (controls, format characters such as zero-width
// spaces and bidirectional overrides) and lone surrogates (stored as U+FFFD)
// would let a username look like another's, which `lower()` uniqueness
// cannot see: refused, as a 400 naming the field.
const _INVISIBLE = /[\p{Cc}\p{Cf}\p{Cs}]/u;

const _Username = z.string()
  .refine(_noNul, { message: _NUL_MESSAGE, abort: true }).trim()
  .min(1).max(255).refine((value) => !_INVISIBLE.test(value), {
    message:
      "Must not contain control, format (zero-width, bidirectional) or unpaired surrogate characters",
  });

const _Update = z.strictObject({
  action: z.literal("update"),
  id: _RowId,
  email: _Email.optional(),
  password: _Password.optional(),
  nombre_usuario: _Username.optional(),
}).refine(
  (body) =>
    body.email !== undefined || body.password !== undefined ||
    body.nombre_usuario !== undefined,
  { message: "At least one of email, password or nombre_usuario is required" },
);

const _Sync = z.strictObject({
  action: z.literal("sync"),
  ids: z.array(_RowId).min(1).max(MAX_SYNC_LIMIT).optional(),
  after_id: z.int().nonnegative().optional(),
  limit: z.int().min(1).max(MAX_SYNC_LIMIT).default(DEFAULT_SYNC_LIMIT),
  dry_run: z.boolean().default(false),
});

const _Reconcile = z.strictObject({
  action: z.literal("reconcile"),
  after_id: z.int().nonnegative().optional(),
  limit: z.int().min(1).max(MAX_SYNC_LIMIT).default(DEFAULT_SYNC_LIMIT),
  dry_run: z.boolean().default(false),
});

/** The body schema: one of the actions, told apart by `action`. */
export const AuthSyncRequest = z.discriminatedUnion("action", [
  _Update,
  _Sync,
  _Reconcile,
]);

/** A parsed auth-sync body. */
export type AuthSyncRequest = z.infer<typeof AuthSyncRequest>;

/** A parsed `update` body. */
export type UpdateRequest = z.infer<typeof _Update>;

/** A parsed `sync` body. */
export type SyncRequest = z.infer<typeof _Sync>;

/** A parsed `reconcile` body. */
export type ReconcileRequest = z.infer<typeof _Reconcile>;

export { type Issue, validationFailed } from "../_shared/validation.ts";

/**
 * Whether `value` is, exactly as it is, an address a request may carry: one
 * Supabase Auth accepts, already trimmed and lower-cased. A row's `correo`
 * that is not (spaces around it, a format Auth refuses) cannot name a new
 * account as it stands.
 *
 * @example
 * ```ts
 * isRequestEmail("ana@example.com"); // true
 * isRequestEmail(" ana@example.com "); // false
 * ```
 */
export function isRequestEmail(value: string): boolean {
  const parsed = _Email.safeParse(value);
  return parsed.success && parsed.data === value;
}

/**
 * Parses a JSON body, or throws 400 `validation_failed` with `issues`.
 * Issues carry a path and zod's message only, never the value, so a
 * refused password is not echoed back.
 *
 * @example
 * ```ts
 * const body = parseRequest({ action: "sync", limit: 50 });
 * // { action: "sync", limit: 50, dry_run: false }
 * ```
 */
export function parseRequest(body: unknown): AuthSyncRequest {
  return parseBody(AuthSyncRequest, body);
}
