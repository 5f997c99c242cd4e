/**
 * The admin user routes (`/admin/users...`) as Supabase Auth answers them
 * (internal/api/admin.go, pagination.go, sorting.go), and
 * `/admin/generate_link` (admin_links.ts). Every `/admin` path
 * first requires an admin token (service_role), before any routing.
 *
 * @module
 */
import { adminGenerateLink } from "./admin_links.ts";
import type { AuthContext } from "./context.ts";
import { DEFAULT_ROLE } from "./context.ts";
import {
  ApiError,
  badRequest,
  emailExists,
  internal,
  jsonResponse,
  notFound,
  unprocessable,
} from "./errors.ts";
import { requestAud, requireAdmin } from "./guards.ts";
import {
  type Body,
  boolField,
  canonicalUuid,
  isUuid,
  mapField,
  methodNotAllowed,
  notFoundRoute,
  optionalStringField,
  parseGoDuration,
  readJson,
  stringField,
} from "./http.ts";
import type { AccessTokenClaims } from "./jwt.ts";
import {
  checkPasswordStrength,
  hashPassword,
  MAX_PASSWORD_BYTES,
  randomPassword,
  validateEmail,
  validatePhone,
} from "./passwords.ts";
import { userJson } from "./present.ts";
import {
  type Db,
  deleteUser,
  deleteUserSessions,
  findDuplicateEmailUser,
  findUserById,
  insertIdentity,
  insertUser,
  iso,
  listUsers,
  mergeMetadata,
  NIL_UUID,
  phoneTaken,
  setEmailIdentity,
  setIdentityProviderId,
  setPassword,
  updateIdentityData,
  updateUser,
  type UserRow,
} from "./store.ts";

const _ADMIN_PARAMS = "AdminUserParams";

/** Handles a request whose path (without `/auth/v1`) starts with `/admin`. */
export async function handleAdmin(
  ctx: AuthContext,
  req: Request,
  path: string,
): Promise<Response> {
  const claims = await requireAdmin(ctx, req);
  if (path === "/admin/users") {
    if (req.method === "GET") return await _list(ctx, req, claims);
    if (req.method === "POST") return await _create(ctx, req, claims);
    return methodNotAllowed();
  }
  if (path === "/admin/generate_link") {
    if (req.method !== "POST") return methodNotAllowed();
    return await adminGenerateLink(ctx, req, claims);
  }
  const match = /^\/admin\/users\/([^/]+)$/.exec(path);
  if (!match) return notFoundRoute(req);
  if (!["GET", "PUT", "DELETE"].includes(req.method)) {
    return methodNotAllowed();
  }
  const user = await _loadUser(ctx, decodeURIComponent(match[1]));
  if (req.method === "GET") return jsonResponse(200, userJson(user));
  if (req.method === "PUT") return await _update(ctx, req, user);
  return await _delete(ctx, req, user);
}

async function _loadUser(ctx: AuthContext, id: string): Promise<UserRow> {
  if (!isUuid(id)) {
    throw notFound("validation_failed", "user_id must be an UUID");
  }
  const user = await findUserById(ctx.sql, canonicalUuid(id));
  if (!user) throw notFound("user_not_found", "User not found");
  return user;
}

async function _list(
  ctx: AuthContext,
  req: Request,
  claims: AccessTokenClaims,
): Promise<Response> {
  const url = new URL(req.url);
  const aud = requestAud(req, claims);
  let ascending = false;
  for (const value of url.searchParams.getAll("sort")) {
    const [field, dir] = [
      value.split(" ")[0],
      value.split(" ").slice(1).join(" "),
    ];
    if (field !== "created_at") {
      throw badRequest(
        "validation_failed",
        `Bad Sort Parameters: bad field for sort '${field}'`,
      );
    }
    if (dir === "" || dir.toUpperCase() === "DESC") ascending = false;
    else if (dir.toUpperCase() === "ASC") ascending = true;
    else {
      throw badRequest(
        "validation_failed",
        `Bad Sort Parameters: bad direction for sort '${dir}', only 'asc' and 'desc' allowed`,
      );
    }
  }
  const page = _uint(url.searchParams.get("page"), 1);
  const perPage = _uint(url.searchParams.get("per_page"), 50);
  if (perPage === 0) {
    // Supabase Auth divides by per_page when computing the last page.
    throw internal("Internal Server Error");
  }
  const { users, total } = await listUsers(ctx.sql, {
    aud,
    page: Math.max(page, 1),
    perPage,
    filter: url.searchParams.get("filter") ?? "",
    ascending,
  });
  return jsonResponse(200, { users: users.map(userJson), aud }, {
    Link: _paginationLink(url, page, perPage, total),
    "X-Total-Count": String(total),
  });
}

