/**
 * Administrator rights (docs/security.md "Administrator rights").
 *
 * @module
 */
import type { Identity } from "./auth.ts";
import { HttpError } from "./errors.ts";
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

/**
 * Whether the identity is an administrator, proven one of two ways:
 *
 * - its email is confirmed and listed in `ADMIN_EMAILS` (with or without a
 *   row). Residual risk: on a project that confirms sign-ups at once, a
 *   listed address that has no account yet can be claimed by whoever signs
 *   up with it first; list only addresses whose accounts exist;
 * - its row is linked to it by `auth_user_id` and has an administrator
 *   `rol`. A row matched by `correo` or `nombre_usuario` never grants
 *   rights: with confirmations off (`supabase start`'s default) anyone can
 *   sign up with an address that is on a row, and on a table without
 *   `auth_user_id` there is no link to prove ownership at all, so there only
 *   `ADMIN_EMAILS` makes administrators.
 *
 * @example
 * ```ts
 * isAdmin(identity, { id: 1, rol: "admin", level: "auth_user_id" }, new Set()); // true
 * ```
 */
export function isAdmin(
  identity: Identity,
  row: MatchedRow | null,
  adminEmails: ReadonlySet<string>,
): boolean {
  if (
    identity.emailConfirmed && identity.email !== null &&
    adminEmails.has(identity.email)
  ) return true;
  return row !== null && row.level === "auth_user_id" && isAdminRole(row.rol);
}

/**
 * Throws unless the identity is an administrator ({@linkcode isAdmin}): no
 * row gives 404 `user_not_found`, a row without rights 403
 * `admin_required`.
 */
export function requireAdmin(
  identity: Identity,
  row: MatchedRow | null,
  adminEmails: ReadonlySet<string>,
): void {
  if (isAdmin(identity, row, adminEmails)) return;
  if (!row) throw new HttpError("user_not_found");
  throw new HttpError("admin_required");
}
