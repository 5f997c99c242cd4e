/**
 * Putting Supabase Auth back after an update that cannot finish: its
 * answer was lost, or the row write that should have followed it failed.
 *
 * Three rules hold everywhere here:
 *
 * - the account is read back before anything is undone, and an email is set
 *   back only while the account still holds the email this call set (an
 *   account that holds another one was changed by someone else since);
 * - Auth is called only under a lease with time to spare ({@linkcode
 *   renewLease}); a lease that may have lapsed leaves the intent open for
 *   the row's next holder to settle (intent.ts);
 * - each way out settles the call's intent with what is known, except when
 *   nothing is known (a failed read-back), which leaves it open.
 *
 * @module
 */
import { publicDbError, type Sql } from "../_shared/db.ts";
import type { AuthAdmin } from "../_shared/deps.ts";
import { HttpError } from "../_shared/errors.ts";
import { SET_BY_AUTH_SYNC } from "../_shared/email_proof.ts";
import { errorText, logEvent } from "../_shared/log.ts";
import {
  type Account,
  findAccounts,
  findCreatedAccount,
  normalizeEmail,
} from "./accounts.ts";
import { AuditedError, type Field } from "./audit.ts";
import { type IntentOutcome, settleIntent } from "./intent.ts";
import { type Lease, renewLease } from "./lease.ts";
import {
  answerLost,
  emailAttributes,
  type LostAnswer,
  type ProviderField,
} from "./provider.ts";

/** The change a call made (or tried to make) at Auth. */
export type ProviderChange =
  | {
    readonly kind: "created";
    /** The new account's id; `null` when its answer was lost. */
    readonly accountId: string | null;
    readonly email: string;
    /** The request id the account carries in `app_metadata`. */
    readonly requestId: string;
  }
  | {
    readonly kind: "updated";
    /** The account as it was before the call. */
    readonly account: Account;
    /** The email set, if any. */
    readonly email: string | null;
    readonly password: boolean;
  };

/** Where a compensation runs: the call's Auth admin API, lease and intent. */
export interface Scope {
  readonly sql: Sql;
  /** The Auth admin API the call changed the account through. */
  readonly admin: AuthAdmin;
  readonly lease: Lease;
  readonly intentId: string;
}

/**
 * After an Auth call whose answer was lost: reads the account back, undoes
 * what was applied where the Auth API allows, settles the intent, and says
 * what is left. A password that was sent counts as changed: the request
 * left (answerLost excludes one that never did) and may have been applied.
 */
export async function settleLostAnswer(
  scope: Scope,
  change: ProviderChange,
): Promise<LostAnswer> {
  const sent: ProviderField[] = change.kind === "created"
    ? ["email", "password"]
    : [
      ...(change.email !== null ? ["email" as const] : []),
      ...(change.password ? ["password" as const] : []),
    ];
  if (
    change.kind === "updated" && change.email !== null &&
    await _heldByAnother(scope, change.email, change.account.id)
  ) {
    // Auth changes an account in one transaction: the whole change (a
    // password too) was refused by its unique index, not applied.
    await _settle(scope, { outcome: "unchanged", left: [] });
    return { state: "email_taken" };
  }
  let undone: _Undone;
  try {
    undone = await _undo(scope, change);
  } catch (error) {
    _log("Account not read back after a lost answer", error);
    return { state: "unknown", fields: sent };
  }
  await _settle(scope, undone);
  if (undone.left.length > 0) return { state: "changed", fields: undone.left };
  return { state: undone.outcome === "undone" ? "undone" : "unchanged" };
}

/**
 * After a row write that certainly did not commit (its intent is still
 * open): undoes the Auth change where it can, settles the intent, and
 * returns the error to answer: the database's own when everything was put
 * back (or Auth had moved on without this call), else 500
 * `partial_failure` with the fields still changed.
 */
export async function undoAfterFailedWrite(
  scope: Scope,
  change: ProviderChange,
  dbError: unknown,
): Promise<unknown> {
  let undone: _Undone;
  try {
    undone = await _undo(scope, change);
  } catch (error) {
    _log("Account not read back after a failed row write", error);
    undone = {
      outcome: null,
      left: change.kind === "created" ? ["email", "password"] : [
        ...(change.email !== null ? ["email" as const] : []),
        ...(change.password ? ["password" as const] : []),
      ],
    };
  }
  await _settle(scope, undone);
  logEvent("warn", "Row update failed after the provider changed", {
    fn: "auth-sync",
    undone: undone.left.length === 0,
    outcome: undone.outcome ?? "open",
    left_changed: undone.left.join(","),
    cause: errorText(dbError),
  });
  if (undone.left.length === 0) return dbError;
  return new HttpError("partial_failure", {
    extra: {
      provider_changed: undone.left as Field[],
      error: publicDbError(dbError),
    },
    cause: dbError,
  });
}

