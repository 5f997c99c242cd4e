/**
 * The email flows of the Auth stand-in, as Supabase Auth runs them
 * (internal/api/recover.go, magic_link.go, otp.go, resend.go, verify.go,
 * mail.go): one-time tokens stored as `sha224(email + code)` in the users
 * columns, mails caught by the local {@linkcode Inbox}, and `/verify`
 * exchanging a link or a code for a session. A request with a
 * `code_challenge` takes the PKCE flow (`pkce.ts`): its link hands out an
 * auth code instead of a session.
 *
 * @module
 */
import { createHash } from "node:crypto";
import type { AuthContext } from "./context.ts";
import { isRedirectAllowed } from "./redirects.ts";
import { EMAIL_MAX_FREQUENCY_MS } from "./context.ts";
import {
  ApiError,
  badRequest,
  forbidden,
  jsonResponse,
  unprocessable,
} from "./errors.ts";
import { requestAud } from "./guards.ts";
import {
  clientIp,
  mapField,
  readJson,
  stringField,
  userAgent,
} from "./http.ts";
import type { MailType } from "./mailer.ts";
import {
  hashPassword,
  randomPassword,
  validateEmail,
  validatePhone,
} from "./passwords.ts";
import {
  type Db,
  deleteUserSessions,
  findUserByEmail,
  findUserById,
  findUserByTokenHash,
  iso,
  mergeMetadata,
  msOf,
  setEmailIdentity,
  setPassword,
  type TokenColumn,
  updateIdentityData,
  updateUser,
  type UserRow,
} from "./store.ts";
import { isBanned, type IssuedTokens, issueSession } from "./tokens.ts";
import {
  createFlowState,
  type FlowMethod,
  flowMethodOf,
  flowToken,
  issueAuthCode,
  type Pkce,
  PKCE_PREFIX,
  pkceParams,
} from "./pkce.ts";

/** Length of the emailed code (config.toml `[auth.email] otp_length`). */
export const OTP_LENGTH = 6;

/** What a sign-up does when it has to make an account (api.ts). */
export type SignUp = (
  req: Request,
  email: string,
  password: string,
  data: Record<string, unknown>,
  pkce: Pkce | null,
) => Promise<Response>;

/**
 * Where a link sends the browser back to, as `GetReferrer` picks it: the
 * `redirect_to` request header, or else the query's `redirect_to`, when
 * allowed ({@linkcode isRedirectAllowed}); else the Referer when allowed;
 * else `site_url`.
 */
export function redirectTarget(ctx: AuthContext, req: Request): string {
  const asked = req.headers.get("redirect_to") ||
    new URL(req.url).searchParams.get("redirect_to") || "";
  for (const candidate of [asked, req.headers.get("referer") ?? ""]) {
    if (
      isRedirectAllowed(ctx.siteUrl, ctx.additionalRedirectUrls, candidate)
    ) return candidate;
  }
  return ctx.siteUrl;
}

/** `sha224(email + code)` in hex, Supabase Auth's `GenerateTokenHash`. */
export function tokenHash(email: string, code: string): string {
  return createHash("sha224").update(email + code).digest("hex");
}

/** A fresh emailed code of {@linkcode OTP_LENGTH} digits (`GenerateOtp`). */
export function generateOtp(): string {
  const digits = crypto.getRandomValues(new Uint32Array(OTP_LENGTH));
  return [...digits].map((d) => String(d % 10)).join("");
}

/**
 * The link a mail (or `generate_link`) hands out: `/verify` with the token,
 * its type and where to go back to (`GetEmailActionLink`).
 */
export function actionLink(
  ctx: AuthContext,
  hash: string,
  type: MailType,
  redirectTo: string,
): string {
  const query = new URLSearchParams({
    token: hash,
    type,
    redirect_to: redirectTo,
  });
  return `${ctx.externalUrl}/verify?${query}`;
}