function _uint(value: string | null, fallback: number): number {
  if (value === null || value === "") return fallback;
  if (!/^\d+$/.test(value)) {
    throw badRequest(
      "validation_failed",
      `Bad Pagination Parameters: strconv.ParseUint: parsing ${
        JSON.stringify(value)
      }: invalid syntax`,
    );
  }
  return Number(value);
}

// Go builds these links from the request URI it sees behind the gateway,
// i.e. without the /auth/v1 prefix, with query keys sorted.
function _paginationLink(
  url: URL,
  page: number,
  perPage: number,
  total: number,
): string {
  const totalPages = Math.ceil(total / perPage);
  const base = url.pathname.replace(/^\/auth\/v1/, "");
  const withPage = (n: number) => {
    const q = new URLSearchParams(url.searchParams);
    q.set("page", String(n));
    q.sort();
    return `<${base}?${q.toString()}>`;
  };
  let header = "";
  if (totalPages > page) header += `${withPage(page + 1)}; rel="next", `;
  header += `${withPage(totalPages)}; rel="last"`;
  return header;
}

interface _AdminParams {
  id: string;
  aud: string;
  role: string;
  email: string;
  phone: string;
  password: string | null;
  passwordHash: string;
  emailConfirm: boolean;
  phoneConfirm: boolean;
  userMetadata: Record<string, unknown> | null;
  appMetadata: Record<string, unknown> | null;
  banDuration: string;
}

function _params(body: Body): _AdminParams {
  const s = _ADMIN_PARAMS;
  return {
    id: stringField(body, "id", s),
    aud: stringField(body, "aud", s),
    role: stringField(body, "role", s),
    email: stringField(body, "email", s),
    phone: stringField(body, "phone", s),
    password: optionalStringField(body, "password", s),
    passwordHash: stringField(body, "password_hash", s),
    emailConfirm: boolField(body, "email_confirm", s),
    phoneConfirm: boolField(body, "phone_confirm", s),
    userMetadata: mapField(body, "user_metadata", s),
    appMetadata: mapField(body, "app_metadata", s),
    banDuration: stringField(body, "ban_duration", s),
  };
}

// ban_duration: "" leaves the ban alone, "none" (or 0) lifts it.
function _banDuration(text: string): number | null {
  if (text === "") return null;
  if (text === "none") return 0;
  try {
    return parseGoDuration(text);
  } catch (err) {
    throw badRequest(
      "validation_failed",
      `invalid format for ban duration: ${(err as Error).message}`,
    );
  }
}

function _bannedUntil(duration: number, now: number): string | null {
  return duration === 0 ? null : iso(now + duration);
}

