/**
 * Administrator rights (docs/security.md "Administrator rights").
 *
 * @module
 */
import type { Identity } from "./auth.ts";
import { callingDbFunction } from "./db_function.ts";
import { abandoned, DB_RETRY_AFTER_S, remember, type Sql } from "./db.ts";
import { ownsAddress } from "./email_proof.ts";
import type { FunctionEnv } from "./env.ts";
import { HttpError } from "./errors.ts";
import { Kept } from "./kept.ts";
import { logEvent, noteOnRequest } from "./log.ts";
import type { MatchedRow } from "./match_user.ts";

/** `rol` values that grant administrator rights (compared trimmed, lower-cased). */
export const ADMIN_ROLES: ReadonlySet<string> = new Set([
  "administrador",
  "admin",
  "superadmin",
  "super-admin",
]);

/**
 * Whether a `rol` value grants administrator rights.
 *
 * @example
 * ```ts
 * isAdminRole(" Super-Admin "); // true
 * ```
 */
export function isAdminRole(rol: string | null | undefined): boolean {
  return ADMIN_ROLES.has((rol ?? "").trim().toLowerCase());
}

/** What {@linkcode isAdmin} needs besides the caller and its row. */
export interface AdminPolicy {
  /** `ADMIN_EMAILS`, lower-cased. */
  readonly adminEmails: ReadonlySet<string>;
  /**
   * Whether Auth confirms sign-ups at once (`mailer_autoconfirm`); asked
   * only for a confirmed, listed address that no operator stamped.
   */
  readonly autoconfirm: () => Promise<boolean>;
  /**
   * The Data API roles that could write `usuarios.rol`, `auth_user_id` or
   * `correo` ({@linkcode rightsWritableBy}); asked only for a linked row
   * whose `rol` would grant rights. While it names one, `rol` grants none.
   */
  readonly rolWritableBy: () => Promise<readonly string[]>;
}

/**
 * The policy of a function's environment: its `ADMIN_EMAILS`, Auth's own
 * `GET /auth/v1/settings` for `mailer_autoconfirm`, asked through the
 * handler's `deps.autoconfirms`, and who may write the rights columns,
 * asked of the database `sql` at most once a minute ({@linkcode rightsWritableBy}).
 *
 * @example
 * ```ts
 * const policy = adminPolicy(ctx.env, deps, sql);
 * ```
 */
export function adminPolicy(
  env: FunctionEnv,
  deps: {
    autoconfirms: (env: FunctionEnv) => Promise<boolean>;
    now: () => number;
  },
  sql: Sql,
): AdminPolicy {
  return {
    adminEmails: env.adminEmails,
    autoconfirm: () => deps.autoconfirms(env),
    rolWritableBy: () => rightsWritableBy(sql, deps.now),
  };
}

/** How long an answer of {@linkcode rightsWritableBy} is kept, ms. */
export const RIGHTS_CHECK_TTL_MS = 60_000;

/**
 * How long a failed {@linkcode rightsWritableBy} (a statement timeout on a
 * large catalog, a database that is down) is its answer, ms: the
 * `Retry-After` of a 503 `db_timeout`. The administrators' requests of
 * that second answer with the same error at once instead of each running
 * the check again.
 */
export const RIGHTS_CHECK_FAILURE_MS = DB_RETRY_AFTER_S * 1000;

const _WRITABLE = Symbol("rights writable by");

/**
 * The Data API roles (`anon`, `authenticated`) that could write the columns
 * rights and links are read from (`usuarios.rol`, `auth_user_id`, `correo`),
 * by the grants and row level security of the table (and of its
 * inheritance children and parents), owner-rights views over it at any
 * depth, and rules: the database function
 * `presence.rights_writable_by()` (migration
 * `20261125060000_rights_writable_by_follows_views_rules_and_inheritance.sql`;
 * `presence.rights_write_paths()` says where), kept per pool
 * for {@linkcode RIGHTS_CHECK_TTL_MS} (a failure for
 * {@linkcode RIGHTS_CHECK_FAILURE_MS}), and asked once at a time: the
 * requests that need it meanwhile wait for that one check (`kept.ts`).
 * While it names a role, logged at each look-up as an error with the
 * statements that take the write away.
 *
 * @example
 * ```ts
 * await rightsWritableBy(sql, Date.now); // [] on a table users cannot write
 * ```
 */
export async function rightsWritableBy(
  sql: Sql,
  now: () => number,
): Promise<readonly string[]> {
  const kept = remember(
    sql,
    _WRITABLE,
    () =>
      new Kept<readonly string[]>({
        now,
        ttlMs: RIGHTS_CHECK_TTL_MS,
        failureMs: RIGHTS_CHECK_FAILURE_MS,
      }),
  );
  return await kept.get(
    "",
    () => _askRightsWritableBy(sql),
    () => abandoned(sql),
  );
}

