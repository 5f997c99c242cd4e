/**
 * The HTTP surface of the Auth stand-in: routing under `/auth/v1` and the
 * public and user routes (internal/api/api.go, signup.go, token.go,
 * user.go, logout.go, jwks.go, settings.go). Admin routes are in admin.ts,
 * `/invite` and `/admin/generate_link` in admin_links.ts.
 *
 * Configuration mirrors `supabase start` with this project's config.toml:
 * email sign-up on with confirmations off (autoconfirm), phone and anonymous
 * sign-ins off, minimum password length 6, refresh token rotation on with a
 * 10 s reuse interval, double-confirm email changes on.
 *
 * @module
 */
import { handleAdmin } from "./admin.ts";
import { invite } from "./admin_links.ts";
import type { AuthContext } from "./context.ts";
import { DEFAULT_AUD, DEFAULT_ROLE } from "./context.ts";
import {
  ApiError,
  badRequest,
  emailExists,
  errorResponse,
  forbidden,
  internal,
  jsonResponse,
  unprocessable,
  WeakPasswordError,
} from "./errors.ts";
import {
  otp,
  recover,
  redirectTarget,
  resend,
  sendConfirmation,
  sendEmailChange,
  type SignUp,
  verify,
} from "./email.ts";
import { authenticate, firstAud, requestAud } from "./guards.ts";
import {
  clientIp,
  goQuote,
  mapField,
  methodNotAllowed,
  notFoundRoute,
  optionalStringField,
  readJson,
  stringField,
  userAgent,
} from "./http.ts";
import type { SigningKey } from "./keys.ts";
import { Inbox } from "./mailer.ts";
import {
  checkPasswordStrength,
  comparePassword,
  DEFAULT_MIN_PASSWORD_LENGTH,
  hashPassword,
  validateEmail,
  validatePhone,
} from "./passwords.ts";
import { type Pkce, pkceGrant, pkceParams } from "./pkce.ts";
import { userJson } from "./present.ts";
import {
  deleteIdentity,
  deleteOtherSessions,
  deleteSession,
  deleteUserSessions,
  findDuplicateEmailUser,
  findUserByEmail,
  findUserById,
  insertIdentity,
  insertUser,
  iso,
  mergeMetadata,
  setPassword,
  updateUser,
} from "./store.ts";
import {
  isBanned,
  type IssuedTokens,
  issueSession,
  refreshTokenGrant,
} from "./tokens.ts";

/** Options of {@linkcode createAuthApi}. */
export interface AuthApiOptions {
  /** postgres.js client on the database. */
  sql: import("postgres").Sql;
  /** HS256 secret (local default {@linkcode LOCAL_JWT_SECRET}). */
  jwtSecret: string;
  /** ES256 key used to sign access tokens. */
  signingKey: SigningKey;
  /** Access token lifetime in seconds (config.toml `[auth] jwt_expiry`). */
  jwtExpiry: number;
  /** `iss` claim, e.g. `http://127.0.0.1:54321/auth/v1`. */
  issuer: string;
  /** Where mail links point (`API_EXTERNAL_URL`; default: `issuer`). */
  externalUrl?: string;
  /**
   * The standard local anon key (HS256 over `jwtSecret`). Supabase Auth does
   * not check the `apikey` header itself (the gateway does), so the stand-in
   * only verifies such keys as ordinary HS256 tokens.
   */
  anonKey: string;
  /** The standard local service_role key (HS256 over `jwtSecret`). */
  serviceRoleKey: string;
  /** Clock in ms, for tests. */
  now?: () => number;
  /**
   * Confirm sign-ups at once (`mailer_autoconfirm`; default true, as
   * config.toml `[auth.email] enable_confirmations = false`).
   */
  mailerAutoconfirm?: boolean;
  /**
   * `/settings`' `phone_autoconfirm` (default true, as config.toml
   * `[auth.sms] enable_confirmations = false`).
   */
  phoneAutoconfirm?: boolean;
  /** Where mails go (default: an inbox of its own, see `inbox`). */
  inbox?: Inbox;
  /** config.toml `[auth] site_url` (default `http://127.0.0.1:3000`). */
  siteUrl?: string;
  /** config.toml `[auth] additional_redirect_urls` (default none). */
  additionalRedirectUrls?: readonly string[];
  /** config.toml `[auth.email] otp_expiry` in seconds (default 3600). */
  otpExpiry?: number;
  /** config.toml `[auth] enable_signup` (default true). */
  signupEnabled?: boolean;
  /** config.toml `[auth] minimum_password_length` (default 6). */
  minPasswordLength?: number;
  /**
   * Where each request's line goes (method, path, status, error code, and
   * the event: sign-up, sign-in, failed sign-in, refresh, ...). Default:
   * nowhere.
   */
  log?: (line: string) => void;
}