// validateSentWithinFrequencyLimit: one mail of a kind per user per
// config.toml `[auth.email] max_frequency`.
function _checkFrequency(ctx: AuthContext, sentAt: string | null): void {
  if (!sentAt) return;
  const wait = msOf(sentAt) + EMAIL_MAX_FREQUENCY_MS - ctx.now();
  if (wait > 0) {
    throw new ApiError(
      429,
      "over_email_send_rate_limit",
      `For security purposes, you can only request this after ${
        Math.ceil(wait / 1000)
      } seconds.`,
    );
  }
}

/**
 * Mails a sign-up confirmation (`sendConfirmation`), in the PKCE flow when
 * `pkce` is given (its flow state recorded first, as `Signup` and `Resend`
 * do).
 */
export async function sendConfirmation(
  ctx: AuthContext,
  tx: Db,
  user: UserRow,
  redirectTo: string,
  pkce: Pkce | null,
): Promise<void> {
  _checkFrequency(ctx, user.confirmation_sent_at);
  await _startFlow(ctx, tx, user.id, "email/signup", pkce);
  await _mailToken(ctx, tx, user, "signup", redirectTo, pkce);
}

/**
 * Mails an invite (`sendInvite`): a confirmation token, stamped
 * `invited_at`, whose link (`type=invite`) confirms the address and signs
 * the user in. No PKCE flow and no frequency limit, as in Supabase Auth.
 */
export async function sendInvite(
  ctx: AuthContext,
  tx: Db,
  user: UserRow,
  redirectTo: string,
): Promise<void> {
  await _mailToken(ctx, tx, user, "invite", redirectTo, null);
}

// The PKCE flow's state, when the request asked for that flow.
async function _startFlow(
  ctx: AuthContext,
  tx: Db,
  userId: string,
  method: FlowMethod,
  pkce: Pkce | null,
): Promise<void> {
  if (pkce) await createFlowState(ctx, tx, userId, method, pkce);
}

// sendPasswordRecovery and sendMagicLink: both use the recovery token.
async function _sendRecoveryToken(
  ctx: AuthContext,
  tx: Db,
  user: UserRow,
  type: "recovery" | "magiclink",
  redirectTo: string,
  pkce: Pkce | null,
): Promise<void> {
  _checkFrequency(ctx, user.recovery_sent_at);
  await _startFlow(ctx, tx, user.id, type, pkce);
  await _mailToken(ctx, tx, user, type, redirectTo, pkce);
}

// A fresh code for the user's address, its hash (prefixed in the PKCE flow)
// stored in the users column its kind of mail reads, with the time sent
// (and `invited_at` for an invite), and the mail with its link and code.
async function _mailToken(
  ctx: AuthContext,
  tx: Db,
  user: UserRow,
  type: "signup" | "invite" | "recovery" | "magiclink",
  redirectTo: string,
  pkce: Pkce | null,
): Promise<void> {
  const email = user.email ?? "";
  const code = generateOtp();
  const hash = flowToken(tokenHash(email, code), pkce);
  const now = iso(ctx.now());
  await updateUser(
    tx,
    user.id,
    type === "recovery" || type === "magiclink"
      ? { recovery_token: hash, recovery_sent_at: now }
      : {
        confirmation_token: hash,
        confirmation_sent_at: now,
        ...(type === "invite" ? { invited_at: now } : {}),
      },
    ctx.now(),
  );
  ctx.inbox.send({
    to: email,
    type,
    link: actionLink(ctx, hash, type, redirectTo),
    otp: code,
  });
}

/**
 * Records a pending email change and mails its links (`sendEmailChange`):
 * one to the new address and, when the user has an address, one to it
 * (double confirmation, config.toml `double_confirm_changes`); in the PKCE
 * flow when `pkce` is given.
 */
