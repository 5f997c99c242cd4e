/**
 * Whether an account is proven to own its email address, so that a
 * `usuarios` row with that address may be linked to it.
 *
 * A confirmed email is proof only where Supabase Auth confirms addresses by
 * mail: with `mailer_autoconfirm` on (`enable_confirmations = false`, the
 * default of `supabase start`), every sign-up is confirmed at once, and
 * anyone can sign up first with the address of a row that has no account
 * yet. Auth reports the setting in `GET /auth/v1/settings`.
 *
 * @module
 */
import { PROVIDER_TIMEOUT_MS, providerUnavailable } from "../_shared/auth.ts";
import type { FunctionEnv } from "../_shared/env.ts";
import type { Account } from "./accounts.ts";

// Auth's settings change only when the project is reconfigured; a minute
// keeps a sync of many pages from asking on every call.
const _SETTINGS_TTL_MS = 60_000;
const _cache = new Map<string, { autoconfirm: boolean; until: number }>();

/**
 * Whether Auth confirms sign-ups at once (`mailer_autoconfirm`). Auth that
 * cannot answer gives 503 `idp_unavailable`: nothing is linked on a guess.
 *
 * supabase-js has no call for `/settings`, hence the plain `fetch`.
 *
 * @example
 * ```ts
 * if (await autoconfirms(env)) console.log("a confirmed email proves nothing here");
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
 * Whether `account` is proven to own its email: confirmed, on a project
 * that confirms by mail.
 *
 * @example
 * ```ts
 * ownsEmail({ id, email: "ana@example.com", emailConfirmed: true }, false); // true
 * ```
 */
export function ownsEmail(account: Account, autoconfirm: boolean): boolean {
  return account.emailConfirmed && !autoconfirm;
}
