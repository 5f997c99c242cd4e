/**
 * Whether an account is proven to own its email address, so that a
 * `usuarios` row with that address may be linked to it.
 *
 * A confirmed email is proof only where Supabase Auth confirms addresses by
 * mail: with `mailer_autoconfirm` on (`enable_confirmations = false`, the
 * default of `supabase start`), every sign-up is confirmed at once, and
 * anyone can sign up first with the address of a row that has no account
 * yet. Auth reports the setting in `GET /auth/v1/settings`
 * (`_shared/email_proof.ts`).
 *
 * @module
 */
import { confirmedByMail } from "../_shared/email_proof.ts";
import type { Account } from "./accounts.ts";

/**
 * Whether `account` is proven to own its email: confirmed, on a project
 * that confirms by mail.
 *
 * @example
 * ```ts
 * ownsEmail({ id, email: "ana@example.com", emailConfirmed: true }, false); // true
 * ```
 */
export function ownsEmail(account: Account, autoconfirm: boolean): boolean {
  return confirmedByMail(account.emailConfirmed, autoconfirm);
}
