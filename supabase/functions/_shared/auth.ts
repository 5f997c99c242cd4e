/**
 * Who is calling: the bearer token from the request, validated by Supabase
 * Auth (`auth.getUser(token)`), as an {@linkcode Identity}.
 *
 * @module
 */
import {
  type AuthError,
  createClient,
  isAuthRetryableFetchError,
  isAuthSessionMissingError,
  type SupabaseClient,
} from "@supabase/supabase-js";
import { decodeJwt } from "jose";
import { createHash, timingSafeEqual } from "node:crypto";
import type { FunctionEnv } from "./env.ts";
import { confirmedAfterMail } from "./email_proof.ts";
import { HttpError } from "./errors.ts";
import { Kept } from "./kept.ts";

/** The authenticated caller, as Supabase Auth describes it. */
export interface Identity {
  /** `auth.users.id`. */
  readonly id: string;
  /** Email, lower-cased; `null` for phone-only or anonymous users. */
  readonly email: string | null;
  /** Whether Auth has confirmed the email. */
  readonly emailConfirmed: boolean;
  /**
   * Whether it confirmed that very address after mailing a confirmation
   * (`email_proof.ts`).
   */
  readonly confirmedAfterMail: boolean;
  /**
   * `app_metadata` as Auth reports it: only the service role writes it
   * (`user_metadata`, which the user writes, is not kept).
   */
  readonly appMetadata: Readonly<Record<string, unknown>>;
}

/** How long Supabase Auth may take before the provider counts as down. */
export const PROVIDER_TIMEOUT_MS = 5_000;

/** Seconds a client should wait before retrying after a 503. */
export const RETRY_AFTER_SECONDS = 5;

// Real access tokens are a few hundred bytes to a few KiB; anything far
// larger or not shaped like a JWT is refused without bothering the provider.
const _MAX_TOKEN_LENGTH = 16 * 1024;
const _JWT_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;

/**
 * Extracts the token from `Authorization: Bearer <token>`. The header must
 * start with `Bearer ` exactly (spec 5.1); otherwise 401 `missing_bearer`.
 *
 * @example
 * ```ts
 * bearerToken(new Request("http://x", { headers: { Authorization: "Bearer abc.def.ghi" } }));
 * // "abc.def.ghi"
 * ```
 */
export function bearerToken(req: Request): string {
  const header = req.headers.get("authorization");
  if (!header?.startsWith("Bearer ")) throw new HttpError("missing_bearer");
  const token = header.slice("Bearer ".length).trim();
  if (!token) throw new HttpError("missing_bearer");
  return token;
}

/** A trusted server caller: it presented one of the project's secret keys. */
export interface ServerCaller {
  /**
   * Which kind of key: `secret_key` (`sb_secret_…`, from
   * `SUPABASE_SECRET_KEYS`) or `service_role_key` (the legacy JWT).
   */
  readonly via: "secret_key" | "service_role_key";
  /**
   * The key's name (`env.secretKeys`): which of several keys acted, for the
   * audit trail (a leaked key's actions can be told apart). Never the key.
   */
  readonly keyName: string;
}

/**
 * Whether the project still accepts a key: `null` when it does, or the
 * refusal's message (the hosted gateway answers a disabled legacy key with
 * 401 `Legacy API keys are disabled`, a deleted secret key with 401
 * `Invalid API key`).
 */
export type KeyRefusal = (key: string) => Promise<string | null>;

/**
 * Whether the request comes from a trusted server: the `apikey` header or
 * the `Authorization: Bearer` token is one of `env.secretKeys` (compared in
 * constant time). supabase-js created with a secret key sends it as
 * `apikey` only; a hand-written call may send it as a bearer token too.
 *
 * A key is trusted only while the project accepts it (`keyRefusal`, the
 * project's answer to the key itself, kept a minute): the environment of a
 * running function outlives the key. A project that turns its legacy keys
 * off, often because the service role JWT leaked, still finds it in
 * `SUPABASE_SERVICE_ROLE_KEY` (the platform keeps injecting it); a secret
 * key deleted in the dashboard (leaked too, as a rule) stays in the
 * `SUPABASE_SECRET_KEYS` of the isolates already running; and nothing in
 * front of a `verify_jwt = false` function stops either. Refused with 401
 * `invalid_token` and the project's own message.
 *
 * Also refused with 401 `invalid_token` (`error: "Invalid API key"`), as
 * Supabase's gateway refuses an unknown key: an `sb_secret_…` key in either
 * header that is not one of the project's, and an `sb_` bearer token that is
 * no key of the project. A publishable key as bearer token is answered as
 * Auth answers the anon key (`invalid claim: missing sub claim`): it names
 * the project, not a user. `null`: no secret key, so the caller is a user
 * to authenticate.
 *
 * @example
 * ```ts
 * const server = await serverCaller(req, env, (key) => deps.keyRefusal(key, env));
 * // { via: "secret_key", keyName: "default" } or null
 * ```
 */