export async function sendEmailChange(
  ctx: AuthContext,
  tx: Db,
  user: UserRow,
  newEmail: string,
  redirectTo: string,
  pkce: Pkce | null,
): Promise<void> {
  _checkFrequency(ctx, user.email_change_sent_at);
  await _startFlow(ctx, tx, user.id, "email_change", pkce);
  const codeNew = generateOtp();
  const hashNew = flowToken(tokenHash(newEmail, codeNew), pkce);
  const current = user.email ?? "";
  const codeCurrent = current ? generateOtp() : "";
  const hashCurrent = current
    ? flowToken(tokenHash(current, codeCurrent), pkce)
    : "";
  await updateUser(tx, user.id, {
    email_change: newEmail,
    email_change_token_new: hashNew,
    email_change_token_current: hashCurrent,
    email_change_confirm_status: 0,
    email_change_sent_at: iso(ctx.now()),
  }, ctx.now());
  ctx.inbox.send({
    to: newEmail,
    type: "email_change",
    link: actionLink(ctx, hashNew, "email_change", redirectTo),
    otp: codeNew,
  }, { newEmail, email: current });
  if (current) {
    ctx.inbox.send({
      to: current,
      type: "email_change",
      link: actionLink(ctx, hashCurrent, "email_change", redirectTo),
      otp: codeCurrent,
    }, { newEmail, email: current });
  }
}

/** POST /recover: 200 `{}` whether or not the address has an account. */
export async function recover(
  ctx: AuthContext,
  req: Request,
): Promise<Response> {
  const s = "RecoverParams";
  const body = await readJson(req, s);
  let email = stringField(body, "email", s);
  if (email === "") {
    throw badRequest(
      "validation_failed",
      "Password recovery requires an email",
    );
  }
  email = validateEmail(email);
  const pkce = pkceParams(body, s);
  const user = await findUserByEmail(ctx.sql, email, requestAud(req, null));
  if (!user) return jsonResponse(200, {});
  const redirectTo = redirectTarget(ctx, req);
  await ctx.sql.begin((tx) =>
    _sendRecoveryToken(ctx, tx, user, "recovery", redirectTo, pkce)
  );
  return jsonResponse(200, {});
}

/**
 * POST /otp (email) and POST /magiclink: a sign-in link and code for an
 * existing confirmed account; otherwise a sign-up (with a random password)
 * whose confirmation mail doubles as the link. `create_user: false` with no
 * account is 422 `otp_disabled`.
 */
export async function otp(
  ctx: AuthContext,
  req: Request,
  signUp: SignUp,
  route: "/otp" | "/magiclink",
): Promise<Response> {
  const s = route === "/otp" ? "OtpParams" : "MagicLinkParams";
  const body = await readJson(req, s);
  let email = stringField(body, "email", s);
  const phone = route === "/otp" ? stringField(body, "phone", s) : "";
  const data = mapField(body, "data", s) ?? {};
  // `/magiclink`'s parameters (`MagicLinkParams`) have no `create_user`: it
  // signs an unknown address up whatever the body says.
  const createUser = route === "/magiclink" || body.create_user === undefined ||
      body.create_user === null
    ? true
    : body.create_user;
  if (typeof createUser !== "boolean") {
    throw badRequest(
      "bad_json",
      "Could not parse request body as JSON: json: cannot unmarshal into Go struct field OtpParams.create_user of type bool",
    );
  }
  if (route === "/otp") {
    if (email !== "" && phone !== "") {
      throw badRequest(
        "validation_failed",
        "Only an email address or phone number should be provided",
      );
    }
    if (phone !== "") {
      throw badRequest(
        "phone_provider_disabled",
        "Unsupported phone provider",
      );
    }
    if (email === "") {
      throw badRequest(
        "validation_failed",
        "One of email or phone must be set",
      );
    }
  } else if (email === "") {
    throw unprocessable(
      "validation_failed",
      "Password recovery requires an email",
    );
  }
  email = validateEmail(email);
  const pkce = pkceParams(body, s);
  const aud = requestAud(req, null);
  const user = await findUserByEmail(ctx.sql, email, aud);
  if (!user && !createUser) {
    throw unprocessable("otp_disabled", "Signups not allowed for otp");
  }
  const redirectTo = redirectTarget(ctx, req);
  if (!user || !user.email_confirmed_at) {
    const password = randomPassword();
    const res = await signUp(req, email, password, data, pkce);
    if (!res.ok) return res;
    await res.body?.cancel();
    if (!ctx.mailerAutoconfirm) return jsonResponse(200, {});
  }
  const fresh = (await findUserByEmail(ctx.sql, email, aud))!;
  await ctx.sql.begin((tx) =>
    _sendRecoveryToken(ctx, tx, fresh, "magiclink", redirectTo, pkce)
  );
  return jsonResponse(200, {});
}

