/**
 * The stand-in's storage: `auth.users`, `auth.identities`, `auth.sessions`
 * and `auth.refresh_tokens`, read and written with the same semantics as
 * Supabase Auth's models (internal/models). Every function takes the client
 * to use, so that callers can run several of them in one transaction.
 *
 * Rows are read with `to_jsonb(...)` so that timestamps keep their
 * microseconds and reach the wire formatted like Go's `time.Time`.
 *
 * @module
 */
import type postgres from "postgres";
import { generateRefreshToken } from "./passwords.ts";

/** A client or a transaction of postgres.js. */
export type Db = postgres.ISql;

/** Supabase Auth writes every row with the zero instance id. */
export const NIL_UUID = "00000000-0000-0000-0000-000000000000";

/** A row of `auth.identities` (timestamps as Postgres renders them in JSON). */
export interface IdentityRow {
  id: string;
  provider_id: string;
  user_id: string;
  identity_data: Record<string, unknown> | null;
  provider: string;
  last_sign_in_at: string | null;
  created_at: string | null;
  updated_at: string | null;
  email: string | null;
}

/** A row of `auth.users` with its identities (`null` when not loaded). */
export interface UserRow {
  id: string;
  aud: string | null;
  role: string | null;
  email: string | null;
  encrypted_password: string | null;
  email_confirmed_at: string | null;
  invited_at: string | null;
  phone: string | null;
  phone_confirmed_at: string | null;
  confirmation_sent_at: string | null;
  confirmed_at: string | null;
  /** Hash of the emailed sign-up code (`""` once used). */
  confirmation_token?: string | null;
  /** Hash of the emailed recovery or magic-link code (`""` once used). */
  recovery_token?: string | null;
  email_change_token_new?: string | null;
  email_change_token_current?: string | null;
  /** 1 once one of the two email-change links was followed. */
  email_change_confirm_status?: number | null;
  recovery_sent_at: string | null;
  email_change: string | null;
  email_change_sent_at: string | null;
  phone_change: string | null;
  phone_change_sent_at: string | null;
  reauthentication_sent_at: string | null;
  last_sign_in_at: string | null;
  raw_app_meta_data: Record<string, unknown> | null;
  raw_user_meta_data: Record<string, unknown> | null;
  created_at: string | null;
  updated_at: string | null;
  banned_until: string | null;
  deleted_at: string | null;
  is_anonymous: boolean;
  is_sso_user: boolean;
  identities: IdentityRow[] | null;
}

/** A row of `auth.sessions`. */
export interface SessionRow {
  id: string;
  user_id: string;
  created_at: string | null;
  updated_at: string | null;
  aal: string | null;
  not_after: string | null;
  refreshed_at: string | null;
}

/** A row of `auth.refresh_tokens`. */
export interface RefreshTokenRow {
  id: number;
  token: string;
  user_id: string;
  revoked: boolean;
  parent: string | null;
  session_id: string | null;
  created_at: string | null;
  updated_at: string | null;
}

/** Columns of `auth.users` that {@linkcode updateUser} may set. */
export type UserUpdate = Partial<{
  role: string;
  email: string | null;
  encrypted_password: string | null;
  email_confirmed_at: string | null;
  phone: string | null;
  phone_confirmed_at: string | null;
  confirmation_token: string;
  confirmation_sent_at: string | null;
  invited_at: string | null;
  recovery_token: string;
  recovery_sent_at: string | null;
  email_change: string;
  email_change_token_new: string;
  email_change_token_current: string;
  email_change_sent_at: string | null;
  email_change_confirm_status: number;
  phone_change: string;
  phone_change_token: string;
  phone_change_sent_at: string | null;
  reauthentication_token: string;
  reauthentication_sent_at: string | null;
  last_sign_in_at: string | null;
  raw_app_meta_data: Record<string, unknown> | null;
  raw_user_meta_data: Record<string, unknown> | null;
  banned_until: string | null;
  deleted_at: string | null;
  is_anonymous: boolean;
}>;