async function _askRightsWritableBy(sql: Sql): Promise<readonly string[]> {
  const [{ roles }] = await callingDbFunction(
    "presence.rights_writable_by",
    () =>
      sql<{ roles: string[] }[]>`
        select to_json(presence.rights_writable_by()) as roles`,
  );
  if (roles.length) {
    logEvent("error", "rol grants no administrator rights", {
      code: "rights_writable",
      roles,
      hint:
        "these roles can write usuarios.rol, auth_user_id or correo through the Data API; select * from presence.rights_write_paths() says where, and docs/security.md, Administrator rights, has the statements that take the write away",
    });
  }
  return roles;
}

/**
 * Where an administrator's rights come from: `listed`, the operator's own
 * list (`ADMIN_EMAILS`, with the address proven), or `rol`, a row that
 * other administrators can write. Only a `listed` administrator (or the
 * project's secret key) speaks for the operator: auth-sync lets no `rol`
 * administrator set a listed address on an account or change a listed
 * account's email or password, which would hand it rights that outlive its
 * `rol` (docs/security.md "Administrator rights").
 */
export type AdminGround = "listed" | "rol";

/**
 * Whether the identity is an administrator, and by which right
 * ({@linkcode AdminGround}; `null`: none), proven one of two ways:
 *
 * - its row is linked to it by `auth_user_id` and has an administrator
 *   `rol`, on a table whose `rol`, `auth_user_id` and `correo` no Data API
 *   role can write (`policy.rolWritableBy`: else any user could give
 *   themselves the role, or the link to a row that has it). A row matched
 *   by `correo` or `nombre_usuario` never grants rights: with confirmations
 *   off (`supabase start`'s default) anyone can sign up with an address
 *   that is on a row, and on a table without `auth_user_id` there is no
 *   link to prove ownership at all, so there only `ADMIN_EMAILS` makes
 *   administrators;
 * - its email is listed in `ADMIN_EMAILS` (with or without a row) and it
 *   has proven it owns that mailbox (`email_proof.ts`
 *   {@linkcode ownsAddress}): an operator stamped the address in the
 *   account's `app_metadata`, or Auth confirmed it after mailing it a
 *   confirmation, on a project that confirms by mail. A confirmation alone
 *   is no proof: a stranger's first sign-up with a listed address while
 *   confirmations are off is confirmed at once, and stays so after.
 *
 * An identity both prove is `listed`. When one proof cannot be checked (the
 * database or Auth's settings did not answer), the other still counts: a
 * `rol` administrator is then `rol`; when the one that could not be
 * checked was the only one left, the failure is thrown, to be answered as
 * one, never as a 403.
 *
 * @example
 * ```ts
 * await adminGround(identity, { id: 1, rol: "admin", level: "auth_user_id" }, policy); // "rol"
 * ```
 */
export async function adminGround(
  identity: Identity,
  row: MatchedRow | null,
  policy: AdminPolicy,
): Promise<AdminGround | null> {
  let byRol = false;
  let unknown: { error: unknown } | null = null;
  if (row !== null && row.level === "auth_user_id" && isAdminRole(row.rol)) {
    try {
      byRol = (await policy.rolWritableBy()).length === 0;
      // On the request's line: why an administrator's rol counted for
      // nothing (the rights check's own line comes once a minute).
      if (!byRol) noteOnRequest({ rol_ignored: "rights_writable" });
    } catch (error) {
      unknown = { error };
    }
  }
  if (isListedAdminEmail(identity.email, policy.adminEmails)) {
    try {
      if (await ownsAddress(identity, policy.autoconfirm)) return "listed";
    } catch (error) {
      if (!byRol) throw error;
    }
  }
  if (byRol) return "rol";
  if (unknown) throw unknown.error;
  return null;
}

/**
 * Whether the identity is an administrator ({@linkcode adminGround}).
 *
 * @example
 * ```ts
 * await isAdmin(identity, { id: 1, rol: "admin", level: "auth_user_id" }, policy); // true
 * ```
 */
export async function isAdmin(
  identity: Identity,
  row: MatchedRow | null,
  policy: AdminPolicy,
): Promise<boolean> {
  return (await adminGround(identity, row, policy)) !== null;
}

/**
 * Whether an email is listed in `ADMIN_EMAILS`: such an identity's rights
 * depend on its proof of ownership, which only Auth's own answer carries
 * (a reader verified locally is sent to Auth for it).
 *
 * @example
 * ```ts
 * isListedAdminEmail("jefa@example.com", new Set(["jefa@example.com"])); // true
 * ```
 */
export function isListedAdminEmail(
  email: string | null,
  adminEmails: ReadonlySet<string>,
): boolean {
  return email !== null && adminEmails.has(email);
}

/**
 * The identity's {@linkcode AdminGround}; throws unless it is an
 * administrator: no row gives 404 `user_not_found`, a row without rights
 * 403 `admin_required`.
 */
export async function requireAdmin(
  identity: Identity,
  row: MatchedRow | null,
  policy: AdminPolicy,
): Promise<AdminGround> {
  const ground = await adminGround(identity, row, policy);
  if (ground) return ground;
  if (!row) throw new HttpError("user_not_found");
  throw new HttpError("admin_required");
}