async function _create(
  ctx: AuthContext,
  req: Request,
  claims: AccessTokenClaims,
): Promise<Response> {
  const p = _params(await readJson(req, _ADMIN_PARAMS));
  const aud = p.aud !== "" ? p.aud : requestAud(req, claims);
  if (p.email === "" && p.phone === "") {
    throw badRequest(
      "validation_failed",
      "Cannot create a user without either an email or phone",
    );
  }
  const providers: string[] = [];
  let email: string | null = null;
  let phone: string | null = null;
  if (p.email !== "") {
    email = validateEmail(p.email);
    if (await findDuplicateEmailUser(ctx.sql, email, aud)) {
      throw emailExists();
    }
    providers.push("email");
  }
  if (p.phone !== "") {
    phone = validatePhone(p.phone);
    if (await phoneTaken(ctx.sql, phone, aud)) {
      throw unprocessable(
        "phone_exists",
        "Phone number already registered by another user",
      );
    }
    providers.push("phone");
  }
  if (p.password !== null && p.passwordHash !== "") {
    throw badRequest(
      "validation_failed",
      "Only a password or a password hash should be provided",
    );
  }
  let hash: string;
  if (p.passwordHash !== "") {
    if (!/^\$2[aby]?\$\d\d\$[./A-Za-z0-9]{53}$/.test(p.passwordHash)) {
      throw internal("Error creating user");
    }
    hash = p.passwordHash;
  } else {
    // Without a password Supabase Auth sets a random one nobody knows.
    const password = p.password || randomPassword();
    if (new TextEncoder().encode(password).length > MAX_PASSWORD_BYTES) {
      throw badRequest(
        "validation_failed",
        "bcrypt: password length exceeds 72 bytes",
      );
    }
    hash = await hashPassword(password);
  }
  let id: string = crypto.randomUUID();
  if (p.id !== "") {
    if (!isUuid(p.id)) {
      throw badRequest(
        "validation_failed",
        "ID must conform to the uuid v4 format",
      );
    }
    id = canonicalUuid(p.id);
    if (id === NIL_UUID) {
      throw badRequest("validation_failed", "ID cannot be a nil uuid");
    }
  }
  const ban = _banDuration(p.banDuration);

  try {
    await ctx.sql.begin(async (tx) => {
      const now = ctx.now();
      await insertUser(tx, {
        id,
        aud,
        role: p.role !== "" ? p.role.trim() : DEFAULT_ROLE,
        email,
        phone,
        encryptedPassword: hash,
        appMetadata: mergeMetadata(
          { provider: providers[0], providers },
          p.appMetadata ?? {},
        ),
        userMetadata: p.userMetadata ?? {},
        now,
      });
      if (email !== null) {
        await insertIdentity(tx, {
          userId: id,
          provider: "email",
          providerId: id,
          data: {
            email,
            email_verified: false,
            phone_verified: false,
            sub: id,
          },
          now,
        });
      }
      if (phone !== null) {
        await insertIdentity(tx, {
          userId: id,
          provider: "phone",
          providerId: id,
          data: {
            email_verified: false,
            phone,
            phone_verified: false,
            sub: id,
          },
          now,
        });
      }
      if (p.emailConfirm) await _confirmEmail(tx, id, now);
      if (p.phoneConfirm) {
        await updateUser(tx, id, {
          confirmation_token: "",
          phone_confirmed_at: iso(now),
        }, now);
      }
      if (ban !== null) {
        await updateUser(tx, id, { banned_until: _bannedUntil(ban, now) }, now);
      }
    });
  } catch (err) {
    if (err instanceof ApiError) throw err;
    throw internal("Database error creating new user");
  }
  return jsonResponse(200, userJson((await findUserById(ctx.sql, id))!));
}

async function _confirmEmail(tx: Db, id: string, now: number): Promise<void> {
  const user = (await findUserById(tx, id))!;
  await updateUser(tx, id, {
    confirmation_token: "",
    email_confirmed_at: iso(now),
    raw_user_meta_data: mergeMetadata(user.raw_user_meta_data, {
      email_verified: true,
    }),
  }, now);
}

async function _update(
  ctx: AuthContext,
  req: Request,
  user: UserRow,
): Promise<Response> {
  const p = _params(await readJson(req, _ADMIN_PARAMS));
  const email = p.email !== "" ? validateEmail(p.email) : null;
  const phone = p.phone !== "" ? validatePhone(p.phone) : null;
  const ban = _banDuration(p.banDuration);
  let hash: string | null | undefined;
  if (p.password !== null) {
    checkPasswordStrength(p.password, ctx.minPasswordLength);
    hash = await hashPassword(p.password);
  }

  try {
    await ctx.sql.begin(async (tx) => {
      const now = ctx.now();
      if (p.role !== "") {
        await updateUser(tx, user.id, { role: p.role.trim() }, now);
      }
      if (p.emailConfirm) await _confirmEmail(tx, user.id, now);
      if (p.phoneConfirm) {
        await updateUser(tx, user.id, {
          confirmation_token: "",
          phone_confirmed_at: iso(now),
        }, now);
      }
      if (hash !== undefined) {
        await setPassword(tx, user.id, hash, now);
        // An admin password change signs the user out everywhere.
        await deleteUserSessions(tx, user.id);
      }
      if (email !== null) {
        await setEmailIdentity(tx, user, email, p.emailConfirm, now);
        // No duplicate check here in Supabase Auth: a taken address trips
        // the unique index and the update fails with a 500.
        await updateUser(tx, user.id, { email }, now);
      }
      if (phone !== null) {
        const identity = (user.identities ?? []).find((i) =>
          i.provider === "phone"
        );
        if (identity) {
          await updateIdentityData(tx, identity.id, {
            phone,
            phone_verified: p.phoneConfirm,
          }, now);
        } else {
          await insertIdentity(tx, {
            userId: user.id,
            provider: "phone",
            providerId: user.id,
            data: {
              email_verified: false,
              phone,
              phone_verified: p.phoneConfirm,
              sub: user.id,
            },
            now,
          });
        }
        await updateUser(tx, user.id, { phone }, now);
      }
      if (p.appMetadata !== null || p.userMetadata !== null) {
        const fresh = (await findUserById(tx, user.id))!;
        await updateUser(tx, user.id, {
          ...(p.appMetadata !== null
            ? {
              raw_app_meta_data: mergeMetadata(
                fresh.raw_app_meta_data,
                p.appMetadata,
              ),
            }
            : {}),
          ...(p.userMetadata !== null
            ? {
              raw_user_meta_data: mergeMetadata(
                fresh.raw_user_meta_data,
                p.userMetadata,
              ),
            }
            : {}),
        }, now);
      }
      if (ban !== null) {
        // Banning only sets banned_until; sessions stay, and the middleware
        // refuses the banned user's tokens until the ban ends.
        await updateUser(tx, user.id, {
          banned_until: _bannedUntil(ban, now),
        }, now);
      }
    });
  } catch (err) {
    if (err instanceof ApiError) throw err;
    throw _updateFailure(err);
  }
  return jsonResponse(200, userJson((await findUserById(ctx.sql, user.id))!));
}