const _PREFIX = "/auth/v1";

/**
 * Creates the handler of the Auth stand-in. It answers requests whose path
 * starts with `/auth/v1` exactly as Supabase Auth behind the Supabase
 * gateway does; anything else is 404.
 *
 * @example
 * ```ts
 * const handler = createAuthApi({
 *   sql, jwtSecret: LOCAL_JWT_SECRET, signingKey, jwtExpiry: 3600,
 *   issuer: "http://127.0.0.1:54321/auth/v1",
 *   anonKey: LOCAL_ANON_KEY, serviceRoleKey: LOCAL_SERVICE_ROLE_KEY,
 * });
 * Deno.serve({ port: 54321 }, handler);
 * ```
 */
export function createAuthApi(
  options: AuthApiOptions,
): (req: Request) => Promise<Response> {
  const ctx: AuthContext = {
    sql: options.sql,
    jwtSecret: options.jwtSecret,
    signingKey: options.signingKey,
    publicJwks: [options.signingKey.publicJwk],
    jwtExpiry: options.jwtExpiry,
    issuer: options.issuer,
    now: options.now ?? Date.now,
    mailerAutoconfirm: options.mailerAutoconfirm ?? true,
    phoneAutoconfirm: options.phoneAutoconfirm ?? true,
    externalUrl: options.externalUrl ?? options.issuer,
    inbox: options.inbox ?? new Inbox(),
    siteUrl: options.siteUrl ?? "http://127.0.0.1:3000",
    additionalRedirectUrls: options.additionalRedirectUrls ?? [],
    otpExpiry: options.otpExpiry ?? 3600,
    signupEnabled: options.signupEnabled ?? true,
    minPasswordLength: options.minPasswordLength ??
      DEFAULT_MIN_PASSWORD_LENGTH,
  };
  const log = options.log ?? (() => {});
  return async (req: Request): Promise<Response> => {
    let res: Response;
    let errorCode: string | undefined;
    let cause: string | undefined;
    try {
      res = await _route(ctx, req);
      // A link's failure is a redirect carrying the error (verifyGet).
      errorCode = _redirectedError(res);
    } catch (err) {
      if (err instanceof ApiError) errorCode = err.errorCode;
      else if (err instanceof WeakPasswordError) errorCode = "weak_password";
      else {
        // On the request's line, where the terminal and stack.log both
        // have it: only the error's name and message, since a stack or
        // query could carry tokens or passwords.
        errorCode = "unexpected_failure";
        cause = `${(err as Error)?.name}: ${(err as Error)?.message}`;
      }
      res = errorResponse(err, req);
    }
    log(requestLine(req, res.status, errorCode, cause));
    return _withCors(req, res);
  };
}

// The `error_code` a redirect carries in its query or fragment, if any.
function _redirectedError(res: Response): string | undefined {
  const location = res.headers.get("location");
  if (!location) return undefined;
  const url = new URL(location);
  return url.searchParams.get("error_code") ??
    new URLSearchParams(url.hash.slice(1)).get("error_code") ?? undefined;
}