// Column -> SQL type for the explicit casts every parameter gets (postgres.js
// sends untyped text when statements are not prepared).
const _USER_COLUMN_TYPES: Record<keyof UserUpdate, string> = {
  role: "varchar",
  email: "varchar",
  encrypted_password: "varchar",
  email_confirmed_at: "timestamptz",
  phone: "text",
  phone_confirmed_at: "timestamptz",
  confirmation_token: "varchar",
  confirmation_sent_at: "timestamptz",
  invited_at: "timestamptz",
  recovery_token: "varchar",
  recovery_sent_at: "timestamptz",
  email_change: "varchar",
  email_change_token_new: "varchar",
  email_change_token_current: "varchar",
  email_change_sent_at: "timestamptz",
  email_change_confirm_status: "smallint",
  phone_change: "text",
  phone_change_token: "varchar",
  phone_change_sent_at: "timestamptz",
  reauthentication_token: "varchar",
  reauthentication_sent_at: "timestamptz",
  last_sign_in_at: "timestamptz",
  raw_app_meta_data: "jsonb",
  raw_user_meta_data: "jsonb",
  banned_until: "timestamptz",
  deleted_at: "timestamptz",
  is_anonymous: "boolean",
};

/** ISO text of a ms timestamp, the form every timestamp is written in. */
export function iso(ms: number): string {
  return new Date(ms).toISOString();
}

/** Milliseconds of a timestamp read back from Postgres JSON. */
export function msOf(timestamp: string): number {
  // `timestamp without time zone` comes back without an offset; Supabase
  // Auth stores UTC in those columns.
  const withZone = /(?:Z|[+-]\d{2}(?::?\d{2})?)$/.test(timestamp)
    ? timestamp
    : `${timestamp}Z`;
  return Date.parse(withZone);
}

/**
 * Finds a user by id, with identities (Supabase Auth loads users eagerly
 * except when listing them).
 */
export async function findUserById(
  db: Db,
  id: string,
): Promise<UserRow | null> {
  const rows = await db`
    select to_jsonb(u) as j from auth.users u where u.id = ${id}::uuid`;
  return rows.length ? await _withIdentities(db, rows[0].j) : null;
}

/**
 * Finds the non-SSO user with this email (any case) in `aud`, as
 * `FindUserByEmailAndAudience` does.
 */
export async function findUserByEmail(
  db: Db,
  email: string,
  aud: string,
): Promise<UserRow | null> {
  const rows = await db`
    select to_jsonb(u) as j from auth.users u
    where u.instance_id = ${NIL_UUID}::uuid
      and lower(u.email) = ${email.toLowerCase()}::text
      and u.aud = ${aud}::text and u.is_sso_user = false
    limit 1`;
  return rows.length ? await _withIdentities(db, rows[0].j) : null;
}

/**
 * The user, other than `exceptUserId`, that already owns `email` in `aud`
 * through an identity or the users table (`IsDuplicatedEmail`).
 */
export async function findDuplicateEmailUser(
  db: Db,
  email: string,
  aud: string,
  exceptUserId?: string,
): Promise<UserRow | null> {
  const lower = email.toLowerCase();
  const rows = await db`
    select distinct i.user_id::text as id from auth.identities i
    join auth.users u on u.id = i.user_id
    where i.email = ${lower}::text and u.aud = ${aud}::text
      and i.provider not like 'sso:%'`;
  for (const row of rows) {
    if (row.id !== exceptUserId) return await findUserById(db, row.id);
  }
  const user = await findUserByEmail(db, email, aud);
  return user && user.id !== exceptUserId ? user : null;
}

/** The users columns that hold an emailed one-time token's hash. */
export type TokenColumn =
  | "confirmation_token"
  | "recovery_token"
  | "email_change_token_new"
  | "email_change_token_current";

/**
 * Finds the user holding a one-time token hash in any of `columns`, as
 * `FindUserByConfirmationToken` and its siblings do. An empty hash never
 * matches (empty is how a used token is cleared).
 */
export async function findUserByTokenHash(
  db: Db,
  hash: string,
  columns: readonly TokenColumn[],
): Promise<UserRow | null> {
  if (hash === "") return null;
  for (const column of columns) {
    const rows = await db.unsafe(
      `select to_jsonb(u) as j from auth.users u
       where u.${column} = $1::varchar and u.is_sso_user = false limit 1`,
      [hash],
    );
    if (rows.length) return await _withIdentities(db, rows[0].j);
  }
  return null;
}

/** Whether another user in `aud` has `phone` (`IsDuplicatedPhone`). */
export async function phoneTaken(
  db: Db,
  phone: string,
  aud: string,
): Promise<boolean> {
  const rows = await db`
    select 1 from auth.users
    where instance_id = ${NIL_UUID}::uuid and phone = ${phone}::text
      and aud = ${aud}::text and is_sso_user = false
    limit 1`;
  return rows.length > 0;
}

