/**
 * Links and invites an administrator hands out, as Supabase Auth does
 * (internal/api/mail.go `adminGenerateLink`, invite.go `Invite`):
 * `POST /admin/generate_link` answers a mail's link, code and token hash
 * without sending the mail (what apps' end-to-end tests use instead of
 * reading mail), and `POST /invite` makes an account and mails its invite
 * to the local inbox. Both require an admin token; neither looks at
 * config.toml `enable_signup` (admin paths make accounts regardless).
 *
 * @module
 */
import type { AuthContext } from "./context.ts";
import { DEFAULT_ROLE } from "./context.ts";
import {
  actionLink,
  generateOtp,
  redirectTarget,
  sendInvite,
  tokenHash,
} from "./email.ts";
import { badRequest, emailExists, jsonResponse, notFound } from "./errors.ts";
import { requestAud, requireAdmin } from "./guards.ts";
import { type Body, mapField, readJson, stringField } from "./http.ts";
import type { AccessTokenClaims } from "./jwt.ts";
import type { MailType } from "./mailer.ts";
import {
  checkPasswordStrength,
  hashPassword,
  randomPassword,
  validateEmail,
} from "./passwords.ts";
import { isRedirectAllowed } from "./redirects.ts";
import { userJson } from "./present.ts";
import {
  type Db,
  findDuplicateEmailUser,
  findUserByEmail,
  findUserById,
  insertIdentity,
  insertUser,
  iso,
  mergeMetadata,
  updateUser,
  type UserRow,
} from "./store.ts";

/** The `type`s `POST /admin/generate_link` takes (mail.go's `…Verification`). */
export type LinkType =
  | "signup"
  | "invite"
  | "magiclink"
  | "recovery"
  | "email_change_current"
  | "email_change_new";

const _LINK_TYPES: readonly string[] = [
  "signup",
  "invite",
  "magiclink",
  "recovery",
  "email_change_current",
  "email_change_new",
];

interface _GenerateLinkParams {
  type: string;
  email: string;
  newEmail: string;
  password: string;
  data: Record<string, unknown> | null;
  redirectTo: string;
}

function _params(body: Body): _GenerateLinkParams {
  const s = "GenerateLinkParams";
  return {
    type: stringField(body, "type", s),
    email: stringField(body, "email", s),
    newEmail: stringField(body, "new_email", s),
    password: stringField(body, "password", s),
    data: mapField(body, "data", s),
    redirectTo: stringField(body, "redirect_to", s),
  };
}

/**
 * POST /admin/generate_link (`generateLink`): the user, as `models.User`
 * marshals, with `action_link`, `email_otp`, `hashed_token`,
 * `verification_type` and `redirect_to` beside its fields (supabase-js
 * splits them into `data.properties` and `data.user`). Nothing is mailed.
 * 404 `user_not_found` for a recovery or email change of an unknown
 * address, 422 `email_exists` for a sign-up or invite of a confirmed one,
 * 400 `validation_failed` for another type.
 */
export async function adminGenerateLink(
  ctx: AuthContext,
  req: Request,
  claims: AccessTokenClaims,
): Promise<Response> {
  const p = _params(await readJson(req, "GenerateLinkParams"));
  p.email = validateEmail(p.email);
  // The query's `redirect_to` (or the Referer), overridden by the body's
  // when that one is allowed.
  const referrer =
    isRedirectAllowed(ctx.siteUrl, ctx.additionalRedirectUrls, p.redirectTo)
      ? p.redirectTo
      : redirectTarget(ctx, req);
  const aud = requestAud(req, claims);
  const user = await findUserByEmail(ctx.sql, p.email, aud);
  if (!user) {
    if (p.type === "magiclink") {
      // An unknown address's magic link is a sign-up link.
      p.type = "signup";
      p.password = randomPassword();
    } else if (
      ["recovery", "email_change_current", "email_change_new"].includes(p.type)
    ) {
      throw notFound("user_not_found", "User with this email not found");
    }
  }
  if (!_LINK_TYPES.includes(p.type)) {
    throw badRequest(
      "validation_failed",
      `Invalid email action link type requested: ${p.type}`,
    );
  }
  const type = p.type as LinkType;
  // validateSignupParams, before the slow hash and the transaction.
  let passwordHash = "";
  if (type === "signup" && !user) {
    if (p.password === "") {
      throw badRequest("validation_failed", "Signup requires a valid password");
    }
    checkPasswordStrength(p.password, ctx.minPasswordLength);
    passwordHash = await hashPassword(p.password);
  }
  const otp = generateOtp();
  const hashedToken = tokenHash(p.email, otp);
  const { id, link } = await ctx.sql.begin(async (tx) => {
    const target = user ??
      await _signupNewUser(tx, ctx, {
        aud,
        email: p.email,
        passwordHash,
        data: p.data ?? {},
      });
    const token = await _storeToken(ctx, tx, target, type, p, otp, hashedToken);
    return {
      id: target.id,
      link: actionLink(ctx, token, _linkMailType(type), referrer),
    };
  });
  return jsonResponse(200, {
    ...userJson((await findUserById(ctx.sql, id))!),
    action_link: link,
    email_otp: otp,
    hashed_token: hashedToken,
    verification_type: type,
    redirect_to: referrer,
  });
}