// What Supabase Auth answers when the update transaction fails: its legacy
// error shape surfaces "user-triggered" Postgres errors (constraint
// violations) as `{code, message, detail}` with 500; the 2024-01-01 shape is
// the generic `unexpected_failure` "Error updating user".
function _updateFailure(err: unknown): ApiError {
  const e = err as { code?: unknown; message?: unknown; detail?: unknown };
  if (typeof e?.code === "string" && /^23\d{3}$/.test(e.code)) {
    const body: Record<string, unknown> = {
      code: e.code,
      message: String(e.message ?? ""),
    };
    if (typeof e.detail === "string" && e.detail) body.detail = e.detail;
    return new ApiError(500, "unexpected_failure", "Error updating user", body);
  }
  return internal("Error updating user");
}

async function _delete(
  ctx: AuthContext,
  req: Request,
  user: UserRow,
): Promise<Response> {
  const text = await req.text();
  let soft = false;
  if (text.length > 0) {
    const body = await readJson(
      new Request("http://body", { method: "POST", body: text }),
      "adminUserDeleteParams",
    );
    soft = boolField(body, "should_soft_delete", "adminUserDeleteParams");
  }
  await ctx.sql.begin(async (tx) => {
    if (!soft) {
      await deleteUser(tx, user.id);
      return;
    }
    if (user.deleted_at) return;
    const now = ctx.now();
    // Soft deletion keeps the row but makes email, phone and identities
    // unusable and unrecognizable, and ends every session.
    await updateUser(tx, user.id, {
      email: await _obfuscate(user.id, user.email ?? ""),
      phone: (await _obfuscate(user.id, user.phone ?? "")).slice(0, 15),
      encrypted_password: null,
      email_change: await _obfuscate(user.id, user.email_change ?? ""),
      phone_change: (await _obfuscate(user.id, user.phone_change ?? ""))
        .slice(0, 15),
      confirmation_token: "",
      recovery_token: "",
      email_change_token_current: "",
      email_change_token_new: "",
      phone_change_token: "",
      deleted_at: iso(now),
      raw_user_meta_data: {},
      raw_app_meta_data: {},
    }, now);
    for (const identity of user.identities ?? []) {
      const cleared: Record<string, unknown> = {};
      for (const key of Object.keys(identity.identity_data ?? {})) {
        cleared[key] = null;
      }
      await updateIdentityData(tx, identity.id, cleared, now);
      await setIdentityProviderId(
        tx,
        identity.id,
        await _obfuscate(
          user.id,
          `${identity.provider}:${identity.provider_id}`,
        ),
      );
    }
    await deleteUserSessions(tx, user.id);
  });
  return jsonResponse(200, {});
}

async function _obfuscate(id: string, value: string): Promise<string> {
  const digest = await crypto.subtle.digest(
    "SHA-256",
    new TextEncoder().encode(id + value),
  );
  let binary = "";
  for (const b of new Uint8Array(digest)) binary += String.fromCharCode(b);
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(
    /=+$/,
    "",
  );
}