// What a request was, in the words of Supabase Auth's audit log.
function _event(
  req: Request,
  status: number,
  errorCode: string | undefined,
): string | undefined {
  const url = new URL(req.url);
  const path = url.pathname.replace(/^\/auth\/v1/, "").replace(/\/$/, "");
  const ok = status < 400 && errorCode === undefined;
  if (path === "/signup") {
    return ok ? "user_signedup" : "user_signup_refused";
  }
  if (path === "/token") {
    const grant = url.searchParams.get("grant_type");
    if (grant === "password") return ok ? "login" : "login_failed";
    if (grant === "refresh_token") {
      return ok ? "token_refreshed" : "token_refresh_failed";
    }
  }
  if (path === "/logout" && ok) return "logout";
  if (path === "/recover") return "user_recovery_requested";
  if (path === "/otp" || path === "/magiclink") return "magiclink_requested";
  if (path === "/resend") return "user_confirmation_requested";
  if (path === "/verify") return ok ? "verified" : "verify_failed";
  if (path === "/invite" && ok) return "user_invited";
  if (path === "/user" && req.method === "PUT" && ok) return "user_modified";
  return undefined;
}

/**
 * One JSON log line for an Auth request, as Supabase Auth's "request
 * completed" lines: method, path, status, `error_code` (a failed link's
 * too, though it answers 303), the event, and for an unexpected failure its
 * `cause`. No token, password or email: only the route and its outcome.
 */
export function requestLine(
  req: Request,
  status: number,
  errorCode?: string,
  cause?: string,
): string {
  const url = new URL(req.url);
  return JSON.stringify({
    component: "auth",
    msg: "request completed",
    method: req.method,
    path: url.pathname,
    grant_type: url.searchParams.get("grant_type") ?? undefined,
    status,
    error_code: errorCode,
    event: _event(req, status, errorCode),
    cause,
  });
}

async function _route(ctx: AuthContext, req: Request): Promise<Response> {
  const url = new URL(req.url);
  if (url.pathname !== _PREFIX && !url.pathname.startsWith(`${_PREFIX}/`)) {
    return notFoundRoute(req);
  }
  let path = url.pathname.slice(_PREFIX.length) || "/";
  if (path.length > 1 && path.endsWith("/")) path = path.slice(0, -1);
  const method = req.method;
  if (method === "OPTIONS") return new Response(null, { status: 204 });

  if (path === "/admin" || path.startsWith("/admin/")) {
    return await handleAdmin(ctx, req, path);
  }
  const routes: Record<string, Record<string, () => Promise<Response>>> = {
    "/health": { GET: () => Promise.resolve(_health()) },
    "/settings": { GET: () => Promise.resolve(_settings(ctx)) },
    "/.well-known/jwks.json": { GET: () => Promise.resolve(_jwks(ctx)) },
    "/signup": { POST: () => _signup(ctx, req) },
    "/token": { POST: () => _token(ctx, req, url) },
    "/logout": { POST: () => _logout(ctx, req, url) },
    "/user": { GET: () => _getUser(ctx, req), PUT: () => _putUser(ctx, req) },
    "/recover": { POST: () => recover(ctx, req) },
    "/otp": { POST: () => otp(ctx, req, signUp, "/otp") },
    "/magiclink": { POST: () => otp(ctx, req, signUp, "/magiclink") },
    "/resend": { POST: () => resend(ctx, req) },
    "/verify": { GET: () => verify(ctx, req), POST: () => verify(ctx, req) },
    "/invite": { POST: () => invite(ctx, req) },
    "/authorize": { GET: () => Promise.reject(_noOAuth()) },
  };
  const signUp: SignUp = (req, email, password, data, pkce) =>
    _createAccount(ctx, req, email, password, data, pkce);
  const route = routes[path];
  if (!route) return notFoundRoute(req);
  const handler = route[method];
  if (!handler) return methodNotAllowed();
  return await handler();
}