/** POST /resend: `signup` or `email_change` mails again. */
export async function resend(
  ctx: AuthContext,
  req: Request,
): Promise<Response> {
  const s = "ResendConfirmationParams";
  const body = await readJson(req, s);
  const type = stringField(body, "type", s);
  let email = stringField(body, "email", s);
  const phone = stringField(body, "phone", s);
  if (type === "sms" || type === "phone_change") {
    throw badRequest("phone_provider_disabled", "Phone logins are disabled");
  }
  if (type !== "signup" && type !== "email_change") {
    throw badRequest(
      "validation_failed",
      "Missing one of these types: signup, email_change, sms, phone_change",
    );
  }
  const pkce = pkceParams(body, s);
  if (email === "" && type === "signup") {
    throw badRequest(
      "validation_failed",
      "Type provided requires an email address",
    );
  }
  if (email !== "" && phone !== "") {
    throw badRequest(
      "validation_failed",
      "Only an email address or phone number should be provided.",
    );
  }
  if (phone !== "") {
    throw badRequest("phone_provider_disabled", "Phone logins are disabled");
  }
  if (email === "") {
    throw badRequest(
      "validation_failed",
      "Missing email address or phone number",
    );
  }
  email = validateEmail(email);
  const user = await findUserByEmail(ctx.sql, email, requestAud(req, null));
  if (!user) return jsonResponse(200, {});
  if (type === "signup" && user.email_confirmed_at) {
    return jsonResponse(200, {});
  }
  if (type === "email_change" && !user.email_change) {
    return jsonResponse(200, {});
  }
  const redirectTo = redirectTarget(ctx, req);
  await ctx.sql.begin((tx) =>
    type === "signup"
      ? sendConfirmation(ctx, tx, user, redirectTo, pkce)
      : sendEmailChange(ctx, tx, user, user.email_change!, redirectTo, pkce)
  );
  return jsonResponse(200, {});
}

const _SINGLE_CONFIRMATION =
  "Confirmation link accepted. Please proceed to confirm link sent to the other email";

// The users columns each verification type reads its token from.
const _COLUMNS: Record<string, readonly TokenColumn[]> = {
  signup: ["confirmation_token"],
  invite: ["confirmation_token"],
  recovery: ["recovery_token"],
  magiclink: ["recovery_token"],
  email: ["confirmation_token", "recovery_token"],
  email_change: ["email_change_token_current", "email_change_token_new"],
};

interface Verified {
  /**
   * Tokens of the new session; none after the first of two email-change
   * links, or in the PKCE flow.
   */
  issued: IssuedTokens | null;
  /** The PKCE flow's auth code, once the last link is followed. */
  code?: string;
  /** The verification type after `email` is resolved. */
  type: string;
}

/**
 * GET /verify (a mail's link): 303 to `redirect_to` with the session in the
 * fragment (`#access_token=…&type=recovery`), or the error there
 * (`#error=access_denied&error_code=otp_expired…`). A PKCE flow's link
 * (`pkce_` token) carries `?code=<auth code>` instead, and its error or
 * message in the query as well.
 * POST /verify (`verifyOtp`): 200 with the session, 403 `otp_expired`.
 */