// The `type` the link carries to `/verify` (both email-change links are
// `email_change` there).
function _linkMailType(type: LinkType): MailType {
  return type === "email_change_current" || type === "email_change_new"
    ? "email_change"
    : type;
}

// adminGenerateLink's transaction: the token in the users columns its type
// reads, and the token the link carries.
async function _storeToken(
  ctx: AuthContext,
  tx: Db,
  user: UserRow,
  type: LinkType,
  p: _GenerateLinkParams,
  otp: string,
  hashedToken: string,
): Promise<string> {
  const now = ctx.now();
  if (type === "magiclink" || type === "recovery") {
    await updateUser(tx, user.id, {
      recovery_token: hashedToken,
      recovery_sent_at: iso(now),
    }, now);
    return hashedToken;
  }
  if (type === "signup" || type === "invite") {
    if (user.email_confirmed_at) {
      throw emailExists();
    }
    await updateUser(tx, user.id, {
      confirmation_token: hashedToken,
      confirmation_sent_at: iso(now),
      ...(type === "invite" ? { invited_at: iso(now) } : {}),
      // An existing unconfirmed user's metadata takes the sign-up's data.
      ...(type === "signup" && p.data
        ? {
          raw_user_meta_data: mergeMetadata(user.raw_user_meta_data, p.data),
        }
        : {}),
    }, now);
    return hashedToken;
  }
  const newEmail = validateEmail(p.newEmail);
  if (await findDuplicateEmailUser(tx, newEmail, user.aud ?? "", user.id)) {
    throw emailExists();
  }
  // The new address's token is hashed with the new address, while
  // `hashed_token` in the answer is hashed with the current one, as in
  // Supabase Auth: an `email_change_new` link works, its `hashed_token` not.
  const token = type === "email_change_current"
    ? hashedToken
    : tokenHash(newEmail, otp);
  await updateUser(tx, user.id, {
    email_change: newEmail,
    email_change_sent_at: iso(now),
    email_change_confirm_status: 0,
    ...(type === "email_change_current"
      ? { email_change_token_current: token }
      : { email_change_token_new: token }),
  }, now);
  return token;
}

// signupNewUser and createNewIdentity as the invite and generate_link make
// an account: the email provider, the data as user metadata, an identity
// holding only the claims (`sub`, `email`); unconfirmed, and without a
// password for an invite.
async function _signupNewUser(
  tx: Db,
  ctx: AuthContext,
  p: {
    aud: string;
    email: string;
    passwordHash: string;
    data: Record<string, unknown>;
  },
): Promise<UserRow> {
  const id = crypto.randomUUID();
  const now = ctx.now();
  await insertUser(tx, {
    id,
    aud: p.aud,
    role: DEFAULT_ROLE,
    email: p.email,
    phone: null,
    encryptedPassword: p.passwordHash,
    appMetadata: { provider: "email", providers: ["email"] },
    userMetadata: p.data,
    now,
  });
  await insertIdentity(tx, {
    userId: id,
    provider: "email",
    providerId: id,
    data: {
      email: p.email,
      email_verified: false,
      phone_verified: false,
      sub: id,
    },
    now,
  });
  return (await findUserById(tx, id))!;
}

/**
 * POST /invite (`inviteUserByEmail`): makes the account (or takes an
 * unconfirmed one), stamps `invited_at` and mails the invite to the local
 * inbox; 422 `email_exists` for a confirmed address. Answers the user.
 */
export async function invite(
  ctx: AuthContext,
  req: Request,
): Promise<Response> {
  const claims = await requireAdmin(ctx, req);
  const s = "InviteParams";
  const body = await readJson(req, s);
  const email = validateEmail(stringField(body, "email", s));
  const data = mapField(body, "data", s) ?? {};
  const aud = requestAud(req, claims);
  const existing = await findUserByEmail(ctx.sql, email, aud);
  if (existing?.email_confirmed_at) {
    throw emailExists();
  }
  const redirectTo = redirectTarget(ctx, req);
  const id = await ctx.sql.begin(async (tx) => {
    const user = existing ??
      await _signupNewUser(tx, ctx, { aud, email, passwordHash: "", data });
    await sendInvite(ctx, tx, user, redirectTo);
    return user.id;
  });
  return jsonResponse(200, userJson((await findUserById(ctx.sql, id))!));
}