/** Fields of a new user row. */
export interface NewUser {
  id: string;
  aud: string;
  role: string;
  email: string | null;
  phone: string | null;
  encryptedPassword: string;
  appMetadata: Record<string, unknown>;
  userMetadata: Record<string, unknown>;
  now: number;
}

/** Inserts a user (`tx.Create(user)`). */
export async function insertUser(db: Db, user: NewUser): Promise<void> {
  const now = iso(user.now);
  await db`
    insert into auth.users (
      instance_id, id, aud, role, email, phone, encrypted_password,
      raw_app_meta_data, raw_user_meta_data, created_at, updated_at,
      confirmation_token, recovery_token, email_change_token_new,
      email_change, is_sso_user, is_anonymous
    ) values (
      ${NIL_UUID}::uuid, ${user.id}::uuid, ${user.aud}::varchar,
      ${user.role}::varchar, ${user.email}::varchar, ${user.phone}::text,
      ${user.encryptedPassword}::varchar,
      ${_json(db, user.appMetadata)}::jsonb,
      ${_json(db, user.userMetadata)}::jsonb,
      ${now}::timestamptz, ${now}::timestamptz, '', '', '', '', false, false
    )`;
}

/**
 * Sets some columns of a user and bumps `updated_at`, as every pop
 * `UpdateOnly` in Supabase Auth does.
 */
export async function updateUser(
  db: Db,
  id: string,
  set: UserUpdate,
  now: number,
): Promise<void> {
  const assignments: string[] = [];
  const params: postgres.ParameterOrJSON<never>[] = [];
  for (const [column, value] of Object.entries(set)) {
    const type = _USER_COLUMN_TYPES[column as keyof UserUpdate];
    if (!type) throw new Error(`not an updatable users column: ${column}`);
    params.push(
      type === "jsonb" && value !== null
        ? _json(db, value)
        : value as string | number | boolean | null,
    );
    assignments.push(`${column} = $${params.length}::${type}`);
  }
  params.push(iso(now));
  assignments.push(`updated_at = $${params.length}::timestamptz`);
  params.push(id);
  await db.unsafe(
    `update auth.users set ${
      assignments.join(", ")
    } where id = $${params.length}::uuid`,
    params,
  );
}

/**
 * Sets a new password hash and, as Supabase Auth's `UpdatePassword` does,
 * voids every pending one-time token of the user.
 */
export async function setPassword(
  db: Db,
  id: string,
  hash: string | null,
  now: number,
): Promise<void> {
  await updateUser(db, id, {
    encrypted_password: hash,
    confirmation_token: "",
    confirmation_sent_at: null,
    recovery_token: "",
    recovery_sent_at: null,
    email_change_token_current: "",
    email_change_token_new: "",
    email_change_sent_at: null,
    phone_change_token: "",
    phone_change_sent_at: null,
    reauthentication_token: "",
    reauthentication_sent_at: null,
  }, now);
}

/** Deletes a user; identities, sessions and refresh tokens cascade. */
export async function deleteUser(db: Db, id: string): Promise<void> {
  await db`delete from auth.users where id = ${id}::uuid`;
}

/** One page of the users in `aud`, newest first, and the total count. */
export async function listUsers(
  db: Db,
  opts: {
    aud: string;
    page: number;
    perPage: number;
    filter: string;
    ascending: boolean;
  },
): Promise<{ users: UserRow[]; total: number }> {
  const like = `%${opts.filter}%`;
  const where = opts.filter
    ? db`and (u.email like ${like}::text
          or u.raw_user_meta_data ->> 'full_name' ilike ${like}::text)`
    : db``;
  const counted = await db`
    select count(*)::int as n from auth.users u
    where u.instance_id = ${NIL_UUID}::uuid and u.aud = ${opts.aud}::text ${where}`;
  const order = opts.ascending ? db`u.created_at asc` : db`u.created_at desc`;
  const rows = await db`
    select to_jsonb(u) as j from auth.users u
    where u.instance_id = ${NIL_UUID}::uuid and u.aud = ${opts.aud}::text ${where}
    order by ${order}
    limit ${opts.perPage}::int offset ${(opts.page - 1) * opts.perPage}::int`;
  return {
    users: rows.map((r) => ({ ...r.j, identities: null }) as UserRow),
    total: counted[0].n,
  };
}

