/**
 * Settings every handler of the stand-in reads, fixed when the API is
 * created. The constants are the values `supabase start` configures
 * Supabase Auth with (GOTRUE_JWT_AUD, GOTRUE_JWT_DEFAULT_GROUP_NAME,
 * GOTRUE_JWT_ADMIN_ROLES, config.toml defaults).
 *
 * @module
 */
import type postgres from "postgres";
import type { SigningKey } from "./keys.ts";
import type { Inbox } from "./mailer.ts";

/** Everything a handler needs. */
export interface AuthContext {
  /** Client on the database holding the `auth` schema. */
  sql: postgres.Sql;
  /** HS256 secret; HS256 access tokens signed with it are accepted. */
  jwtSecret: string;
  /** ES256 key that signs access tokens. */
  signingKey: SigningKey;
  /** Public keys accepted for ES256 tokens (the JWKS). */
  publicJwks: JsonWebKey[];
  /** Access token lifetime in seconds. */
  jwtExpiry: number;
  /** `iss` claim. */
  issuer: string;
  /** Clock in ms. */
  now: () => number;
  /**
   * `mailer_autoconfirm` (config.toml `[auth.email] enable_confirmations =
   * false`): a sign-up is confirmed and signed in at once. When false, a
   * sign-up waits for its confirmation and gets no session.
   */
  mailerAutoconfirm: boolean;
  /**
   * `phone_autoconfirm` of `/settings` (config.toml `[auth.sms]
   * enable_confirmations = false`, the CLI's `GOTRUE_SMS_AUTOCONFIRM`). No
   * phone sign-up is served; only `/settings` says it.
   */
  phoneAutoconfirm: boolean;
  /** Base of mail links, `…/auth/v1` (`API_EXTERNAL_URL`). */
  externalUrl: string;
  /** Where mails go (the local inbox). */
  inbox: Inbox;
  /** config.toml `[auth] site_url`: where links return by default. */
  siteUrl: string;
  /** config.toml `[auth] additional_redirect_urls`. */
  additionalRedirectUrls: readonly string[];
  /** config.toml `[auth.email] otp_expiry`, in seconds. */
  otpExpiry: number;
  /** config.toml `[auth] enable_signup`. */
  signupEnabled: boolean;
  /** config.toml `[auth] minimum_password_length`. */
  minPasswordLength: number;
}

/** Default audience (GOTRUE_JWT_AUD). */
export const DEFAULT_AUD = "authenticated";

/** Role given to new users (GOTRUE_JWT_DEFAULT_GROUP_NAME). */
export const DEFAULT_ROLE = "authenticated";

/**
 * Roles allowed on /admin: `service_role` only, as `supabase start`
 * configures Auth (GOTRUE_JWT_ADMIN_ROLES; `supabase_admin` is only Auth's
 * own default when unset).
 */
export const ADMIN_ROLES: readonly string[] = ["service_role"];

/** config.toml `[auth] refresh_token_reuse_interval` (seconds). */
export const REFRESH_TOKEN_REUSE_INTERVAL = 10;

/** config.toml `[auth.email] max_frequency` (ms between emails to a user). */
export const EMAIL_MAX_FREQUENCY_MS = 1000;

/** Header that overrides the audience of a request. */
export const AUD_HEADER = "X-JWT-AUD";
