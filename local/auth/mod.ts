/**
 * A stand-in for the Supabase Auth (GoTrue) HTTP API for the Docker-free
 * local stack: the routes supabase-js uses, answered with Supabase Auth's
 * status codes, error codes, bodies and headers, storing users and sessions
 * in the real `auth` schema tables (see local/sql/10_auth.sql).
 *
 * @example
 * ```ts
 * import postgres from "postgres";
 * import {
 *   createAuthApi, LOCAL_ANON_KEY, LOCAL_JWT_SECRET, LOCAL_SERVICE_ROLE_KEY,
 *   loadOrCreateSigningKey,
 * } from "./local/auth/mod.ts";
 *
 * const sql = postgres(databaseUrl);
 * const handler = createAuthApi({
 *   sql,
 *   jwtSecret: LOCAL_JWT_SECRET,
 *   signingKey: await loadOrCreateSigningKey(".local/auth/signing_key.json"),
 *   jwtExpiry: 3600,
 *   issuer: "http://127.0.0.1:54321/auth/v1",
 *   anonKey: LOCAL_ANON_KEY,
 *   serviceRoleKey: LOCAL_SERVICE_ROLE_KEY,
 * });
 * ```
 *
 * @module
 */
export { type AuthApiOptions, createAuthApi } from "./api.ts";
export {
  generateSigningKey,
  loadOrCreateSigningKey,
  LOCAL_ANON_KEY,
  LOCAL_JWT_SECRET,
  LOCAL_OPAQUE_KEYS,
  LOCAL_PUBLISHABLE_KEY,
  LOCAL_SECRET_KEY,
  LOCAL_SERVICE_ROLE_KEY,
  type SigningKey,
} from "./keys.ts";
export {
  type AccessTokenClaims,
  type AmrEntry,
  JwtError,
  verifyAccessToken,
  type VerifyOptions,
} from "./jwt.ts";
export {
  EMAIL_MAX_FREQUENCY_MS,
  REFRESH_TOKEN_REUSE_INTERVAL,
} from "./context.ts";
export { OTP_LENGTH } from "./email.ts";
