/**
 * The Supabase Auth admin API as auth-sync uses it, and what a failed call
 * says about the account it was meant to change.
 *
 * A call that Auth refuses (4xx) changed nothing. A call whose answer never
 * arrives (the connection dropped, the 5 s timeout, a 5xx from Auth or a
 * gateway in front of it) may have changed the account all the same: Auth
 * may have committed before the answer was lost. Such a call is
 * {@linkcode answerLost}, and the caller reads the account back before it
 * says what happened ({@linkcode lostAnswerError}).
 *
 * Two provider failures certainly changed nothing, and are answered 503 at
 * once: a request that never left (the connection could not be opened:
 * refused, unknown host, failed handshake), and a 429, which Auth and the
 * gateways in front of it give before they look at a request.
 *
 * @module
 */
import type { AdminUserAttributes, AuthError } from "@supabase/supabase-js";
import {
  isProviderDown,
  providerUnavailable,
  requestNotSent,
} from "../_shared/auth.ts";
import type { AuthAdmin, FunctionDeps } from "../_shared/deps.ts";
import type { FunctionEnv } from "../_shared/env.ts";
import { SET_BY_AUTH_SYNC } from "../_shared/email_proof.ts";
import { HttpError } from "../_shared/errors.ts";
import { redact } from "../_shared/log.ts";
import type { Account } from "./accounts.ts";
import { AuditedError, type AuditNote } from "./audit.ts";

/** An account field that lives at the provider. */
export type ProviderField = "email" | "password";

/**
 * The admin API attributes that set `email` on `account`, and record it as
 * set by auth-sync (`recorded`: the address {@linkcode SET_BY_AUTH_SYNC}
 * names afterwards; `null` removes the key). The email is confirmed only
 * on an account whose email already was: Auth's admin API can confirm but
 * never unconfirm, and confirming an account that never proved an address
 * would let whoever signed up with it sign in, with what looks like mail
 * proof of it (`email_confirmed_at` after the unfollowed mail's
 * `confirmation_sent_at`: docs/security.md, "Administrator rights").
 *
 * @example
 * ```ts
 * await admin.updateUserById(account.id, emailAttributes(account, "new@x.io", "new@x.io"));
 * ```
 */
export function emailAttributes(
  account: Pick<Account, "emailConfirmed">,
  email: string,
  recorded: string | null,
): AdminUserAttributes {
  return {
    email,
    ...(account.emailConfirmed ? { email_confirm: true } : {}),
    app_metadata: { [SET_BY_AUTH_SYNC]: recorded },
  };
}

/**
 * What an auth-sync call asks of Supabase Auth, and the clock it keeps
 * time by: taken from the handler's dependencies by {@linkcode callDeps}.
 */
export interface CallDeps {
  /**
   * The admin API through the service-role client (no session storage, the
   * 5 s provider timeout per request, a request that never left marked as
   * such).
   */
  readonly admin: AuthAdmin;
  /** Whether Auth confirms sign-ups at once (`mailer_autoconfirm`). */
  readonly autoconfirm: () => Promise<boolean>;
  /** The clock, ms since the epoch (the lease's wait). */
  readonly now: () => number;
  /**
   * `ADMIN_EMAILS`, lower-cased: addresses only a caller that speaks for
   * the operator may set, or change the account of (`update`).
   */
  readonly adminEmails: ReadonlySet<string>;
}

/**
 * The {@linkcode CallDeps} of one call over `env`.
 *
 * @example
 * ```ts
 * const { admin } = callDeps(ctx.env, deps);
 * const { error } = await admin.updateUserById(id, { email });
 * if (error && answerLost(error)) {
 *   // read the account back before saying what happened
 * }
 * ```
 */
export function callDeps(env: FunctionEnv, deps: FunctionDeps): CallDeps {
  return {
    admin: deps.authAdmin(env),
    autoconfirm: () => deps.autoconfirms(env),
    now: deps.now,
    adminEmails: env.adminEmails,
  };
}

/**
 * Whether a failed Auth call may have been applied all the same: the
 * provider was down in a way that can hide a change (a network error after
 * the request left, a timeout, a 5xx), as opposed to a refusal (4xx), a 429
 * or a request that never left.
 *
 * @example
 * ```ts
 * answerLost(new AuthApiError("boom", 500, "unexpected_failure")); // true
 * answerLost(new AuthApiError("slow down", 429, "over_request_rate_limit")); // false
 * ```
 */
export function answerLost(error: AuthError): boolean {
  return isProviderDown(error) && error.status !== 429 &&
    !requestNotSent(error);
}

/** What is known about the account after a call whose answer was lost. */
export type LostAnswer =
  /** Read back: nothing of the request is at the provider. */
  | { readonly state: "unchanged" }
  /** Read back: the change had been made, and was undone. */
  | { readonly state: "undone" }
  /**
   * Read back: another account holds the new email, so Auth refused the
   * whole change (its unique index; a concurrent change won).
   */
  | { readonly state: "email_taken" }
  /** These fields are, or may be, changed and could not be undone. */
  | { readonly state: "changed"; readonly fields: readonly ProviderField[] }
  /** The read-back failed: these fields may or may not have changed. */
  | { readonly state: "unknown"; readonly fields: readonly ProviderField[] };

/**
 * The error to answer after a call whose answer was lost, once the account
 * was read back (and undone where it could be), with the audit row's
 * outcome and detail:
 *
 * - `unchanged`: 503 `idp_unavailable`; audit `failed`, `idp_unavailable`.
 * - `undone`: 503 `idp_unavailable`; audit `failed`,
 *   `idp_unavailable_undone`.
 * - `email_taken`: 409 `email_exists`; audit `failed`, `email_exists`.
 * - `changed`: 500 `partial_failure`, `provider_changed` = the fields left
 *   changed; audit `partial_failure`, `idp_answer_lost:<fields>`.
 * - `unknown`: 500 `partial_failure`, `provider_changed` = the fields that
 *   may have changed, `provider_state: "unknown"`; audit `partial_failure`,
 *   `idp_state_unknown`.
 *
 * `provider_changed` stays a list in every case, so that a client that
 * reads it as one is not thrown by an unknown state, and errs on the safe
 * side: it takes the fields as changed.
 */
export function lostAnswerError(
  lost: LostAnswer,
  cause: AuthError,
): HttpError {
  if (lost.state === "email_taken") {
    return new AuditedError("email_exists", {
      outcome: "failed",
      detail: "email_exists",
    }, { cause });
  }
  if (lost.state === "unchanged" || lost.state === "undone") {
    const unavailable = providerUnavailable(cause);
    return new AuditedError(unavailable.code, {
      outcome: "failed",
      detail: lost.state === "undone"
        ? "idp_unavailable_undone"
        : "idp_unavailable",
    }, { headers: unavailable.headers, cause });
  }
  const error = `Auth's answer to the account change was lost: ${
    redact(cause.message)
  }`;
  const note: AuditNote = lost.state === "changed"
    ? {
      outcome: "partial_failure",
      detail: `idp_answer_lost:${lost.fields.join(",")}`,
    }
    : { outcome: "partial_failure", detail: "idp_state_unknown" };
  return new AuditedError("partial_failure", note, {
    extra: {
      provider_changed: [...lost.fields],
      ...(lost.state === "unknown" ? { provider_state: "unknown" } : {}),
      error,
    },
    cause,
  });
}
