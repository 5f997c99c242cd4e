/**
 * What proves that an account owns its email address (docs/security.md
 * "Administrator rights"). The one home of the rule that `ADMIN_EMAILS`
 * (`admin.ts`) and the linking of rows (`auth-sync` `sync` and `update`)
 * apply.
 *
 * A confirmed email alone is no proof: with `mailer_autoconfirm` on
 * (`enable_confirmations = false`, the default of `supabase start`) Supabase
 * Auth confirms every sign-up at once, in the request that creates the
 * account, and it hands an existing unconfirmed account to whoever signs up
 * with its address first (`signup.go`: `user.Confirm` on the found user). A
 * stranger who signs up first with a listed address is thus confirmed
 * exactly like an account an administrator created confirmed. What does
 * prove it:
 *
 * - a confirmation by mail (a real mail round trip) of the address the
 *   account holds now: Auth confirmed the account after it had mailed a
 *   confirmation (sign-up or invite), the account still has an `email`
 *   identity for that very address, and the project confirms by mail now
 *   ({@linkcode confirmedAfterMail}). The setting alone is not enough: an
 *   account a stranger took while confirmations were off stays confirmed
 *   when they are turned on, but Auth never mailed it a confirmation
 *   (`user.Confirm` in `signup.go` sets `email_confirmed_at` only;
 *   `confirmation_sent_at` is written when a mail is sent, `mail.go`, and
 *   also when an SMS sign-up code is, `phone.go`). The two times are the
 *   account's, not the address's: the `email` identity ties them to the
 *   address (an account with only a phone never has one for an email).
 *   Auth writes that identity's address when an account signs up or is
 *   invited or created with an email, when an email
 *   change is confirmed by mail (`verify.go` emailChangeVerify), and when
 *   the admin API sets an email (`admin.go` adminUserUpdate); it deletes
 *   the identity on unlink, which then promotes another identity's email
 *   (from an OAuth provider, never mailed) to the account's
 *   (`UpdateUserEmailFromIdentities`). So an operator who changes an
 *   account's email (admin API, Studio) vouches for the new address: the
 *   account's earlier mail proof carries over to it. auth-sync `update`
 *   does not: an administrator by `rol` may call it, and the address it
 *   set ({@linkcode SET_BY_AUTH_SYNC}) proves nothing without a stamp;
 * - the operator's own word, written where only the service role can
 *   write: {@linkcode stampedByAdmin}, the {@linkcode ADMIN_STAMP} in the
 *   account's `app_metadata`.
 *
 * `ADMIN_EMAILS` and the linking of rows by email both ask
 * {@linkcode ownsAddress}.
 *
 * @module
 */

/**
 * The `app_metadata` key in which an operator vouches for an account's
 * address: its value is the address the operator verified. Supabase Auth
 * lets only the service role write `app_metadata` (admin API, Studio, SQL);
 * a user's own `updateUser` may not (403 `not_admin`), and what a user may
 * write (`user_metadata`) is never read for it.
 *
 * @example
 * ```ts
 * await supabase.auth.admin.updateUserById(id, {
 *   email_confirm: true,
 *   app_metadata: { [ADMIN_STAMP]: "boss@example.com" },
 * });
 * ```
 */
export const ADMIN_STAMP = "admin_verified_email";

/** What {@linkcode ownsAddress} reads of an account. */
export interface AddressClaim {
  /** The account's email, as Auth reports it now; `null` if it has none. */
  readonly email: string | null;
  /** Whether Auth has confirmed that email. */
  readonly emailConfirmed: boolean;
  /**
   * Whether Auth confirmed that very address after mailing a confirmation
   * ({@linkcode confirmedAfterMail}).
   */
  readonly confirmedAfterMail: boolean;
  /**
   * The account's `app_metadata` as Auth reports it (`getUser`, or the
   * `app_metadata` claim of a token Auth signed): never `user_metadata`.
   */
  readonly appMetadata: Readonly<Record<string, unknown>>;
}

/**
 * What {@linkcode confirmedAfterMail} reads of an account, as `auth.users`
 * and `auth.identities` hold it and Auth's user object (`getUser`, with its
 * `identities`) reports it.
 */
