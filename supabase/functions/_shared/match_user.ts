/**
 * Which `usuarios` row belongs to an identity (docs/api.md
 * "presence-ping"): the first strategy that finds a row wins, in this order,
 * with the lowest `id` among several rows of one strategy:
 *
 * 1. `auth_user_id` = the identity's id (where the column exists);
 * 2. `correo` = the email;
 * 3. `nombre_usuario` = the full email;
 * 4. `nombre_usuario` = the part of the email before the last `@`, only for
 *    emails of the domains in `USERNAME_MATCH_DOMAINS` (off by default).
 *
 * Emails and usernames compare case-insensitively (`lower()`, the one
 * normalisation used everywhere). A row linked to another identity is never
 * matched by email or username.
 *
 * The fourth strategy proves nothing: anyone who can sign up as
 * `bruno@anywhere` would reach the row `bruno`. It is therefore limited to
 * the domains whose mailboxes the project trusts (its own company domain,
 * say), or `*` for a project whose sign-ups are closed.
 *
 * @module
 */
import type postgres from "postgres";
import type { Identity } from "./auth.ts";
import type { OptionalColumns } from "./columns.ts";
import type { Sql } from "./db.ts";
import type { FunctionEnv } from "./env.ts";

/** The settings that shape matching. */
export interface MatchRules {
  /**
   * Email domains (lower-cased) whose identities may be matched by the part
   * of the email before the `@`; `*` for every domain; empty: never.
   */
  readonly usernameDomains: ReadonlySet<string>;
}

/**
 * The matching rules of a function's environment.
 *
 * @example
 * ```ts
 * const rules = matchRules(ctx.env);
 * ```
 */
export function matchRules(
  env: Pick<FunctionEnv, "usernameMatchDomains">,
): MatchRules {
  return { usernameDomains: env.usernameMatchDomains };
}

/** A SQL fragment. */
export type Fragment = postgres.PendingQuery<postgres.Row[]>;

/**
 * The identity as SQL expressions: `id` (uuid) and `email` (lower-cased
 * text, may be null). Parameters for an identity Auth described, or
 * sub-selects when the statement reads them from `auth.users` itself.
 */
export interface MatchKeys {
  readonly id: Fragment;
  readonly email: Fragment;
}

/** How a row was matched, in precedence order. */
export type MatchLevel =
  | "auth_user_id"
  | "correo"
  | "nombre_usuario_email"
  | "nombre_usuario_local";

/** Levels by their rank in the candidates query. */
export const MATCH_LEVELS: readonly MatchLevel[] = [
  "auth_user_id",
  "correo",
  "nombre_usuario_email",
  "nombre_usuario_local",
];

/**
 * Keys for an identity as `auth.getUser` returned it.
 *
 * @example
 * ```ts
 * const keys = identityKeys(sql, { id, email: "ana@example.com", emailConfirmed: true });
 * ```
 */
export function identityKeys(sql: Sql, identity: Identity): MatchKeys {
  return {
    id: sql`${identity.id}::uuid`,
    email: sql`lower(${identity.email}::text)`,
  };
}

/**
 * A query selecting `(id, level)` of the one row matched, `level` being the
 * 1-based rank in {@linkcode MATCH_LEVELS}. Each branch is an index lookup
 * (`auth_user_id` unique, `lower(correo)`, `lower(nombre_usuario)`).
 */
export function matchCandidate(
  sql: Sql,
  keys: MatchKeys,
  columns: OptionalColumns,
  rules: MatchRules,
): Fragment {
  const unlinked = notLinkedElsewhere(sql, keys, columns);
  const byId = columns.authUserId
    ? sql`select u.id, 1 as level from public.usuarios u
          where u.auth_user_id = ${keys.id}
          union all`
    : sql``;
  return sql`
    select c.id, c.level from (
      ${byId}
      select u.id, 2 as level from public.usuarios u
        where lower(u.correo) = ${keys.email} ${unlinked}
      union all
      select u.id, 3 as level from public.usuarios u
        where lower(u.nombre_usuario) = ${keys.email} ${unlinked}
      ${_byLocalPart(sql, keys, rules, unlinked)}
    ) c
    order by c.level, c.id
    limit 1
  `;
}

// The fourth strategy, where the rules allow it for the identity's domain.
function _byLocalPart(
  sql: Sql,
  keys: MatchKeys,
  rules: MatchRules,
  unlinked: Fragment,
): Fragment {
  const domains = [...rules.usernameDomains];
  if (domains.length === 0) return sql``;
  const domainAllowed = rules.usernameDomains.has("*")
    ? sql``
    : sql`and substring(${keys.email} from '@([^@]*)$') = any(${domains}::text[])`;
  // The part before the last @; null when there is none or it is empty.
  const local = sql`substring(${keys.email} from '^(.+)@[^@]*$')`;
  return sql`
    union all
    select u.id, 4 as level from public.usuarios u
      where lower(u.nombre_usuario) = ${local} ${unlinked} ${domainAllowed}`;
}

/**
 * `and (u.auth_user_id is null or u.auth_user_id = <identity>)` where the
 * column exists: a row linked to another identity is never matched by email
 * or username. Applies to a table aliased `u`.
 */
export function notLinkedElsewhere(
  sql: Sql,
  keys: MatchKeys,
  columns: OptionalColumns,
): Fragment {
  return columns.authUserId
    ? sql`and (u.auth_user_id is null or u.auth_user_id = ${keys.id})`
    : sql``;
}

/** A matched row as the admin check needs it. */
export interface MatchedRow {
  readonly id: number;
  readonly rol: string | null;
  readonly level: MatchLevel;
}

/**
 * Finds the identity's row without changing it, or `null`.
 *
 * @example
 * ```ts
 * const row = await findUsuario(sql, identity, await optionalColumns(sql), matchRules(env));
 * ```
 */
export async function findUsuario(
  sql: Sql,
  identity: Identity,
  columns: OptionalColumns,
  rules: MatchRules,
): Promise<MatchedRow | null> {
  const keys = identityKeys(sql, identity);
  const rows = await sql<{ id: string; rol: string | null; level: number }[]>`
    select u.id, u.rol, c.level
    from (${matchCandidate(sql, keys, columns, rules)}) c
    join public.usuarios u on u.id = c.id
  `;
  const row = rows[0];
  if (!row) return null;
  return {
    id: Number(row.id),
    rol: row.rol,
    level: MATCH_LEVELS[row.level - 1],
  };
}