// rs/cors as Supabase Auth configures it: any origin, credentials allowed.
function _withCors(req: Request, res: Response): Response {
  const origin = req.headers.get("origin");
  if (!origin) return res;
  const headers = new Headers(res.headers);
  headers.set("Access-Control-Allow-Origin", origin);
  headers.set("Access-Control-Allow-Credentials", "true");
  headers.append("Vary", "Origin");
  if (req.method === "OPTIONS") {
    headers.set(
      "Access-Control-Allow-Methods",
      req.headers.get("access-control-request-method")?.toUpperCase() ??
        "GET",
    );
    const asked = req.headers.get("access-control-request-headers");
    if (asked) headers.set("Access-Control-Allow-Headers", asked);
  } else {
    headers.set(
      "Access-Control-Expose-Headers",
      "X-Total-Count, Link, X-Supabase-Api-Version",
    );
  }
  return new Response(res.body, { status: res.status, headers });
}

// ExternalProviderRedirect with no provider enabled, which is all the
// local stack can offer.
function _noOAuth(): ApiError {
  return badRequest(
    "validation_failed",
    "Unsupported provider: provider is not enabled (the local Auth stand-in has no OAuth providers)",
  );
}

function _health(): Response {
  return jsonResponse(200, {
    version: "local",
    name: "GoTrue",
    description: "GoTrue is a user registration and authentication API",
  });
}

function _settings(ctx: AuthContext): Response {
  const external: Record<string, boolean> = {};
  for (
    const p of [
      "anonymous_users",
      "apple",
      "azure",
      "bitbucket",
      "discord",
      "facebook",
      "snapchat",
      "figma",
      "fly",
      "github",
      "gitlab",
      "google",
      "keycloak",
      "kakao",
      "linkedin",
      "linkedin_oidc",
      "notion",
      "spotify",
      "slack",
      "slack_oidc",
      "workos",
      "twitch",
      "twitter",
      "email",
      "phone",
      "zoom",
    ]
  ) external[p] = p === "email";
  return jsonResponse(200, {
    external,
    disable_signup: !ctx.signupEnabled,
    mailer_autoconfirm: ctx.mailerAutoconfirm,
    phone_autoconfirm: ctx.phoneAutoconfirm,
    sms_provider: "twilio",
    saml_enabled: false,
    saml_private_key_next_configured: false,
    passkeys_enabled: false,
  });
}

function _jwks(ctx: AuthContext): Response {
  return jsonResponse(200, { keys: ctx.publicJwks }, {
    "Cache-Control": "public, max-age=600",
  });
}

function _client(req: Request) {
  return { userAgent: userAgent(req), ip: clientIp(req) };
}

function _tokensResponse(issued: IssuedTokens): Response {
  return jsonResponse(200, issued.body, issued.headers);
}

async function _signup(ctx: AuthContext, req: Request): Promise<Response> {
  const s = "SignupParams";
  const body = await readJson(req, s);
  const email = stringField(body, "email", s);
  const phone = stringField(body, "phone", s);
  const password = stringField(body, "password", s);
  const data = mapField(body, "data", s) ?? {};
  stringField(body, "channel", s);
  const pkce = pkceParams(body, s);
  if (!ctx.signupEnabled) {
    throw unprocessable(
      "signup_disabled",
      "Signups not allowed for this instance",
    );
  }
  if (email === "" && phone === "") {
    throw unprocessable(
      "anonymous_provider_disabled",
      "Anonymous sign-ins are disabled",
    );
  }
  if (password === "") {
    throw badRequest("validation_failed", "Signup requires a valid password");
  }
  checkPasswordStrength(password, ctx.minPasswordLength);
  if (email !== "" && phone !== "") {
    throw badRequest(
      "validation_failed",
      "Only an email address or phone number should be provided on signup.",
    );
  }
  if (email === "") {
    throw badRequest("phone_provider_disabled", "Phone signups are disabled");
  }
  return await _createAccount(
    ctx,
    req,
    validateEmail(email),
    password,
    data,
    pkce,
  );
}