/**
 * The answer when the intent was settled by another call while this one
 * waited (its lease lapsed and the row's next holder took over): 409
 * `target_busy`. That call's settling wrote this call's audit row, so none
 * is added.
 */
export function supersededError(outcome: IntentOutcome): HttpError {
  return new AuditedError("target_busy", "recorded", {
    headers: { "Retry-After": "1" },
    cause: new Error(`Intent settled by another call: "${outcome}"`),
  });
}

// What an undo achieved: the intent's outcome (`null`: leave it open) and
// the fields left changed at Auth.
interface _Undone {
  readonly outcome: IntentOutcome | null;
  readonly left: ProviderField[];
}

async function _undo(
  scope: Scope,
  change: ProviderChange,
): Promise<_Undone> {
  if (change.kind === "created") {
    const created = change.accountId ??
      await findCreatedAccount(scope.sql, change.email, change.requestId);
    if (!created) return { outcome: "unchanged", left: [] };
    if (await _deleteAccount(scope, created)) {
      return { outcome: "undone", left: [] };
    }
    return { outcome: null, left: ["email", "password"] };
  }
  const { account } = change;
  const now = (await findAccounts(scope.sql, { ids: [account.id] })).byId.get(
    account.id,
  );
  const left: ProviderField[] = [];
  let outcome: IntentOutcome | null = "unchanged";
  if (change.email !== null && change.email !== account.email) {
    if (now?.email === change.email) {
      // Still what this call set: set it back.
      if (await _restoreEmail(scope, account)) outcome = "undone";
      else {
        left.push("email");
        outcome = null;
      }
    } else if (now?.email !== account.email) {
      // Neither: someone changed the account since; it is theirs now.
      outcome = "superseded";
    }
  }
  if (change.password) {
    left.push("password");
    if (outcome !== null && outcome !== "superseded") outcome = "left_changed";
  }
  return { outcome, left };
}

async function _settle(scope: Scope, undone: _Undone): Promise<void> {
  if (undone.outcome === null) return;
  try {
    await settleIntent(scope.sql, scope.intentId, undone.outcome, scope.lease);
  } catch (error) {
    // The intent stays open; the row's next holder settles it.
    _log("Intent not settled", error);
  }
}

// Sets an account's email back to what it was. When the answer to that is
// lost too, the account is read back once more to see whether it worked.
async function _restoreEmail(scope: Scope, account: Account): Promise<boolean> {
  const previous = account.email;
  if (previous === null || !(await _leaseLeft(scope))) return false;
  // The address auth-sync had recorded before (null removes the key).
  const recorded = account.appMetadata[SET_BY_AUTH_SYNC];
  const { error } = await scope.admin.updateUserById(
    account.id,
    emailAttributes(
      account,
      previous,
      typeof recorded === "string" ? recorded : null,
    ),
  );
  if (!error) return true;
  _log("Email not set back", error);
  if (!answerLost(error)) return false;
  try {
    const { byId } = await findAccounts(scope.sql, { ids: [account.id] });
    return byId.get(account.id)?.email === previous;
  } catch {
    return false;
  }
}

// Deletes an account this call created; as _restoreEmail, reads back when
// the answer is lost.
async function _deleteAccount(
  scope: Scope,
  accountId: string,
): Promise<boolean> {
  if (!(await _leaseLeft(scope))) return false;
  const { error } = await scope.admin.deleteUser(accountId);
  if (!error) return true;
  _log("Created account not deleted", error);
  if (!answerLost(error)) return false;
  try {
    const { byId } = await findAccounts(scope.sql, { ids: [accountId] });
    return !byId.has(accountId);
  } catch {
    return false;
  }
}

// Whether Auth may still be called under the lease (renewing it).
async function _leaseLeft(scope: Scope): Promise<boolean> {
  try {
    await renewLease(scope.sql, scope.lease);
    return true;
  } catch (error) {
    _log("No Auth call: the lease may have lapsed", error);
    return false;
  }
}

function _log(message: string, error: unknown): void {
  logEvent("warn", message, { fn: "auth-sync", cause: errorText(error) });
}

// Whether another account holds `email` now. Auth makes an account change
// in one transaction, so a request whose new email another account holds
// could not commit at all: Auth's 500 was its unique index refusing it (a
// concurrent change to the same email won), not a lost answer.
async function _heldByAnother(
  scope: Scope,
  email: string,
  accountId: string,
): Promise<boolean> {
  const address = normalizeEmail(email);
  if (address === null) return false;
  try {
    const holder = (await findAccounts(scope.sql, { emails: [address] }))
      .byEmail.get(address);
    return holder !== undefined && holder.id !== accountId;
  } catch (error) {
    _log("Email holder not read after a lost answer", error);
    return false;
  }
}