export async function serverCaller(
  req: Request,
  env: FunctionEnv,
  keyRefusal: KeyRefusal,
): Promise<ServerCaller | null> {
  const header = req.headers.get("authorization");
  const bearer = header?.startsWith("Bearer ")
    ? header.slice("Bearer ".length).trim()
    : null;
  const apikey = req.headers.get("apikey")?.trim() || null;
  for (const presented of [bearer, apikey]) {
    if (!presented) continue;
    const known = env.secretKeys.find((k) => _sameKey(presented, k.key));
    if (known) {
      const refused = await keyRefusal(presented);
      if (refused !== null) throw _invalidToken(refused);
      return {
        via: presented.startsWith("sb_") ? "secret_key" : "service_role_key",
        keyName: known.name,
      };
    }
  }
  if (
    apikey?.startsWith(_SECRET_PREFIX) || bearer?.startsWith(_SECRET_PREFIX)
  ) throw _invalidToken("Invalid API key");
  if (bearer?.startsWith("sb_")) {
    if (env.publishableKeys.some((k) => _sameKey(bearer, k))) {
      throw _invalidToken("invalid claim: missing sub claim", "bad_jwt");
    }
    throw _invalidToken("Invalid API key");
  }
  return null;
}

const _SECRET_PREFIX = "sb_secret_";

// Equal-length digests compared in constant time: how long the comparison
// takes says nothing about how much of a guessed key was right.
function _sameKey(presented: string, key: string): boolean {
  const digest = (text: string) => createHash("sha256").update(text).digest();
  return timingSafeEqual(digest(presented), digest(key));
}

/**
 * Validates a token with Supabase Auth (`client`, an anon-key client from
 * {@linkcode AuthClients}) and returns the identity; `now` is the clock a
 * ban and an expiry are judged by.
 *
 * - rejected by Auth: 401 `invalid_token`, `error` = Auth's detail, or
 *   exactly `JWT expired` when the token's `exp` has passed;
 * - Auth unreachable, slower than {@linkcode PROVIDER_TIMEOUT_MS}, 5xx or
 *   rate limiting: 503 `idp_unavailable` with `Retry-After`, so that an
 *   outage never looks like a bad token to clients.
 *
 * @example
 * ```ts
 * const identity = await authenticate(token, clients.client(env, "anon"), Date.now);
 * ```
 */
export async function authenticate(
  token: string,
  client: SupabaseClient,
  now: () => number,
): Promise<Identity> {
  if (token.length > _MAX_TOKEN_LENGTH || !_JWT_SHAPE.test(token)) {
    throw _invalidToken("token is malformed");
  }
  const { data, error } = await client.auth.getUser(token);
  if (error) throw _classify(error, token, now());
  const user = data.user;
  // A ban takes effect at once here, whether or not Auth has already revoked
  // the user's sessions.
  if (user.banned_until && Date.parse(user.banned_until) > now()) {
    throw _invalidToken("User is banned", "user_banned");
  }
  return {
    id: user.id,
    email: user.email ? user.email.toLowerCase() : null,
    emailConfirmed: Boolean(user.email_confirmed_at),
    confirmedAfterMail: confirmedAfterMail({
      email: user.email,
      emailConfirmedAt: user.email_confirmed_at,
      confirmationSentAt: user.confirmation_sent_at,
      // Auth's user object carries its identities (loaded with the user).
      identities: (user.identities ?? []).map((i) => ({
        provider: i.provider,
        email: i.identity_data?.email,
      })),
    }),
    appMetadata: user.app_metadata ?? {},
  };
}

/**
 * supabase-js clients for server-side calls to Auth, one per Auth URL and
 * key (createClient builds fetch wrappers and an auth client each time,
 * which need not happen per request), with no session storage and a
 * {@linkcode PROVIDER_TIMEOUT_MS} timeout on every request. `deps.ts` holds
 * one set per handler set.
 */
export class AuthClients {
  readonly #clients = new Map<string, SupabaseClient>();