// The sign-up itself, also what a magic link for an unknown address does.
async function _createAccount(
  ctx: AuthContext,
  req: Request,
  address: string,
  password: string,
  data: Record<string, unknown>,
  pkce: Pkce | null,
): Promise<Response> {
  if (!ctx.signupEnabled) {
    throw unprocessable(
      "signup_disabled",
      "Signups not allowed for this instance",
    );
  }
  const aud = requestAud(req, null);
  const existing = await findDuplicateEmailUser(ctx.sql, address, aud);
  if (existing?.email_confirmed_at) {
    // With autoconfirm on Supabase Auth admits the account exists; without,
    // it answers as for a new sign-up, with a made-up user, so that nobody
    // learns which addresses have accounts (signup.go sanitizeUser).
    if (ctx.mailerAutoconfirm) {
      throw unprocessable("user_already_exists", "User already registered");
    }
    return jsonResponse(200, _sanitizedUser(address, aud, data, ctx.now()));
  }
  // Hashing is slow, so it happens before the transaction as in Go.
  const hash = existing ? null : await hashPassword(password);

  let freshIdentityId: string | null = null;
  let createdId: string | null = null;
  const issued = await ctx.sql.begin(async (tx) => {
    const now = ctx.now();
    let userId: string;
    if (existing) {
      // An unconfirmed account is confirmed and signed in without touching
      // its password: Supabase Auth cannot tell who claimed it first.
      userId = existing.id;
    } else {
      userId = crypto.randomUUID();
      createdId = userId;
      await insertUser(tx, {
        id: userId,
        aud,
        role: DEFAULT_ROLE,
        email: address,
        phone: null,
        encryptedPassword: hash!,
        appMetadata: { provider: "email", providers: ["email"] },
        userMetadata: data,
        now,
      });
    }
    const user = (await findUserById(tx, userId))!;
    const hasIdentity = (user.identities ?? []).some((i) =>
      i.provider === "email" && i.provider_id === userId
    );
    let userMetadata = user.raw_user_meta_data ?? {};
    if (!hasIdentity) {
      const identityData: Record<string, unknown> = {
        email: user.email ?? "",
        email_verified: false,
        phone_verified: false,
        sub: userId,
      };
      for (const [k, v] of Object.entries(data)) {
        if (!(k in identityData)) identityData[k] = v;
      }
      const identity = await insertIdentity(tx, {
        userId,
        provider: "email",
        providerId: userId,
        data: identityData,
        now,
      });
      freshIdentityId = identity.id;
      // RemoveUnconfirmedIdentities: the unconfirmed account is reset to
      // what this sign-up claims.
      for (const other of user.identities ?? []) {
        await deleteIdentity(tx, other.id);
      }
      userMetadata = mergeMetadata({}, identityData);
      await updateUser(tx, userId, {
        raw_user_meta_data: userMetadata,
        raw_app_meta_data: mergeMetadata(user.raw_app_meta_data, {
          provider: "email",
          providers: ["email"],
        }),
      }, now);
    }
    if (!ctx.mailerAutoconfirm) {
      // sendConfirmation: the account waits for its link, mailed to the
      // local inbox; the caller gets the user and no session (signup.go).
      await sendConfirmation(
        ctx,
        tx,
        (await findUserById(tx, userId))!,
        redirectTarget(ctx, req),
        pkce,
      );
      return null;
    }
    await updateUser(tx, userId, {
      confirmation_token: "",
      email_confirmed_at: iso(now),
      raw_user_meta_data: mergeMetadata(userMetadata, { email_verified: true }),
    }, now);
    return await issueSession(ctx, tx, userId, _client(req));
  });
  if (issued === null) {
    const user = (await findUserById(ctx.sql, existing?.id ?? createdId!))!;
    return jsonResponse(200, userJson(user));
  }
  // Supabase Auth answers with the identity object it confirmed in memory,
  // whose data shares the map that got email_verified = true (the row keeps
  // false).
  const identities = issued.body.user.identities as
    | Record<string, unknown>[]
    | null;
  for (const identity of identities ?? []) {
    if (identity.identity_id === freshIdentityId && identity.identity_data) {
      (identity.identity_data as Record<string, unknown>).email_verified = true;
    }
  }
  return _tokensResponse(issued);
}