export async function verify(
  ctx: AuthContext,
  req: Request,
): Promise<Response> {
  const url = new URL(req.url);
  if (req.method === "GET") {
    const token = url.searchParams.get("token") ?? "";
    const type = url.searchParams.get("type") ?? "";
    const redirectTo = redirectTarget(ctx, req);
    if (type === "") {
      throw badRequest(
        "validation_failed",
        "Verify requires a verification type",
      );
    }
    if (token === "") {
      throw badRequest(
        "validation_failed",
        "Verify requires a token or a token hash",
      );
    }
    let flow: FlowMethod | null = null;
    if (token.startsWith(PKCE_PREFIX)) {
      // ParseAuthenticationMethod's error: Supabase Auth's 500, not a
      // redirect.
      flow = flowMethodOf(type);
      if (!flow) throw new Error(`unsupported authentication method "${type}"`);
    }
    let target: string;
    try {
      const done = await _verifyHash(ctx, req, token, type, { flow });
      if (done.code) {
        const url = new URL(redirectTo);
        url.searchParams.set("code", done.code);
        target = url.toString();
      } else if (!done.issued) {
        target = _redirect(redirectTo, { message: _SINGLE_CONFIRMATION }, flow);
      } else {
        const b = done.issued.body;
        target = _asRedirectUrl(redirectTo, {
          access_token: String(b.access_token),
          expires_at: String(b.expires_at),
          expires_in: String(b.expires_in),
          refresh_token: String(b.refresh_token),
          token_type: String(b.token_type),
          type: done.type,
        });
      }
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      target = _redirect(redirectTo, {
        ...(_OAUTH_ERRORS[err.status]
          ? { error: _OAUTH_ERRORS[err.status] }
          : {}),
        error_code: err.errorCode,
        error_description: err.message,
      }, flow);
    }
    return new Response(null, { status: 303, headers: { Location: target } });
  }

  const s = "VerifyParams";
  const body = await readJson(req, s);
  const type = stringField(body, "type", s);
  const token = stringField(body, "token", s);
  const hash = stringField(body, "token_hash", s);
  let email = stringField(body, "email", s);
  const phone = stringField(body, "phone", s);
  const redirect = stringField(body, "redirect_to", s);
  if (type === "") {
    throw badRequest(
      "validation_failed",
      "Verify requires a verification type",
    );
  }
  if ((token === "") === (hash === "")) {
    throw badRequest(
      "validation_failed",
      "Verify requires either a token or a token hash",
    );
  }
  let done: Verified;
  if (token !== "" && phone !== "" && _PHONE_TYPES.has(type)) {
    // No account has a phone here (phone sign-ups are off), so a valid
    // number is never found: Supabase Auth's answer for that.
    validatePhone(phone);
    throw forbidden("otp_expired", "Token has expired or is invalid");
  }
  if (token !== "") {
    if (email === "") {
      throw badRequest(
        "validation_failed",
        "Only an email address or phone number should be provided on verify",
      );
    }
    try {
      email = validateEmail(email);
    } catch {
      throw unprocessable("validation_failed", "Invalid email format");
    }
    done = await _verifyCode(ctx, req, email, token, type);
  } else {
    if (email !== "" || phone !== "" || redirect !== "") {
      throw badRequest(
        "validation_failed",
        "Only the token_hash and type should be provided",
      );
    }
    done = await _verifyHash(ctx, req, hash, type);
  }
  if (!done.issued) {
    return jsonResponse(200, { msg: _SINGLE_CONFIRMATION, code: "200" });
  }
  return jsonResponse(200, done.issued.body, done.issued.headers);
}

const _PHONE_TYPES = new Set(["sms", "phone_change"]);

// oauthErrorMap: the OAuth `error` a link's failure carries.
const _OAUTH_ERRORS: Record<number, string> = {
  400: "invalid_request",
  401: "unauthorized_client",
  403: "access_denied",
  500: "server_error",
  503: "temporarily_unavailable",
};

// prepErrorRedirectURL and prepRedirectURL: the values in the fragment,
// and in the PKCE flow in the query too (where a server sees them).
function _redirect(
  target: string,
  values: Record<string, string>,
  flow: FlowMethod | null,
): string {
  if (!flow) return _withFragment(target, values);
  const url = new URL(target);
  for (const [k, v] of Object.entries(values)) url.searchParams.set(k, v);
  return _withFragment(url.toString(), values);
}

