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
 * matched by email or username. Strategies 2 to 4 use only an email Auth
 * has confirmed: an account holding an address it never proved (Auth's
 * identity unlink can leave one, signed in) reaches no row by it.
 *
 * The fourth strategy proves nothing: anyone who can sign up as
 * `bruno@anywhere` would reach the row `bruno`. It is therefore limited to
 * the domains whose mailboxes the project trusts (its own company domain,
 * say), or `*` for a project whose sign-ups are closed.
 *
 * These rules have one home, the database function `presence.match_usuario`
 * (migration `20261125010000_match_presence_by_confirmed_email.sql`), which
 * `presence.record_ping` and `presence.reader` call too; this module is how
 * the functions call it.
 *
 * @module
 */
import type postgres from "postgres";
import type { Identity } from "./auth.ts";
import { callingDbFunction } from "./db_function.ts";
import { pgArray, type Sql } from "./db.ts";
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

/** A matched row as the admin check needs it. */
export interface MatchedRow {
  readonly id: number;
  readonly rol: string | null;
  readonly level: MatchLevel;
}

/**
 * The email an identity may be matched by when the database function is
 * given no confirmation of its own: the email once Auth has confirmed it,
 * else `null` (matches nothing). For `presence.record_ping` called with
 * what Auth said (presence-ping's slow path), whose `p_email` is this;
 * every other caller hands `presence.match_usuario` the email and whether
 * it is confirmed, and the function applies the same rule.
 *
 * @example
 * ```ts
 * matchableEmail({ email: "ana@x.io", emailConfirmed: false }); // null
 * ```
 */
export function matchableEmail(
  identity: Pick<Identity, "email" | "emailConfirmed">,
): string | null {
  return identity.emailConfirmed ? identity.email : null;
}

/**
 * Finds the identity's row without changing it, or `null`: one call of
 * `presence.match_usuario`, with the row's `rol`.
 *
 * @example
 * ```ts
 * const row = await findUsuario(sql, identity, matchRules(env));
 * ```
 */
export async function findUsuario(
  sql: Sql,
  identity: Pick<Identity, "id" | "email" | "emailConfirmed">,
  rules: MatchRules,
): Promise<MatchedRow | null> {
  const rows = await callingDbFunction(
    "presence.match_usuario",
    () =>
      sql<{ id: string; rol: string | null; level: number }[]>`
        select u.id, u.rol, m.level
        from presence.match_usuario(${identity.id}::uuid,
          lower(${identity.email}::text), ${identity.emailConfirmed}::boolean,
          ${pgArray(rules.usernameDomains)}::text[]) m
        join public.usuarios u on u.id = m.id
      `,
  );
  const row = rows[0];
  if (!row) return null;
  return {
    id: Number(row.id),
    rol: row.rol,
    level: MATCH_LEVELS[row.level - 1],
  };
}