/** Inserts an identity and returns it. */
export async function insertIdentity(
  db: Db,
  identity: {
    userId: string;
    provider: string;
    providerId: string;
    data: Record<string, unknown>;
    now: number;
  },
): Promise<IdentityRow> {
  const now = iso(identity.now);
  const rows = await db`
    insert into auth.identities (
      provider_id, user_id, identity_data, provider, last_sign_in_at,
      created_at, updated_at
    ) values (
      ${identity.providerId}::text, ${identity.userId}::uuid,
      ${_json(db, identity.data)}::jsonb, ${identity.provider}::text,
      ${now}::timestamptz, ${now}::timestamptz, ${now}::timestamptz
    ) returning to_jsonb(identities) as j`;
  return rows[0].j as IdentityRow;
}

/**
 * Merges `updates` into an identity's data (a `null` value removes the key),
 * as `Identity.UpdateIdentityData` does.
 */
export async function updateIdentityData(
  db: Db,
  id: string,
  updates: Record<string, unknown>,
  now: number,
): Promise<void> {
  const rows = await db`
    select identity_data from auth.identities where id = ${id}::uuid`;
  if (!rows.length) return;
  const data = mergeMetadata(rows[0].identity_data, updates);
  await db`
    update auth.identities
    set identity_data = ${_json(db, data)}::jsonb,
        updated_at = ${iso(now)}::timestamptz
    where id = ${id}::uuid`;
}

/**
 * Gives `user`'s `email` identity the address `email` (with
 * `email_verified`), or makes one for it when the account has none (a
 * phone or OAuth account): what Supabase Auth's adminUserUpdate and
 * emailChangeVerify both do with a new address.
 */
export async function setEmailIdentity(
  db: Db,
  user: Pick<UserRow, "id" | "identities">,
  email: string,
  verified: boolean,
  now: number,
): Promise<void> {
  const identity = (user.identities ?? []).find((i) => i.provider === "email");
  if (identity) {
    await updateIdentityData(db, identity.id, {
      email,
      email_verified: verified,
    }, now);
    return;
  }
  await insertIdentity(db, {
    userId: user.id,
    provider: "email",
    providerId: user.id,
    data: {
      email,
      email_verified: verified,
      phone_verified: false,
      sub: user.id,
    },
    now,
  });
}

/** Sets an identity's provider id (used to obfuscate on soft delete). */
export async function setIdentityProviderId(
  db: Db,
  id: string,
  providerId: string,
): Promise<void> {
  await db`
    update auth.identities set provider_id = ${providerId}::text
    where id = ${id}::uuid`;
}

/** Deletes one identity. */
export async function deleteIdentity(db: Db, id: string): Promise<void> {
  await db`delete from auth.identities where id = ${id}::uuid`;
}

/**
 * Supabase Auth's metadata merge (`UpdateUserMetaData`): keys are set, a
 * `null` value deletes the key.
 */
export function mergeMetadata(
  current: Record<string, unknown> | null | undefined,
  updates: Record<string, unknown>,
): Record<string, unknown> {
  const out: Record<string, unknown> = { ...(current ?? {}) };
  for (const [key, value] of Object.entries(updates)) {
    if (value === null) delete out[key];
    else out[key] = value;
  }
  return out;
}

/** Creates an aal1 session for a user and returns its id. */
export async function insertSession(
  db: Db,
  s: {
    userId: string;
    userAgent: string | null;
    ip: string | null;
    now: number;
  },
): Promise<string> {
  const id = crypto.randomUUID();
  const now = iso(s.now);
  await db`
    insert into auth.sessions (
      id, user_id, created_at, updated_at, aal, user_agent, ip
    ) values (
      ${id}::uuid, ${s.userId}::uuid, ${now}::timestamptz, ${now}::timestamptz,
      'aal1', ${s.userAgent}::text, ${s.ip}::inet
    )`;
  return id;
}

/** Finds a session by id, optionally locking it. */
export async function findSession(
  db: Db,
  id: string,
  forUpdate = false,
): Promise<SessionRow | null> {
  const rows = forUpdate
    ? await db`
      select to_jsonb(s) as j from auth.sessions s
      where s.id = ${id}::uuid for update`
    : await db`
      select to_jsonb(s) as j from auth.sessions s where s.id = ${id}::uuid`;
  return rows.length ? rows[0].j as SessionRow : null;
}

