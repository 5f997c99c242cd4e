/**
 * Finding Supabase Auth accounts by id and by email, for many rows at once.
 *
 * This reads `auth.users` through the service database connection instead
 * of paging `auth.admin.listUsers`: supabase-js cannot filter that list by
 * email, so finding one address means fetching every account, page by page,
 * on each call, while one indexed statement answers a whole batch. Reading
 * is all that happens here; every change to an account still goes through
 * the Auth admin API (docs/architecture.md). The lookups mirror Supabase
 * Auth's own (`FindUserByEmailAndAudience`): single instance (the nil id),
 * soft-deleted accounts excluded, emails compared lower-cased, an SSO account
 * only when no password account has the address.
 *
 * @module
 */
import type postgres from "postgres";
import { pgArray } from "../_shared/db.ts";
import {
  type AddressClaim,
  confirmedAfterMail,
} from "../_shared/email_proof.ts";

/**
 * A Supabase Auth account, as far as auth-sync needs it: what proves it owns
 * its address included (`_shared/email_proof.ts`).
 */
export interface Account extends AddressClaim {
  /** `auth.users.id`. */
  readonly id: string;
  /** Lower-cased email, or `null` (phone-only accounts). */
  readonly email: string | null;
}

/** Accounts found by {@linkcode findAccounts}. */
export interface Accounts {
  /** By `auth.users.id`. */
  readonly byId: ReadonlyMap<string, Account>;
  /** By lower-cased email. */
  readonly byEmail: ReadonlyMap<string, Account>;
}

// Supabase Auth is single-tenant: every account has the nil instance id,
// which is also the leading column of its index on lower(email).
const _INSTANCE_ID = "00000000-0000-0000-0000-000000000000";

// Each account's identities as confirmedAfterMail reads them (provider and
// identity_data's email), as Auth's user object lists them: a subquery on
// auth.identities' user_id index.
function _identities(sql: postgres.ISql) {
  return sql`coalesce((
      select jsonb_agg(jsonb_build_object(
        'provider', i.provider, 'email', i.identity_data ->> 'email'))
      from auth.identities i where i.user_id = a.id), '[]'::jsonb)`;
}

/**
 * The accounts with these ids and these (lower-cased) emails, in one
 * statement. A Postgres `Sql` or transaction may be passed.
 *
 * @example
 * ```ts
 * const { byEmail } = await findAccounts(sql, { emails: ["ana@example.com"] });
 * byEmail.get("ana@example.com")?.id;
 * ```
 */
export async function findAccounts(
  sql: postgres.ISql,
  keys: { ids?: readonly string[]; emails?: readonly string[] },
): Promise<Accounts> {
  const ids = [...new Set(keys.ids ?? [])];
  const emails = [...new Set(keys.emails ?? [])];
  const byId = new Map<string, Account>();
  const byEmail = new Map<string, Account>();
  if (ids.length === 0 && emails.length === 0) return { byId, byEmail };
  const rows = await sql<
    {
      by: "id" | "email";
      id: string;
      email: string | null;
      confirmed_at: Date | null;
      mailed_at: Date | null;
      identities: { provider: unknown; email: unknown }[];
      app_metadata: Record<string, unknown> | null;
    }[]
  >`
    select 'id' as by, a.id::text, lower(a.email) as email,
           a.email_confirmed_at as confirmed_at,
           a.confirmation_sent_at as mailed_at,
           ${_identities(sql)} as identities,
           a.raw_app_meta_data as app_metadata,
           false as is_sso_user, a.created_at
    from auth.users a
    where a.id = any(${pgArray(ids)}::uuid[]) and a.deleted_at is null
    union all
    select 'email' as by, a.id::text, lower(a.email) as email,
           a.email_confirmed_at as confirmed_at,
           a.confirmation_sent_at as mailed_at,
           ${_identities(sql)} as identities,
           a.raw_app_meta_data as app_metadata,
           a.is_sso_user, a.created_at
    from auth.users a
    where a.instance_id = ${_INSTANCE_ID}::uuid
      and lower(a.email) = any(${pgArray(emails)}::text[])
      and a.deleted_at is null
    order by by, is_sso_user, created_at
  `;
  for (const row of rows) {
    const account: Account = {
      id: row.id,
      email: row.email,
      emailConfirmed: row.confirmed_at !== null,
      confirmedAfterMail: confirmedAfterMail({
        email: row.email,
        emailConfirmedAt: row.confirmed_at,
        confirmationSentAt: row.mailed_at,
        identities: row.identities,
      }),
      appMetadata: row.app_metadata ?? {},
    };
    if (row.by === "id") byId.set(account.id, account);
    else if (row.email !== null && !byEmail.has(row.email)) {
      byEmail.set(row.email, account);
    }
  }
  return { byId, byEmail };
}

/**
 * `usuarios` rows linked to these accounts: account id to row id. Only
 * where the `auth_user_id` column exists.
 */
export async function linkedRows(
  sql: postgres.ISql,
  accountIds: readonly string[],
): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  if (accountIds.length === 0) return out;
  const rows = await sql<{ id: string; auth_user_id: string }[]>`
    select u.id, u.auth_user_id::text
    from public.usuarios u
    where u.auth_user_id = any(${pgArray(new Set(accountIds))}::uuid[])
  `;
  for (const row of rows) out.set(row.auth_user_id, Number(row.id));
  return out;
}

/**
 * An email from a `usuarios` row as it is compared everywhere: lower-cased
 * (SQL `lower()`), nothing else; `null` for none or blank.
 *
 * @example
 * ```ts
 * normalizeEmail("Ana@Example.com"); // "ana@example.com"
 * ```
 */
export function normalizeEmail(
  value: string | null | undefined,
): string | null {
  if (value == null || value.trim() === "") return null;
  return value.toLowerCase();
}

/**
 * The account created by the `createUser` call that carried `requestId` in
 * its `app_metadata` ({@linkcode CREATED_BY_KEY}), if Auth applied it:
 * after a lost answer, the only account auth-sync may delete again. Another
 * account with the same email (a stranger's sign-up meanwhile) is not it.
 */
export async function findCreatedAccount(
  sql: postgres.ISql,
  email: string,
  requestId: string,
): Promise<string | null> {
  const rows = await sql<{ id: string }[]>`
    select a.id::text
    from auth.users a
    where a.instance_id = ${_INSTANCE_ID}::uuid
      and lower(a.email) = ${email}
      and a.raw_app_meta_data ->> ${CREATED_BY_KEY} = ${requestId}
      and a.deleted_at is null
  `;
  return rows[0]?.id ?? null;
}

/**
 * `app_metadata` key under which auth-sync records the request that
 * created an account. Only the service role can write `app_metadata`, so a
 * sign-up cannot forge it.
 */
export const CREATED_BY_KEY = "auth_sync_request";
