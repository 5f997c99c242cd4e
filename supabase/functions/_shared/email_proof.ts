/**
 * What proves that an account owns its email address (docs/security.md
 * "Administrator rights"). The one home of the rule that `ADMIN_EMAILS`
 * (`admin.ts`) and the linking of rows (`auth-sync/ownership.ts`) apply.
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
 * - a confirmation on a project that confirms by mail (a real mail round
 *   trip): {@linkcode confirmedByMail};
 * - for an address an operator lists, the operator's own word, written
 *   where only the service role can write: {@linkcode stampedByAdmin}, the
 *   {@linkcode ADMIN_STAMP} in the account's `app_metadata`.
 *
 * @module
 */
import { PROVIDER_TIMEOUT_MS, providerUnavailable } from "./auth.ts";
import type { FunctionEnv } from "./env.ts";

/**
 * How long Auth's answer about autoconfirm is used: its settings change
 * only when the project is reconfigured, and a minute keeps a sync of many
 * pages from asking on every call.
 */
export const SETTINGS_TTL_MS = 60_000;

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

/** What {@linkcode ownsListedAddress} reads of an account. */
export interface AddressClaim {
  /** The account's email, as Auth reports it now; `null` if it has none. */
  readonly email: string | null;
  /** Whether Auth has confirmed that email. */
  readonly emailConfirmed: boolean;
  /**
   * The account's `app_metadata` as Auth reports it (`getUser`, or the
   * `app_metadata` claim of a token Auth signed): never `user_metadata`.
   */
  readonly appMetadata: Readonly<Record<string, unknown>>;
}

/**
 * Auth's settings as the functions read them, each answer kept
 * {@linkcode SETTINGS_TTL_MS} by the owner's clock, per Auth URL. `deps.ts`
 * holds one per handler set.
 */
export class AuthSettings {
  readonly #now: () => number;
  readonly #cache = new Map<string, { autoconfirm: boolean; until: number }>();

  /** Settings whose answers expire by the clock `now` (ms since the epoch). */
  constructor(now: () => number) {
    this.#now = now;
  }

  /**
   * Whether Auth confirms sign-ups at once (`mailer_autoconfirm`, from
   * `GET /auth/v1/settings`). Auth that cannot answer gives 503
   * `idp_unavailable`: no rights and no link on a guess.
   *
   * supabase-js has no call for `/settings`, hence the plain `fetch`.
   *
   * @example
   * ```ts
   * if (await settings.autoconfirms(env)) console.log("a confirmed email proves little here");
   * ```
   */
  async autoconfirms(env: FunctionEnv): Promise<boolean> {
    const cached = this.#cache.get(env.supabaseUrl);
    if (cached && cached.until > this.#now()) return cached.autoconfirm;
    let settings: { mailer_autoconfirm?: unknown };
    try {
      const res = await fetch(`${env.supabaseUrl}/auth/v1/settings`, {
        headers: { apikey: env.anonKey },
        signal: AbortSignal.timeout(PROVIDER_TIMEOUT_MS),
      });
      if (!res.ok) {
        await res.body?.cancel();
        throw new Error(`Auth settings answered ${res.status}`);
      }
      settings = await res.json();
    } catch (error) {
      throw providerUnavailable(error);
    }
    // Anything but an explicit false counts as autoconfirm: the safe reading.
    const autoconfirm = settings.mailer_autoconfirm !== false;
    this.#cache.set(env.supabaseUrl, {
      autoconfirm,
      until: this.#now() + SETTINGS_TTL_MS,
    });
    return autoconfirm;
  }
}

/**
 * Whether a confirmed email was confirmed by a mail round trip: Auth
 * confirms by mail on this project (`autoconfirm` false).
 *
 * @example
 * ```ts
 * confirmedByMail(true, false); // true
 * confirmedByMail(true, true); // false: any sign-up is confirmed at once
 * ```
 */
export function confirmedByMail(
  emailConfirmed: boolean,
  autoconfirm: boolean,
): boolean {
  return emailConfirmed && !autoconfirm;
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
  const stamp = appMetadata[ADMIN_STAMP];
  if (email === null || typeof stamp !== "string") return false;
  const wanted = email.trim().toLowerCase();
  return wanted !== "" && stamp.trim().toLowerCase() === wanted;
}

/**
 * Whether an account has proven that it owns the address it has, as a
 * listed (`ADMIN_EMAILS`) address must: its email is confirmed, and either
 * an operator stamped that address ({@linkcode stampedByAdmin}, in every
 * configuration), or Auth confirms by mail ({@linkcode confirmedByMail}).
 * Under autoconfirm, or when the setting is unknown (read as autoconfirm),
 * a confirmation alone proves nothing. `autoconfirm` is asked only when the
 * stamp does not decide.
 *
 * @example
 * ```ts
 * await ownsListedAddress(
 *   { email: "boss@x.io", emailConfirmed: true, appMetadata: { admin_verified_email: "boss@x.io" } },
 *   () => settings.autoconfirms(env),
 * ); // true, without asking Auth's settings
 * ```
 */
export async function ownsListedAddress(
  account: AddressClaim,
  autoconfirm: () => Promise<boolean>,
): Promise<boolean> {
  if (account.email === null || !account.emailConfirmed) return false;
  if (stampedByAdmin(account.email, account.appMetadata)) return true;
  return confirmedByMail(account.emailConfirmed, await autoconfirm());
}