  /**
   * The client for `env`'s Auth: `"anon"` with the anon key (`getUser`),
   * `"service"` with the service role key (admin API).
   *
   * @example
   * ```ts
   * const admin = clients.client(env, "service").auth.admin;
   * ```
   */
  client(env: FunctionEnv, key: "anon" | "service"): SupabaseClient {
    const apiKey = key === "anon" ? env.anonKey : env.serviceRoleKey;
    const cacheKey = `${env.supabaseUrl}\n${apiKey}`;
    let client = this.#clients.get(cacheKey);
    if (!client) {
      client = createClient(env.supabaseUrl, apiKey, {
        auth: {
          persistSession: false,
          autoRefreshToken: false,
          detectSessionInUrl: false,
        },
        global: { fetch: _fetchWithTimeout },
      });
      this.#clients.set(cacheKey, client);
    }
    return client;
  }
}

/** The 503 thrown when Auth cannot answer. */
export function providerUnavailable(cause?: unknown): HttpError {
  return new HttpError("idp_unavailable", {
    headers: { "Retry-After": String(RETRY_AFTER_SECONDS) },
    cause,
  });
}

/**
 * Whether an Auth error means the provider could not answer (network
 * failure, timeout, 5xx, 429) rather than a refusal.
 */
export function isProviderDown(error: AuthError): boolean {
  return isAuthRetryableFetchError(error) || error.status === 429 ||
    (error.status ?? 0) >= 500;
}

function _classify(error: AuthError, token: string, now: number): HttpError {
  if (isProviderDown(error)) return providerUnavailable(error);
  if (_isExpired(token, now)) return _invalidToken("JWT expired", "bad_jwt");
  if (isAuthSessionMissingError(error)) {
    return _invalidToken(error.message, "session_not_found");
  }
  return _invalidToken(error.message, error.code);
}

function _invalidToken(detail: string, errorCode?: string): HttpError {
  return new HttpError("invalid_token", {
    extra: errorCode ? { error: detail, error_code: errorCode } : {
      error: detail,
    },
  });
}

// Auth words expiry its own way ("token has invalid claims: token is
// expired"); the spec promises clients exactly "JWT expired".
function _isExpired(token: string, now: number): boolean {
  try {
    const { exp } = decodeJwt(token);
    return typeof exp === "number" && exp * 1000 <= now;
  } catch {
    return false;
  }
}

/**
 * Whether a failed Auth call never left this function: the connection could
 * not be opened (refused, unknown host, failed handshake), so Auth cannot
 * have acted on it.
 */
export function requestNotSent(error: AuthError): boolean {
  return error.status === 0 && error.message.startsWith(_NOT_SENT);
}

// supabase-js keeps only the message of a failed fetch (its cause, which
// says why, is dropped), so a request that never left is marked in the
// message of the error the client's fetch throws.
const _NOT_SENT = "Request not sent";

// Deno words every failure to open a connection (refused, DNS, TLS)
// "client error (Connect)", in the error's message or in its cause; Node
// says ECONNREFUSED. Anything else may have reached Auth.
const _CONNECT_FAILURE =
  /client error \(Connect\)|connection refused|ECONNREFUSED/i;

async function _fetchWithTimeout(
  input: RequestInfo | URL,
  init?: RequestInit,
): Promise<Response> {
  const timeout = AbortSignal.timeout(PROVIDER_TIMEOUT_MS);
  const signal = init?.signal
    ? AbortSignal.any([init.signal, timeout])
    : timeout;
  try {
    return await fetch(input, { ...init, signal });
  } catch (error) {
    const why = _connectFailure(error);
    if (why !== null) throw new TypeError(`${_NOT_SENT}: ${why}`);
    throw error;
  }
}

// The message that says the connection could not be opened, from the error
// or its causes; null when the request may have left.
function _connectFailure(error: unknown): string | null {
  for (let e = error, depth = 0; e instanceof Error && depth < 5; depth++) {
    if (_CONNECT_FAILURE.test(e.message)) return e.message;
    e = e.cause;
  }
  return null;
}

/**
 * How long Auth's answer about autoconfirm is used: its settings change
 * only when the project is reconfigured, and a minute keeps a sync of many
 * pages from asking on every call.
 */
export const SETTINGS_TTL_MS = 60_000;

/**
 * How long Auth's failure to answer a settings question is its answer, ms:
 * the `Retry-After` its 503 `idp_unavailable` tells the client. The
 * requests of those seconds answer at once instead of each waiting out
 * {@linkcode PROVIDER_TIMEOUT_MS} on an Auth that is down.
 */