export interface MailRecord {
  /** The account's email now, in any case; `null` or absent if none. */
  readonly email: string | null | undefined;
  /** `email_confirmed_at` (a time, or `null`). */
  readonly emailConfirmedAt: string | Date | null | undefined;
  /** `confirmation_sent_at` (a time, or `null`). */
  readonly confirmationSentAt: string | Date | null | undefined;
  /**
   * The account's identities: each one's `provider` and the `email` of its
   * `identity_data` (anything, as stored).
   */
  readonly identities: readonly {
    readonly provider: unknown;
    readonly email: unknown;
  }[];
}

/**
 * Whether Auth confirmed the address the account holds now after it had
 * mailed a confirmation: the account's `email_confirmed_at` is later than
 * its `confirmation_sent_at`, and the account has an `email` identity whose
 * `identity_data.email` is its email (both lower-cased).
 *
 * The times are the account's. Auth writes `confirmation_sent_at` when it
 * sends a sign-up confirmation or an invite (or an operator generates such
 * a link), and also when it sends an SMS sign-up code (`phone.go`); it
 * clears it on every password change (`UpdatePassword`, which also sets an
 * invited user's first password as it confirms), and never writes it when
 * it confirms at once: a sign-up under autoconfirm, an account an
 * administrator created confirmed, or an unconfirmed account handed to
 * whoever signed up first with its address. A later email, set by a path
 * that mails nothing and keeps both times, would inherit them: the `email`
 * identity is what ties them to one address. Auth writes its address at
 * sign-up, invite and admin creation, on an email change confirmed by mail
 * and on an email set through the admin API (so an operator's change
 * carries the proof over: the operator vouches for the new address; not
 * auth-sync's, {@linkcode ownsAddress}), and
 * deletes it on unlink, the path by which an OAuth provider's email
 * becomes the account's. A phone-only account has no `email` identity for
 * its email, so its SMS code proves no address.
 *
 * @example
 * ```ts
 * confirmedAfterMail({
 *   email: "ana@x.io",
 *   emailConfirmedAt: "2026-11-24T10:05:00Z",
 *   confirmationSentAt: "2026-11-24T10:00:00Z",
 *   identities: [{ provider: "email", email: "Ana@x.io" }],
 * }); // true
 * confirmedAfterMail({
 *   email: "boss@x.io", // promoted from an OAuth identity on unlink
 *   emailConfirmedAt: "2026-11-24T10:05:00Z",
 *   confirmationSentAt: "2026-11-24T10:00:00Z",
 *   identities: [{ provider: "github", email: "boss@x.io" }],
 * }); // false: no mail to that address
 * ```
 */
export function confirmedAfterMail(account: MailRecord): boolean {
  const { emailConfirmedAt, confirmationSentAt } = account;
  if (!emailConfirmedAt || !confirmationSentAt) return false;
  if (new Date(emailConfirmedAt) <= new Date(confirmationSentAt)) return false;
  const email = account.email ?? null;
  return account.identities.some((i) =>
    i.provider === "email" && _sameAddress(i.email, email)
  );
}

/**
 * Whether an operator vouched for the account's current address: its
 * `app_metadata` {@linkcode ADMIN_STAMP} equals its email (both trimmed,
 * case-insensitive). The stamp names the address, not the account, so an
 * email changed later (by the user, through a mail link, or by an
 * administrator) voids it until an operator stamps the new one.
 *
 * @example
 * ```ts
 * stampedByAdmin("boss@x.io", { admin_verified_email: " Boss@X.io " }); // true
 * stampedByAdmin("new@x.io", { admin_verified_email: "boss@x.io" }); // false
 * ```
 */
export function stampedByAdmin(
  email: string | null,
  appMetadata: Readonly<Record<string, unknown>>,
): boolean {
  return _names(appMetadata[ADMIN_STAMP], email);
}