/** Records a refresh on the session (`UpdateOnlyRefreshInfo`). */
export async function touchSession(
  db: Db,
  id: string,
  s: { userAgent: string | null; ip: string | null; now: number },
): Promise<void> {
  // refreshed_at has no time zone in Supabase Auth's schema; it holds UTC.
  const utc = iso(s.now).replace("Z", "");
  await db`
    update auth.sessions
    set refreshed_at = ${utc}::timestamp, user_agent = ${s.userAgent}::text,
        ip = ${s.ip}::inet, updated_at = ${iso(s.now)}::timestamptz
    where id = ${id}::uuid`;
}

/** Deletes one session (`LogoutSession`). */
export async function deleteSession(db: Db, id: string): Promise<void> {
  await db`delete from auth.sessions where id = ${id}::uuid`;
}

/** Deletes all sessions of a user (`Logout`). */
export async function deleteUserSessions(
  db: Db,
  userId: string,
): Promise<void> {
  await db`delete from auth.sessions where user_id = ${userId}::uuid`;
}

/** Deletes all sessions of a user but one (`LogoutAllExceptMe`). */
export async function deleteOtherSessions(
  db: Db,
  userId: string,
  keepSessionId: string,
): Promise<void> {
  await db`
    delete from auth.sessions
    where id <> ${keepSessionId}::uuid and user_id = ${userId}::uuid`;
}

/** Issues a new refresh token in a session, child of `parent` if given. */
export async function insertRefreshToken(
  db: Db,
  t: { userId: string; sessionId: string; parent: string | null; now: number },
): Promise<RefreshTokenRow> {
  const now = iso(t.now);
  const rows = await db`
    insert into auth.refresh_tokens (
      instance_id, token, user_id, revoked, created_at, updated_at, parent,
      session_id
    ) values (
      ${NIL_UUID}::uuid, ${generateRefreshToken()}::varchar,
      ${t.userId}::varchar, false, ${now}::timestamptz, ${now}::timestamptz,
      ${t.parent}::varchar, ${t.sessionId}::uuid
    ) returning to_jsonb(refresh_tokens) as j`;
  return rows[0].j as RefreshTokenRow;
}

/**
 * Finds a refresh token by its value; `forUpdate` locks the row so that two
 * concurrent refreshes of one token are serialized.
 */
export async function findRefreshToken(
  db: Db,
  token: string,
  forUpdate = false,
): Promise<RefreshTokenRow | null> {
  const rows = forUpdate
    ? await db`
      select to_jsonb(r) as j from auth.refresh_tokens r
      where r.token = ${token}::varchar limit 1 for update`
    : await db`
      select to_jsonb(r) as j from auth.refresh_tokens r
      where r.token = ${token}::varchar limit 1`;
  return rows.length ? rows[0].j as RefreshTokenRow : null;
}

/** The session's newest unrevoked token (`FindCurrentlyActiveRefreshToken`). */
export async function findActiveRefreshToken(
  db: Db,
  sessionId: string,
): Promise<RefreshTokenRow | null> {
  const rows = await db`
    select to_jsonb(r) as j from auth.refresh_tokens r
    where r.session_id = ${sessionId}::uuid and r.revoked is false
    order by r.id desc limit 1`;
  return rows.length ? rows[0].j as RefreshTokenRow : null;
}

/** Marks one token revoked; its `updated_at` starts the reuse interval. */
export async function revokeRefreshToken(
  db: Db,
  id: number,
  now: number,
): Promise<void> {
  await db`
    update auth.refresh_tokens
    set revoked = true, updated_at = ${iso(now)}::timestamptz
    where id = ${id}::bigint`;
}

/** Revokes every live token of a session (`RevokeTokenFamily`). */
export async function revokeSessionRefreshTokens(
  db: Db,
  sessionId: string,
  now: number,
): Promise<void> {
  await db`
    update auth.refresh_tokens
    set revoked = true, updated_at = ${iso(now)}::timestamptz
    where session_id = ${sessionId}::uuid and revoked = false`;
}

// postgres.js learns the parameter types from the server and would encode a
// pre-serialized string as a JSON string, so jsonb values go in as objects.
function _json(db: Db, value: unknown): postgres.Parameter {
  return db.json(value as postgres.JSONValue);
}

async function _withIdentities(db: Db, user: UserRow): Promise<UserRow> {
  const rows = await db`
    select to_jsonb(i) as j from auth.identities i
    where i.user_id = ${user.id}::uuid
    order by i.created_at, i.id`;
  return { ...user, identities: rows.map((r) => r.j as IdentityRow) };
}