// signup.go sanitizeUser: what a repeated sign-up of a confirmed address
// gets when confirmations are on, shaped like a fresh unconfirmed user.
function _sanitizedUser(
  email: string,
  aud: string,
  data: Record<string, unknown>,
  now: number,
): Record<string, unknown> {
  const user = userJson(
    {
      id: crypto.randomUUID(),
      aud,
      role: "",
      email,
      confirmation_sent_at: iso(now),
      raw_app_meta_data: { provider: "email", providers: ["email"] },
      raw_user_meta_data: data,
      identities: [],
      created_at: iso(now),
      updated_at: iso(now),
    } as unknown as Parameters<typeof userJson>[0],
  );
  return user;
}

async function _token(
  ctx: AuthContext,
  req: Request,
  url: URL,
): Promise<Response> {
  const grantType = url.searchParams.get("grant_type") ?? "";
  if (grantType === "password") return await _passwordGrant(ctx, req);
  if (grantType === "refresh_token") {
    const body = await readJson(req, "RefreshTokenGrantParams");
    const token = stringField(body, "refresh_token", "RefreshTokenGrantParams");
    return _tokensResponse(
      await refreshTokenGrant(ctx, token, _client(req)),
    );
  }
  if (grantType === "pkce") {
    const body = await readJson(req, "PKCEGrantParams");
    return _tokensResponse(await pkceGrant(ctx, body, _client(req)));
  }
  if (["id_token", "web3"].includes(grantType)) {
    throw badRequest(
      "validation_failed",
      `grant_type ${grantType} is not supported by the local stand-in`,
    );
  }
  throw badRequest("invalid_credentials", "unsupported_grant_type");
}

async function _passwordGrant(
  ctx: AuthContext,
  req: Request,
): Promise<Response> {
  const s = "PasswordGrantParams";
  const body = await readJson(req, s);
  const email = stringField(body, "email", s);
  const phone = stringField(body, "phone", s);
  const password = stringField(body, "password", s);
  if (email !== "" && phone !== "") {
    throw badRequest(
      "validation_failed",
      "Only an email address or phone number should be provided on login.",
    );
  }
  const invalid = () =>
    badRequest("invalid_credentials", "Invalid login credentials");
  if (email === "") {
    if (phone !== "") {
      throw unprocessable(
        "phone_provider_disabled",
        "Phone logins are disabled",
      );
    }
    throw badRequest("validation_failed", "missing email or phone");
  }
  const user = await findUserByEmail(ctx.sql, email, requestAud(req, null));
  if (!user || !user.encrypted_password) throw invalid();
  // Supabase Auth reveals a ban before checking the password.
  if (isBanned(user, ctx.now())) {
    throw badRequest("user_banned", "User is banned");
  }
  const valid = await comparePassword(password, user.encrypted_password);
  let weak: WeakPasswordError | undefined;
  if (valid) {
    try {
      checkPasswordStrength(password, ctx.minPasswordLength);
    } catch (err) {
      if (err instanceof WeakPasswordError) weak = err;
    }
  }
  if (!valid) throw invalid();
  if (!user.email_confirmed_at) {
    throw badRequest("email_not_confirmed", "Email not confirmed");
  }
  const issued = await ctx.sql.begin((tx) =>
    issueSession(ctx, tx, user.id, _client(req), weak)
  );
  return _tokensResponse(issued);
}

async function _logout(
  ctx: AuthContext,
  req: Request,
  url: URL,
): Promise<Response> {
  const p = await authenticate(ctx, req);
  const scope = url.searchParams.get("scope") ?? "";
  if (!["", "global", "local", "others"].includes(scope)) {
    throw badRequest(
      "validation_failed",
      `Unsupported logout scope ${goQuote(scope)}`,
    );
  }
  await ctx.sql.begin(async (tx) => {
    // A token without a session can only log out everywhere.
    if (p.session && scope === "local") {
      await deleteSession(tx, p.session.id);
    } else if (p.session && scope === "others") {
      await deleteOtherSessions(tx, p.user.id, p.session.id);
    } else {
      await deleteUserSessions(tx, p.user.id);
    }
  });
  return new Response(null, { status: 204 });
}

