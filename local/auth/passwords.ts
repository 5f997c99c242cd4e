/**
 * Passwords, email addresses and refresh tokens as Supabase Auth checks and
 * makes them (internal/api/password.go, mail.go `validateEmail`,
 * internal/crypto `SecureAlphanumeric`).
 *
 * @module
 */
import bcrypt from "bcryptjs";
import { AUTH_EMAIL_FORMAT } from "../../supabase/functions/_shared/validation.ts";
import { badRequest, WeakPasswordError } from "./errors.ts";

/** bcrypt only looks at the first 72 bytes, so Supabase Auth refuses more. */
export const MAX_PASSWORD_BYTES = 72;

/** config.toml `[auth] minimum_password_length` default. */
export const DEFAULT_MIN_PASSWORD_LENGTH = 6;

const _encoder = new TextEncoder();

/**
 * Hashes with bcrypt cost 10 under the `$2a$` prefix Go's bcrypt writes, so
 * that hashes stay interchangeable with a real Supabase database.
 */
export async function hashPassword(password: string): Promise<string> {
  const salt = (await bcrypt.genSalt(10)).replace(/^\$2b\$/, "$2a$");
  return await bcrypt.hash(password, salt);
}

/**
 * Whether `password` matches `hash`; an empty or missing hash never matches
 * (a user without a password cannot sign in with one).
 */
export async function comparePassword(
  password: string,
  hash: string | null | undefined,
): Promise<boolean> {
  if (!hash) return false;
  // Go's bcrypt refuses over-long input where bcryptjs would truncate it.
  if (_encoder.encode(password).length > MAX_PASSWORD_BYTES) return false;
  try {
    return await bcrypt.compare(password, hash);
  } catch {
    return false;
  }
}

/**
 * Supabase Auth's strength check: 400 `validation_failed` over 72 bytes, a
 * {@linkcode WeakPasswordError} with reason `length` under `minLength`
 * bytes (Go's `len` counts bytes, not characters).
 *
 * @throws {ApiError | WeakPasswordError}
 */
export function checkPasswordStrength(
  password: string,
  minLength = DEFAULT_MIN_PASSWORD_LENGTH,
): void {
  const bytes = _encoder.encode(password).length;
  if (bytes > MAX_PASSWORD_BYTES) {
    throw badRequest(
      "validation_failed",
      `Password cannot be longer than ${MAX_PASSWORD_BYTES} characters`,
    );
  }
  if (bytes < minLength) {
    throw new WeakPasswordError(
      `Password should be at least ${minLength} characters.`,
      ["length"],
    );
  }
}

/**
 * Validates an email address as Supabase Auth does and returns it
 * lower-cased.
 *
 * @throws {ApiError} 400 `validation_failed`
 */
export function validateEmail(email: string): string {
  if (email === "") {
    throw badRequest("validation_failed", "An email address is required");
  }
  if (_encoder.encode(email).length > 255) {
    throw badRequest("validation_failed", "An email address is too long");
  }
  if (!AUTH_EMAIL_FORMAT.test(email)) {
    throw badRequest(
      "validation_failed",
      "Unable to validate email address: invalid format",
    );
  }
  return email.toLowerCase();
}

/**
 * Validates a phone number as Supabase Auth does (E.164 digits after
 * dropping a leading `+` and spaces) and returns the normalized digits.
 *
 * @throws {ApiError} 400 `validation_failed`
 */
export function validatePhone(phone: string): string {
  const digits = phone.replace(/^\+/, "").replaceAll(" ", "");
  if (!/^[1-9][0-9]{1,14}$/.test(digits)) {
    throw badRequest(
      "validation_failed",
      "Invalid phone number format (E.164 required)",
    );
  }
  return digits;
}

const _ALPHANUMERIC =
  "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/**
 * A 64-character password nobody knows, from a CSPRNG: what Supabase Auth
 * gives an account made without one (an admin-created user, a magic link's
 * or `generate_link`'s sign-up, an accepted invite), so that it can only be
 * signed into by link or code until its owner sets a password.
 */
export function randomPassword(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(64));
  return [...bytes].map((b) => _ALPHANUMERIC[b % _ALPHANUMERIC.length]).join(
    "",
  );
}

const _BASE32 = "abcdefghijklmnopqrstuvwxyz234567";

/**
 * A fresh refresh token in Supabase Auth's legacy format: 12 characters of
 * lower-case base32 (`[a-z2-7]`) from a CSPRNG.
 */
export function generateRefreshToken(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  let out = "";
  for (const b of bytes) out += _BASE32[b & 31];
  return out;
}

/** Whether `token` has the only shape Supabase Auth accepts for legacy tokens. */
export function isLegacyRefreshToken(token: string): boolean {
  return /^[a-z0-9]{12}$/.test(token);
}