function _withFragment(target: string, values: Record<string, string>): string {
  const fragment = new URLSearchParams(
    Object.entries(values).sort(([a], [b]) => a.localeCompare(b)),
  );
  fragment.set("sb", "");
  const url = new URL(target);
  url.hash = fragment.toString();
  return url.toString();
}

// AsRedirectURL: a link's session after the target as it stands, its own
// fragment kept (`…/#/welcome#access_token=…`), with `sb` and the keys
// sorted and escaped as Go's url.Values.Encode does.
function _asRedirectUrl(
  target: string,
  values: Record<string, string>,
): string {
  const escape = (s: string) =>
    encodeURIComponent(s).replace(
      /[!'()*]/g,
      (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
    ).replaceAll("%20", "+");
  const encoded = Object.entries({ ...values, sb: "" })
    .sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0)
    .map(([k, v]) => `${escape(k)}=${escape(v)}`)
    .join("&");
  return `${target}#${encoded}`;
}

// verifyTokenHash: a link's token (or `token_hash`) finds its user.
// `link`: a GET of a mailed link; `link.flow`: the link's PKCE flow, which
// ends in an auth code.
async function _verifyHash(
  ctx: AuthContext,
  req: Request,
  hash: string,
  type: string,
  link?: { flow: FlowMethod | null },
): Promise<Verified> {
  const columns = _COLUMNS[type];
  if (!columns) {
    throw badRequest(
      "validation_failed",
      "Invalid email verification type",
    );
  }
  const invalid = () =>
    forbidden("otp_expired", "Email link is invalid or has expired");
  return await ctx.sql.begin(async (tx) => {
    const user = await findUserByTokenHash(tx, hash, columns);
    if (!user) throw invalid();
    if (isBanned(user, ctx.now())) {
      throw forbidden("user_banned", "User is banned");
    }
    let resolved = type;
    let sentAt = _sentAt(user, type);
    if (type === "email") {
      resolved = user.recovery_token === hash ? "magiclink" : "signup";
      sentAt = _sentAt(user, resolved);
    }
    if (_expired(ctx, sentAt)) throw invalid();
    // A link's `type=email` goes on as the type it resolved to, as
    // verifyTokenHash rewrites it for verifyGet.
    return await _complete(ctx, tx, req, user, resolved, hash, link?.flow);
  });
}

// verifyUserAndToken: the code typed from a mail, with its address.
async function _verifyCode(
  ctx: AuthContext,
  req: Request,
  email: string,
  code: string,
  type: string,
): Promise<Verified> {
  if (!_COLUMNS[type]) {
    throw badRequest("validation_failed", "Unsupported verification type");
  }
  const invalid = () =>
    forbidden("otp_expired", "Token has expired or is invalid");
  const aud = requestAud(req, null);
  return await ctx.sql.begin(async (tx) => {
    let user: UserRow | null;
    if (type === "email_change") {
      const rows = await tx`
        select id::text from auth.users
        where (lower(email_change) = ${email}::text
          or lower(email) = ${email}::text) and aud = ${aud}::text
          and email_change <> '' limit 1`;
      user = rows.length ? await findUserById(tx, rows[0].id) : null;
    } else {
      user = await findUserByEmail(tx, email, aud);
    }
    if (!user) throw invalid();
    if (isBanned(user, ctx.now())) {
      throw forbidden("user_banned", "User is banned");
    }
    // isOtpValid: the code's hash, as stored or with a PKCE flow's prefix.
    const hash = tokenHash(email, code);
    const valid = (column: TokenColumn, kind: string) =>
      (user![column] === hash || user![column] === PKCE_PREFIX + hash) &&
      !_expired(ctx, _sentAt(user!, kind));
    let resolved = type;
    let column: TokenColumn | undefined;
    if (type === "email") {
      if (valid("confirmation_token", "signup")) {
        [resolved, column] = ["signup", "confirmation_token"];
      } else if (valid("recovery_token", "magiclink")) {
        [resolved, column] = ["magiclink", "recovery_token"];
      }
    } else {
      column = _COLUMNS[type].find((c) => valid(c, type));
    }
    if (!column) throw invalid();
    return await _complete(ctx, tx, req, user, resolved, user[column]!);
  });
}

function _sentAt(user: UserRow, type: string): string | null {
  if (type === "recovery" || type === "magiclink") return user.recovery_sent_at;
  if (type === "email_change") return user.email_change_sent_at;
  return user.confirmation_sent_at;
}

// isOtpExpired: config.toml `[auth.email] otp_expiry`.
function _expired(ctx: AuthContext, sentAt: string | null): boolean {
  return !sentAt || msOf(sentAt) + ctx.otpExpiry * 1000 < ctx.now();
}

// signupVerify, recoverVerify and emailChangeVerify, then a session, or in
// the PKCE flow (`flow`) the flow's auth code. `stored`: the token as the
// users row holds it.
async function _complete(
  ctx: AuthContext,
  tx: Db,
  req: Request,
  user: UserRow,
  type: string,
  stored: string,
  flow?: FlowMethod | null,
): Promise<Verified> {
  const now = ctx.now();
  if (type === "signup" || type === "invite") {
    await _passwordForInvited(tx, user, now);
    await _confirm(tx, user, now);
  } else if (type === "recovery" || type === "magiclink") {
    await updateUser(tx, user.id, { recovery_token: "" }, now);
    if (!user.email_confirmed_at) await _confirm(tx, user, now);
  } else if (type === "email_change") {
    if (
      !ctx.mailerAutoconfirm && user.email_change_confirm_status === 0 &&
      user.email
    ) {
      // The first of the two links: wait for the other one.
      await updateUser(tx, user.id, {
        email_change_confirm_status: 1,
        ...(user.email_change_token_current === stored
          ? { email_change_token_current: "" }
          : { email_change_token_new: "" }),
      }, now);
      return { issued: null, type };
    }
    const newEmail = user.email_change ?? "";
    // emailChangeVerify: the email identity takes the new address, or is
    // made for it when the account has none (a phone or OAuth account).
    await setEmailIdentity(tx, user, newEmail, true, now);
    await updateUser(tx, user.id, {
      email: newEmail,
      email_change: "",
      email_change_token_new: "",
      email_change_token_current: "",
      email_change_confirm_status: 0,
      raw_user_meta_data: user.raw_user_meta_data &&
          "email" in user.raw_user_meta_data
        ? mergeMetadata(user.raw_user_meta_data, { email: newEmail })
        : user.raw_user_meta_data,
    }, now);
  }
  if (flow) {
    return {
      issued: null,
      code: await issueAuthCode(ctx, tx, user.id, flow),
      type,
    };
  }
  const issued = await issueSession(
    ctx,
    tx,
    user.id,
    {
      userAgent: userAgent(req),
      ip: clientIp(req),
    },
    undefined,
    "otp",
  );
  return { issued, type };
}

// signupVerify: an invited user without a password gets one nobody knows
// (the app then asks for theirs, `updateUser({ password })`), set as
// `UpdatePassword` does: pending tokens void, every session ended.
async function _passwordForInvited(
  tx: Db,
  user: UserRow,
  now: number,
): Promise<void> {
  if (user.encrypted_password || !user.invited_at) return;
  await setPassword(tx, user.id, await hashPassword(randomPassword()), now);
  await deleteUserSessions(tx, user.id);
}

// User.Confirm: the address is proven.
async function _confirm(tx: Db, user: UserRow, now: number): Promise<void> {
  await updateUser(tx, user.id, {
    email_confirmed_at: user.email_confirmed_at ?? iso(now),
    confirmation_token: "",
    raw_user_meta_data: mergeMetadata(user.raw_user_meta_data, {
      email_verified: true,
    }),
  }, now);
  for (const identity of user.identities ?? []) {
    if (identity.provider === "email") {
      await updateIdentityData(tx, identity.id, { email_verified: true }, now);
    }
  }
}
