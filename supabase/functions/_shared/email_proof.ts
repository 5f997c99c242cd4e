/**
 * What proves that an account owns its email address (docs/security.md
 * "Security notes"). The one home of the rule that `ADMIN_EMAILS`
 * (`admin.ts`) and the linking of rows (`auth-sync/ownership.ts`) apply.
 *
 * A confirmed email alone is no proof: with `mailer_autoconfirm` on
 * (`enable_confirmations = false`, the default of `supabase start`) Supabase
 * Auth confirms every sign-up at once, and it hands an existing unconfirmed
 * account to whoever signs up with its address first (`signup.go`:
 * `user.Confirm` on the found user). What does prove it:
 *
 * - a confirmation on a project that confirms by mail (a real mail round
 *   trip): {@linkcode confirmedByMail};
 * - for an address an operator lists, an account whose email was confirmed
 *   when it was created: {@linkcode confirmedAtCreation}. Nobody but an
 *   administrator (admin API, Studio's "Auto Confirm User") or the first
 *   sign-up creates an account confirmed; a later claim of an unconfirmed
 *   account confirms it later.
 *
 * @module
 */
import { PROVIDER_TIMEOUT_MS, providerUnavailable } from "./auth.ts";
import type { FunctionEnv } from "./env.ts";

// Auth's settings change only when the project is reconfigured; a minute
// keeps a sync of many pages from asking on every call.
const _SETTINGS_TTL_MS = 60_000;
const _cache = new Map<string, { autoconfirm: boolean; until: number }>();

/**
 * Auth creates an account and confirms it in one transaction (admin API
 * `email_confirm: true`, or a sign-up under autoconfirm): the two
 * timestamps lie a few database round trips apart. A claim of an existing
 * account comes in a later request, which would have to land within this
 * window of the account's creation to pass for it; an Auth slower than
 * this refuses a real administrator (the safe way to fail).
 */
export const AT_CREATION_MS = 250;

/** The two timestamps of an account that the rule reads. */
export interface ConfirmationTimes {
  /** `email_confirmed_at` (ISO), `null` while unconfirmed. */
  readonly emailConfirmedAt: string | null;
  /** `created_at` (ISO). */
  readonly createdAt: string | null;
}

/**
 * Whether Auth confirms sign-ups at once (`mailer_autoconfirm`, from
 * `GET /auth/v1/settings`, cached a minute). Auth that cannot answer gives
 * 503 `idp_unavailable`: no rights and no link on a guess.
 *
 * supabase-js has no call for `/settings`, hence the plain `fetch`.
 *
 * @example
 * ```ts
 * if (await autoconfirms(env)) console.log("a confirmed email proves little here");
 * ```
 */
export async function autoconfirms(env: FunctionEnv): Promise<boolean> {
  const cached = _cache.get(env.supabaseUrl);
  if (cached && cached.until > Date.now()) return cached.autoconfirm;
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
  _cache.set(env.supabaseUrl, {
    autoconfirm,
    until: Date.now() + _SETTINGS_TTL_MS,
  });
  return autoconfirm;
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
 * Whether the account's email was confirmed when the account was created
 * (within {@linkcode AT_CREATION_MS}), not by a later claim.
 *
 * @example
 * ```ts
 * confirmedAtCreation({ createdAt: "2026-01-01T00:00:00.000Z", emailConfirmedAt: "2026-01-01T00:00:00.004Z" }); // true
 * confirmedAtCreation({ createdAt: "2026-01-01T00:00:00.000Z", emailConfirmedAt: "2026-01-01T09:30:00.000Z" }); // false
 * ```
 */
export function confirmedAtCreation(times: ConfirmationTimes): boolean {
  if (!times.emailConfirmedAt || !times.createdAt) return false;
  const gap = Date.parse(times.emailConfirmedAt) - Date.parse(times.createdAt);
  return Number.isFinite(gap) && Math.abs(gap) <= AT_CREATION_MS;
}