/**
 * The `app_metadata` key in which auth-sync records the address it set on
 * an account (creating it, or changing its email): an administrator's act,
 * written where only the service role can write. It links a `usuarios` row
 * to that account by email ({@linkcode linkableAddress}); it grants no
 * rights, and takes away the account's mail proof for that address
 * ({@linkcode ownsAddress}, which `ADMIN_EMAILS` reads).
 */
export const SET_BY_AUTH_SYNC = "auth_sync_email";

/**
 * Whether a `usuarios` row may be linked to, or changed through, the
 * account of its email: the account owns the address
 * ({@linkcode ownsAddress}), or auth-sync itself set that address on it
 * and it is still the account's ({@linkcode SET_BY_AUTH_SYNC}; an address
 * changed since, by the user or anyone, voids it). Without the second, a
 * table without `auth_user_id`, which finds a row's account by email only,
 * could never change an account auth-sync had created for it.
 *
 * @example
 * ```ts
 * await linkableAddress(account, () => settings.autoconfirms(env));
 * ```
 */
export async function linkableAddress(
  account: AddressClaim,
  autoconfirm: () => Promise<boolean>,
): Promise<boolean> {
  if (account.emailConfirmed && _setByAuthSync(account)) return true;
  return await ownsAddress(account, autoconfirm);
}

// Whether the account's current address is the one auth-sync set on it
// (SET_BY_AUTH_SYNC): it links the row (linkableAddress), and carries no
// mail proof (ownsAddress).
function _setByAuthSync(account: AddressClaim): boolean {
  return _names(account.appMetadata[SET_BY_AUTH_SYNC], account.email);
}

// Whether a recorded address names `email` (both trimmed, case-insensitive).
function _names(recorded: unknown, email: string | null): boolean {
  if (email === null || typeof recorded !== "string") return false;
  const wanted = email.trim().toLowerCase();
  return wanted !== "" && recorded.trim().toLowerCase() === wanted;
}

// Whether an identity's address is the account's: both lower-cased, as
// Auth's generated `auth.identities.email` column and every comparison of
// emails here (no trimming: Auth stores what it validated).
function _sameAddress(identityEmail: unknown, email: string | null): boolean {
  if (email === null || typeof identityEmail !== "string") return false;
  return email !== "" && identityEmail.toLowerCase() === email.toLowerCase();
}

/**
 * Whether an account has proven that it owns the address it has, as a
 * listed (`ADMIN_EMAILS`) address, or a `usuarios` row's email it is to be
 * linked by, requires: its email is confirmed, and either an operator
 * stamped that address ({@linkcode stampedByAdmin}, in every
 * configuration), or it was confirmed by mail: Auth confirmed it after
 * mailing a confirmation ({@linkcode confirmedAfterMail}), and confirms by
 * mail on this project now (`autoconfirm` false; under autoconfirm even a
 * mailed link is no proof, as the account may have been handed to a
 * stranger's sign-up since), and the address is not one auth-sync set
 * ({@linkcode SET_BY_AUTH_SYNC}: the mail was to the account's earlier
 * address, and whoever moved it may be an administrator by `rol`, not the
 * operator). A confirmation alone proves nothing.
 * `autoconfirm` is asked only when the stamp does not decide and the
 * account was mailed.
 *
 * @example
 * ```ts
 * await ownsAddress(
 *   { email: "boss@x.io", emailConfirmed: true, confirmedAfterMail: false, appMetadata: { admin_verified_email: "boss@x.io" } },
 *   () => settings.autoconfirms(env),
 * ); // true, without asking Auth's settings
 * ```
 */
export async function ownsAddress(
  account: AddressClaim,
  autoconfirm: () => Promise<boolean>,
): Promise<boolean> {
  if (account.email === null || !account.emailConfirmed) return false;
  if (stampedByAdmin(account.email, account.appMetadata)) return true;
  // An address auth-sync set is an administrator's word, and an
  // administrator by `rol` is not the operator: the mail proof of the
  // account's earlier address, which Auth carries over, would let one park
  // an account it controls on an address the operator lists later.
  if (_setByAuthSync(account)) {
    return false;
  }
  return account.confirmedAfterMail && !(await autoconfirm());
}
