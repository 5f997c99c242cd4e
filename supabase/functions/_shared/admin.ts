/**
 * Administrator rights (spec 5 "Roles", DECISIONS "Administrator rights").
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
 * Throws unless the identity is an administrator:
 *
 * - a confirmed email listed in `ADMIN_EMAILS` is enough, with or without a row;
 * - otherwise the row's `rol` counts only when the row was matched by
 *   `auth_user_id` or `correo`: a row reached through `nombre_usuario` never
 *   grants rights, so an outsider's `admin@elsewhere` cannot borrow the local
 *   user `admin`;
 * - no row gives 404 `user_not_found`, a row without rights 403.
 */
export function requireAdmin(
  identity: Identity,
  row: MatchedRow | null,
  adminEmails: ReadonlySet<string>,
): void {
  if (
    identity.emailConfirmed && identity.email !== null &&
    adminEmails.has(identity.email)
  ) return;
  if (!row) throw new HttpError("user_not_found");
  const strongMatch = row.level === "auth_user_id" || row.level === "correo";
  if (strongMatch && isAdminRole(row.rol)) return;
  throw new HttpError("admin_required");
}

/**
 * Whether the identity is an administrator, by exactly the rules of
 * {@linkcode requireAdmin} (which stays the one place they live): for
 * functions that serve everyone but show administrators more.
 *
 * @example
 * ```ts
 * const admin = isAdmin(identity, row, env.adminEmails);
 * ```
 */
export function isAdmin(
  identity: Identity,
  row: MatchedRow | null,
  adminEmails: ReadonlySet<string>,
): boolean {
  try {
    requireAdmin(identity, row, adminEmails);
    return true;
  } catch (error) {
    if (error instanceof HttpError) return false;
    throw error;
  }
}