export const SETTINGS_FAILURE_MS = RETRY_AFTER_SECONDS * 1000;

/**
 * Auth's settings as the functions read them, each answer kept
 * {@linkcode SETTINGS_TTL_MS} by the owner's clock, per Auth URL, and a
 * failure to answer {@linkcode SETTINGS_FAILURE_MS}; callers that ask while
 * a question is out share it (`kept.ts`). `deps.ts`
 * holds one per handler set.
 */
export class AuthSettings {
  // The answers, by Auth URL (and key): whether it autoconfirms, and each
  // key's refusal (a message, or null when accepted).
  readonly #autoconfirms: Kept<boolean>;
  readonly #refusals: Kept<string | null>;

  /** Settings whose answers expire by the clock `now` (ms since the epoch). */
  constructor(now: () => number) {
    const kept = {
      now,
      ttlMs: SETTINGS_TTL_MS,
      failureMs: SETTINGS_FAILURE_MS,
    };
    this.#autoconfirms = new Kept(kept);
    this.#refusals = new Kept(kept);
  }

  /**
   * Whether Auth confirms sign-ups at once (`mailer_autoconfirm`, from
   * `GET /auth/v1/settings`). Auth that cannot answer gives 503
   * `idp_unavailable`: no rights and no link on a guess.
   *
   * supabase-js has no call for `/settings`, hence the plain `fetch`.
   *
   * @example
   * ```ts
   * if (await settings.autoconfirms(env)) console.log("a confirmed email proves little here");
   * ```
   */
  autoconfirms(env: FunctionEnv): Promise<boolean> {
    return this.#autoconfirms.get(
      env.supabaseUrl,
      () => this.#askAutoconfirm(env),
    );
  }

  async #askAutoconfirm(env: FunctionEnv): Promise<boolean> {
    let settings: { mailer_autoconfirm?: unknown };
    try {
      const res = await fetch(`${env.supabaseUrl}/auth/v1/settings`, {
        headers: { apikey: env.anonKey },
        signal: AbortSignal.timeout(PROVIDER_TIMEOUT_MS),
      });
      if (!res.ok) {
        await res.body?.cancel();
        throw new Error(`Auth settings answered ${res.status}`);
      }
      settings = await res.json();
    } catch (error) {
      throw providerUnavailable(error);
    }
    // Anything but an explicit false counts as autoconfirm: the safe reading.
    return settings.mailer_autoconfirm !== false;
  }

  /**
   * Whether the project accepts `key` as a service key: `null` when Auth's
   * admin API answers a request made with it (as `apikey` and bearer, as
   * supabase-js sends a key), else the refusal's message (`Legacy API keys
   * are disabled` once the project turns them off, `Invalid API key` for a
   * deleted secret key). Each answer is kept {@linkcode SETTINGS_TTL_MS},
   * so turning a key off takes effect within a minute. Auth that cannot
   * answer gives 503 `idp_unavailable`.
   *
   * @example
   * ```ts
   * const refused = await settings.keyRefusal(env, presentedKey); // null: accepted
   * ```
   */
  keyRefusal(env: FunctionEnv, key: string): Promise<string | null> {
    return this.#refusals.get(
      `${env.supabaseUrl}\n${key}`,
      () => this.#askKey(env, key),
    );
  }

  async #askKey(env: FunctionEnv, key: string): Promise<string | null> {
    try {
      // The cheapest admin call; its answer is all that is read.
      const res = await fetch(
        `${env.supabaseUrl}/auth/v1/admin/users?page=1&per_page=1`,
        {
          headers: { apikey: key, Authorization: `Bearer ${key}` },
          signal: AbortSignal.timeout(PROVIDER_TIMEOUT_MS),
        },
      );
      if (res.status === 401 || res.status === 403) {
        const body = await res.json().catch(() => ({}));
        return _refusalMessage(body) ?? "Invalid API key";
      }
      await res.body?.cancel();
      if (res.ok) return null;
      throw new Error(`Auth admin API answered ${res.status}`);
    } catch (error) {
      throw providerUnavailable(error);
    }
  }
}

// The gateway words a refusal `message`, Auth `msg`; neither is a secret.
function _refusalMessage(body: unknown): string | null {
  if (typeof body !== "object" || body === null) return null;
  const { message, msg } = body as { message?: unknown; msg?: unknown };
  const text = typeof message === "string" ? message : msg;
  return typeof text === "string" && text.length <= 200 ? text : null;
}