async function _getUser(ctx: AuthContext, req: Request): Promise<Response> {
  const p = await authenticate(ctx, req);
  const first = firstAud(p.claims);
  if (first === "" || requestAud(req, p.claims) !== first) {
    throw badRequest(
      "validation_failed",
      "Token audience doesn't match request audience",
    );
  }
  return jsonResponse(200, userJson(p.user));
}

async function _putUser(ctx: AuthContext, req: Request): Promise<Response> {
  const p = await authenticate(ctx, req);
  const s = "UserUpdateParams";
  const body = await readJson(req, s);
  let email = stringField(body, "email", s);
  const password = optionalStringField(body, "password", s);
  optionalStringField(body, "current_password", s);
  stringField(body, "nonce", s);
  const data = mapField(body, "data", s);
  const appData = mapField(body, "app_metadata", s);
  const phone = stringField(body, "phone", s);
  stringField(body, "channel", s);
  // Supabase Auth does not check a PUT /user's PKCE parameters.
  const pkce = pkceParams(body, s, false);
  const user = p.user;
  const aud = requestAud(req, p.claims);

  if (email !== "") email = validateEmail(email);
  if (phone !== "") {
    validatePhone(phone);
    // The change would be confirmed by SMS, and the local stack configures
    // no SMS provider.
    throw internal("Unable to get SMS provider");
  }
  if (password !== null) {
    checkPasswordStrength(password, ctx.minPasswordLength);
  }
  // isAdmin(): the stored user's role is "admin" (GOTRUE_JWT_ADMIN_GROUP_NAME,
  // which only an admin can give: updateUserById({ role })) in the default
  // audience. Anyone else: 403.
  if (
    appData !== null && !(user.aud === DEFAULT_AUD && user.role === "admin")
  ) {
    throw forbidden(
      "not_admin",
      "Updating app_metadata requires admin privileges",
    );
  }
  const changingEmail = email !== "" && email !== (user.email ?? "");
  if (changingEmail) {
    if (await findDuplicateEmailUser(ctx.sql, email, aud, user.id)) {
      throw emailExists();
    }
  }
  let hash: string | null | undefined;
  if (password !== null) {
    if (password !== "") {
      if (await comparePassword(password, user.encrypted_password)) {
        throw unprocessable(
          "same_password",
          "New password should be different from the old password.",
        );
      }
      hash = await hashPassword(password);
    } else {
      hash = null;
    }
  }
  await ctx.sql.begin(async (tx) => {
    const now = ctx.now();
    if (hash !== undefined) {
      // A new password invalidates pending one-time tokens and every other
      // session (UpdatePassword).
      await setPassword(tx, user.id, hash, now);
      if (p.session) await deleteOtherSessions(tx, user.id, p.session.id);
      else await deleteUserSessions(tx, user.id);
    }
    if (data !== null) {
      const fresh = (await findUserById(tx, user.id))!;
      await updateUser(tx, user.id, {
        raw_user_meta_data: mergeMetadata(fresh.raw_user_meta_data, data),
      }, now);
    }
    if (appData !== null) {
      const fresh = (await findUserById(tx, user.id))!;
      await updateUser(tx, user.id, {
        raw_app_meta_data: mergeMetadata(fresh.raw_app_meta_data, appData),
      }, now);
    }
    if (changingEmail) {
      // Supabase Auth never switches a confirmed user's email at once: it
      // records the pending change and mails a confirmation link to the
      // new address and to the current one (`double_confirm_changes`),
      // both caught by the local inbox. The new address shows up as
      // `new_email` until a link is followed.
      await sendEmailChange(
        ctx,
        tx,
        user,
        email,
        redirectTarget(ctx, req),
        pkce,
      );
    }
  });
  return jsonResponse(200, userJson((await findUserById(ctx.sql, user.id))!));
}
