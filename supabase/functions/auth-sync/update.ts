/**
 * auth-sync `update`: changes the email, password and username of one
 * `usuarios` row and of its Supabase Auth account, kept in step.
 *
 * Order of work, one row at a time under its lease ({@linkcode withLease}):
 *
 * 1. settle the intents earlier calls on this row left open (intent.ts);
 * 2. read the row (404 `target_not_found`);
 * 3. refuse a username or email another row or account already has (409),
 *    before anything changes;
 * 4. find the row's account: its `auth_user_id` if that account exists,
 *    else the account of its `correo` if no other row is linked to it (the
 *    row is then linked), else none;
 * 5. when Auth is to change, try the row write and roll it back: what the
 *    row refuses (422 `row_refused`) or a lock the app holds (503
 *    `db_timeout`) is answered while nothing has changed;
 * 6. record the intent, then change the account through the Auth admin
 *    API, or create one when the row has none and an email or password is
 *    to be set; each Auth call only while the lease has time to spare;
 * 7. write the row, settle the intent and write the audit row in one short
 *    transaction that takes the row lock (`for key share` when nothing in
 *    the row changes).
 *
 * A provider failure in step 6 changes nothing. When the call's answer is
 * lost (dropped connection, timeout, 5xx: {@linkcode answerLost}), Auth may
 * have applied it all the same, so the account is read back: a changed email
 * still holding what this call set is set back and a created account
 * deleted (503 `idp_unavailable`), and what cannot be undone or known (a
 * password, a failed undo, a failed read-back) is answered 500
 * `partial_failure` ({@linkcode lostAnswerError}).
 *
 * When step 7 fails, the intent says whether its COMMIT landed (an answer
 * lost on the way back): if it did, the call succeeded and is answered so;
 * if not, step 6 is undone the same way where the Auth API can (500
 * `sync_failed`) and answered `partial_failure` where it cannot (a
 * password). An intent that another call settled meanwhile (this call's
 * lease lapsed) is answered 409 `target_busy`, and nothing is undone.
 *
 * @module
 */
import { type AuthError, isAuthWeakPasswordError } from "@supabase/supabase-js";
import postgres from "postgres";
import { isListedAdminEmail } from "../_shared/admin.ts";
import { isProviderDown, providerUnavailable } from "../_shared/auth.ts";
import { type OptionalColumns, withColumns } from "../_shared/columns.ts";
import { asDbBusy, publicDbError, type Sql } from "../_shared/db.ts";
import { asMigrationMissing } from "../_shared/db_function.ts";
import { linkableAddress, SET_BY_AUTH_SYNC } from "../_shared/email_proof.ts";
import { HttpError } from "../_shared/errors.ts";
import { errorText, logEvent, redact } from "../_shared/log.ts";
import {
  type Account,
  CREATED_BY_KEY,
  findAccounts,
  linkedRows,
  normalizeEmail,
} from "./accounts.ts";
import {
  type Actor,
  AuditedError,
  auditFailure,
  type Field,
  writeAudit,
} from "./audit.ts";
import {
  type ProviderChange,
  type Scope,
  settleLostAnswer,
  supersededError,
  undoAfterFailedWrite,
} from "./compensate.ts";
import {
  type IntentState,
  intentState,
  recordIntent,
  type RowSet,
  settleIntent,
  settleOrphans,
} from "./intent.ts";
import {
  assertLeaseHeld,
  boundTransaction,
  type Lease,
  renewLease,
  withLease,
} from "./lease.ts";
import {
  answerLost,
  type CallDeps,
  emailAttributes,
  lostAnswerError,
} from "./provider.ts";
import {
  isRequestEmail,
  type UpdateRequest,
  validationFailed,
} from "./schema.ts";

/** A `usuarios` row as the update answer shows it. */
export interface UserView {
  readonly id: number;
  readonly correo: string | null;
  readonly nombre_usuario: string | null;
  /**
   * The linked account. Where the deployment has no `auth_user_id` column,
   * the account found by `correo`, or `null`.
   */
  readonly auth_user_id: string | null;
  readonly rol: string | null;
}

/** The 200 body of an update, less `ok`. */
export interface UpdateResult {
  readonly user: UserView;
  /**
   * Fields changed (a field sent with the value already held is none), in
   * this order: email, password, nombre_usuario, auth_user_id.
   */
  readonly changed: Field[];
  /** Whether an Auth account was created for the row. */
  readonly identity_created: boolean;
}

/**
 * Applies an `update` request for the administrator `actor`, and writes the
 * audit row of its outcome.
 *
 * @example
 * ```ts
 * const result = await updateUsuario(sql, callDeps(env, deps), actor, { action: "update", id: 42, email: "new@example.com" });
 * ```
 */
export async function updateUsuario(
  sql: Sql,
  call: CallDeps,
  actor: Actor,
  input: UpdateRequest,
): Promise<UpdateResult> {
  try {
    return await withLease(
      sql,
      input.id,
      call.now,
      (lease) =>
        withColumns(
          sql,
          (columns) => _update(sql, call, actor, input, columns, lease),
        ),
    );
  } catch (error) {
    const failure = _asHttpError(error);
    const audited = failure instanceof AuditedError ? failure.audit : null;
    if (audited === "recorded") throw failure;
    const note = audited ?? {
      outcome: failure.code === "partial_failure"
        ? "partial_failure" as const
        : "failed" as const,
      detail: failure.code,
    };
    await auditFailure(sql, {
      actor,
      action: "update",
      targetId: input.id,
      fields: _requested(input),
      ...note,
    });
    throw failure;
  }
}

interface _Row {
  id: number;
  correo: string | null;
  nombre_usuario: string | null;
  auth_user_id: string | null;
  rol: string | null;
}

async function _update(
  sql: Sql,
  call: CallDeps,
  actor: Actor,
  input: UpdateRequest,
  columns: OptionalColumns,
  lease: Lease,
): Promise<UpdateResult> {
  await settleOrphans(sql, lease, columns);
  const row = await _readRow(sql, input.id, columns);
  if (!row) throw new HttpError("target_not_found");
  await _refuseTaken(sql, row, input);
  const { account, link } = await _rowAccount(sql, call, row, columns, input);
  if (input.email !== undefined) {
    const { byEmail } = await findAccounts(sql, { emails: [input.email] });
    const owner = byEmail.get(input.email);
    if (owner && owner.id !== account?.id) {
      throw new HttpError("email_exists");
    }
  }
  const plan = await _providerPlan(sql, row, account, input);
  _refuseListed(actor, call.adminEmails, plan);
  const changed = _changes(input, row, plan);
  const relink = columns.authUserId &&
    (plan?.kind === "create" || (link && account !== null));
  if (relink) changed.push("auth_user_id");
  const rowSet = _rowSet(input, relink && account ? account.id : null);
  if (plan) await _tryRowWrite(sql, row, rowSet);
  const intentId = plan
    ? await _announce(sql, lease, actor, row, plan, rowSet)
    : null;
  const change = plan && intentId
    ? await _applyProvider({ sql, admin: call.admin, lease, intentId }, plan)
    : null;
  const accountId = change?.kind === "created"
    ? change.accountId
    : account?.id ?? null;
  const write = {
    set: _rowSet(input, relink ? accountId : null),
    changed,
    lease,
    intentId,
  };
  try {
    const user = await _writeRow(sql, actor, row, columns, write);
    return {
      user: { ...user, auth_user_id: user.auth_user_id ?? accountId },
      changed,
      identity_created: change?.kind === "created",
    };
  } catch (error) {
    if (!change || !intentId) throw error;
    return await _afterFailedWrite(
      { sql, admin: call.admin, lease, intentId },
      change,
      error,
      { row, rowSet, accountId, changed },
    );
  }
}

// The row columns the call writes: as the intent records them before Auth
// is called, and as written once Auth has changed (then with a created
// account's id, only known from Auth).
function _rowSet(input: UpdateRequest, linkTo: string | null): RowSet {
  return {
    ...(input.email !== undefined ? { correo: input.email } : {}),
    ...(input.nombre_usuario !== undefined
      ? { nombre_usuario: input.nombre_usuario }
      : {}),
    ...(linkTo !== null ? { auth_user_id: linkTo } : {}),
  };
}

// Before Auth changes anything: the row write, run and rolled back, so that
// what the row itself refuses (an adopted table's varchar length, a CHECK,
// the app's trigger) or a lock the app holds past the lock timeout is
// answered (422 row_refused, 503 db_timeout) while nothing has changed.
// A created account's id is not known yet; the link is written to the
// column as it is.
async function _tryRowWrite(
  sql: Sql,
  row: _Row,
  rowSet: RowSet,
): Promise<void> {
  const set: Record<string, string> = { ...rowSet };
  if (Object.keys(set).length === 0) return;
  const tried = Symbol("rolled back");
  // The pool's own bounds (lock wait 1 s), not the longer ones of a write
  // that must land: nothing is at stake yet.
  await sql.begin(async (tx) => {
    await tx`update public.usuarios u set ${tx(set)} where u.id = ${row.id}`;
    throw tried;
  }).catch((error) => {
    if (error !== tried) throw error;
  });
}

// The write failed: did its COMMIT land all the same? The intent, settled
// in the same transaction, says. Landed: the call succeeded. Settled by
// another call: this call's lease lapsed and that call took over, so
// nothing is undone. Open: the write certainly failed; Auth is put back.
// Unknown (the read-back failed too): the intent stays open for the row's
// next holder, and the answer says the provider may have changed.
async function _afterFailedWrite(
  scope: Scope,
  change: ProviderChange,
  error: unknown,
  done: {
    row: _Row;
    rowSet: RowSet;
    accountId: string | null;
    changed: Field[];
  },
): Promise<UpdateResult> {
  let state: IntentState | null;
  try {
    state = await intentState(scope.sql, scope.intentId);
  } catch (readBack) {
    logEvent("error", "Intent not read back after a failed row write", {
      fn: "auth-sync",
      intent_id: scope.intentId,
      cause: errorText(readBack),
    });
    throw new HttpError("partial_failure", {
      extra: {
        provider_changed: _sent(change),
        provider_state: "unknown",
        error: publicDbError(error),
      },
      cause: error,
    });
  }
  const own = state?.settledBy === scope.lease.holder;
  if (state && own && state.outcome === "applied") {
    // Written by this call: only the answer to its COMMIT was lost.
    logEvent("warn", "Row write committed though its answer was lost", {
      fn: "auth-sync",
      intent_id: scope.intentId,
      cause: errorText(error),
    });
    // Answered from what was written, without another read that could
    // fail and contradict the audit row the write committed.
    return {
      user: {
        id: done.row.id,
        correo: done.rowSet.correo ?? done.row.correo,
        nombre_usuario: done.rowSet.nombre_usuario ?? done.row.nombre_usuario,
        auth_user_id: done.row.auth_user_id ?? done.accountId,
        rol: done.row.rol,
      },
      changed: done.changed,
      identity_created: change.kind === "created",
    };
  }
  if (state && !own) throw supersededError(state.outcome);
  const answer = await undoAfterFailedWrite(scope, change, error);
  // Auth was put back: the database's failure, answered as one that came
  // after the provider changed (500 sync_failed), not as a refusal before;
  // a table without the newest migration's column is named as such.
  throw answer instanceof HttpError ? answer : _taken(answer) ??
    asMigrationMissing(answer) ?? _syncFailed(answer);
}

function _sent(change: ProviderChange): Field[] {
  if (change.kind === "created") return ["email", "password"];
  return [
    ...(change.email !== null ? ["email" as const] : []),
    ...(change.password ? ["password" as const] : []),
  ];
}

async function _readRow(
  sql: Sql,
  id: number,
  columns: OptionalColumns,
): Promise<_Row | null> {
  const authUserId = columns.authUserId
    ? sql`u.auth_user_id::text`
    : sql`null::text`;
  const [row] = await sql<
    (Omit<_Row, "id"> & { id: string })[]
  >`
    select u.id, u.correo, u.nombre_usuario, ${authUserId} as auth_user_id,
           u.rol
    from public.usuarios u
    where u.id = ${id}
  `;
  return row ? { ...row, id: Number(row.id) } : null;
}

// The unique indexes would refuse these too, but only after the provider
// had changed; asking first keeps a refused request from touching anything.
// A value the row already holds, sent back (an admin form sent whole), is
// no change and is never refused as taken: on an adopted table a legacy
// duplicate may repeat it in another case, and the row could then never
// be changed through such a form.
async function _refuseTaken(
  sql: Sql,
  row: _Row,
  input: UpdateRequest,
): Promise<void> {
  if (
    input.nombre_usuario !== undefined &&
    input.nombre_usuario !== row.nombre_usuario &&
    await _heldByAnother(sql, row.id, "nombre_usuario", input.nombre_usuario)
  ) throw new HttpError("username_exists");
  if (
    input.email !== undefined &&
    input.email !== row.correo &&
    await _heldByAnother(sql, row.id, "correo", input.email)
  ) throw new HttpError("email_exists");
}

// Whether a row other than `id` holds `value` in `column` (compared
// lower-cased, as the unique indexes and the matching rules do).
async function _heldByAnother(
  sql: Sql,
  id: number,
  column: "correo" | "nombre_usuario",
  value: string,
): Promise<boolean> {
  const [{ held }] = await sql<{ held: boolean }[]>`
    select exists (
      select 1 from public.usuarios u
      where lower(u.${sql(column)}) = lower(${value}::text)
        and u.id <> ${id}
    ) as held`;
  return held;
}

// The row's account, and whether it still has to be linked to it. An
// account found by the row's correo counts only when it is proven to own
// that address (`_shared/email_proof.ts`); otherwise changing it would hand the row's
// new password to whoever signed up first with the address: 409.
async function _rowAccount(
  sql: Sql,
  call: CallDeps,
  row: _Row,
  columns: OptionalColumns,
  input: UpdateRequest,
): Promise<{ account: Account | null; link: boolean }> {
  const email = normalizeEmail(row.correo);
  const { byId, byEmail } = await findAccounts(sql, {
    ids: row.auth_user_id ? [row.auth_user_id] : [],
    emails: email ? [email] : [],
  });
  const linked = row.auth_user_id ? byId.get(row.auth_user_id) : undefined;
  if (linked) return { account: linked, link: false };
  const byCorreo = email ? byEmail.get(email) : undefined;
  if (!byCorreo) return { account: null, link: false };
  // An account already linked to another row is that row's, not this one's.
  if (columns.authUserId) {
    const owner = (await linkedRows(sql, [byCorreo.id])).get(byCorreo.id);
    if (owner !== undefined && owner !== row.id) {
      return { account: null, link: false };
    }
  }
  const atAuth = input.email !== undefined || input.password !== undefined;
  if (!(await linkableAddress(byCorreo, call.autoconfirm))) {
    if (!atAuth) return { account: null, link: false };
    throw new HttpError("identity_unverified");
  }
  // Another row with the same correo (a legacy duplicate, in any case)
  // stands for the same account: changing its email or password for this
  // row would move the other row's owner too, with no trace on that row.
  if (atAuth && await _heldByAnother(sql, row.id, "correo", email!)) {
    throw new HttpError("shared_account");
  }
  return { account: byCorreo, link: columns.authUserId };
}

// Listed addresses are the operator's (`_shared/admin.ts` AdminGround): an
// administrator by rol alone may not put one on an account (an email
// change carries the account's mail proof over to it; a created account is
// confirmed) nor change the email or password of an account that holds
// one. Either would hand it ADMIN_EMAILS rights that outlive its rol, and
// lock the address's owner out. A username change stays allowed.
function _refuseListed(
  actor: Actor,
  adminEmails: ReadonlySet<string>,
  plan: _Plan | null,
): void {
  if (actor.operator || plan === null) return;
  const touched = plan.kind === "create"
    ? [plan.email]
    : [plan.email, plan.account.email];
  if (touched.some((email) => isListedAdminEmail(email, adminEmails))) {
    throw new HttpError("listed_account");
  }
}

/** What the call is to do at Auth, once every check has passed. */
type _Plan =
  | {
    kind: "update";
    account: Account;
    email: string | null;
    password: string | null;
  }
  | { kind: "create"; email: string; password: string; requestId: string };

// Checks what Auth would refuse, before anything is recorded or sent.
async function _providerPlan(
  sql: Sql,
  row: _Row,
  account: Account | null,
  input: UpdateRequest,
): Promise<_Plan | null> {
  const { email, password } = input;
  if (email === undefined && password === undefined) return null;
  if (account) {
    // The account's own email again (an admin form sent as it is) is no
    // change to make at Auth.
    const newEmail = email !== undefined && email !== account.email
      ? email
      : null;
    if (newEmail === null && password === undefined) return null;
    return {
      kind: "update",
      account,
      email: newEmail,
      password: password ?? null,
    };
  }
  const newEmail = email ?? normalizeEmail(row.correo);
  if (newEmail !== null && !isRequestEmail(newEmail)) {
    // Only the row's correo can be one: Auth would refuse it (a 502).
    throw validationFailed([{
      path: ["email"],
      message:
        "Required: the row has no provider account, and its correo is not an address Supabase Auth accepts as it stands (spaces around it, or its format) to create one with",
    }]);
  }
  if (password === undefined || newEmail === null) {
    throw validationFailed([
      password === undefined
        ? {
          path: ["password"],
          message:
            "Required: the row has no provider account, and one is created with this password",
        }
        : {
          path: ["email"],
          message:
            "Required: the row has no provider account and no correo to create one with",
        },
    ]);
  }
  // Auth would refuse it too; asking first also means that an account
  // found under this email after a lost answer can only be the one created.
  const { byEmail } = await findAccounts(sql, { emails: [newEmail] });
  if (byEmail.has(newEmail)) throw new HttpError("email_exists");
  return {
    kind: "create",
    email: newEmail,
    password,
    requestId: crypto.randomUUID(),
  };
}

// Records the intent before Auth is called. Its id is the call's.
async function _announce(
  sql: Sql,
  lease: Lease,
  actor: Actor,
  row: _Row,
  plan: _Plan,
  rowSet: RowSet,
): Promise<string> {
  const id = crypto.randomUUID();
  await recordIntent(sql, lease, {
    id,
    targetId: row.id,
    kind: plan.kind,
    accountId: plan.kind === "update" ? plan.account.id : null,
    createdBy: plan.kind === "create" ? plan.requestId : null,
    fields: plan.kind === "create" ? ["email", "password"] : [
      ...(plan.email !== null ? ["email" as const] : []),
      ...(plan.password !== null ? ["password" as const] : []),
    ],
    oldEmail: plan.kind === "update" ? plan.account.email : null,
    newEmail: plan.email,
    rowSet,
    rowBefore: Object.fromEntries(
      Object.keys(rowSet).map((k) => [k, row[k as keyof RowSet] ?? null]),
    ),
    actor,
  });
  return id;
}

// Makes the Auth call of the plan, under a lease renewed first.
async function _applyProvider(
  scope: Scope,
  plan: _Plan,
): Promise<ProviderChange> {
  try {
    await renewLease(scope.sql, scope.lease);
  } catch (error) {
    // Auth was not called: nothing for anyone to settle later.
    await _settleUnchanged(scope);
    throw error;
  }
  const { admin } = scope;
  if (plan.kind === "update") {
    const { email, password } = plan;
    const change: ProviderChange = {
      kind: "updated",
      account: plan.account,
      email,
      password: password !== null,
    };
    const { error } = await admin.updateUserById(plan.account.id, {
      ...(email !== null ? emailAttributes(plan.account, email, email) : {}),
      ...(password !== null ? { password } : {}),
    });
    if (error) throw await _failure(scope, change, error);
    return change;
  }
  const { data, error } = await admin.createUser({
    email: plan.email,
    password: plan.password,
    email_confirm: true,
    app_metadata: {
      [CREATED_BY_KEY]: plan.requestId,
      [SET_BY_AUTH_SYNC]: plan.email,
    },
  });
  const change: ProviderChange = {
    kind: "created",
    accountId: data.user?.id ?? null,
    email: plan.email,
    requestId: plan.requestId,
  };
  if (error) throw await _failure(scope, change, error);
  return change;
}

// What to answer after Auth's error on `change`: a lost answer is read
// back (and undone where it can be) first; a refusal changed nothing.
async function _failure(
  scope: Scope,
  change: ProviderChange,
  error: AuthError,
): Promise<HttpError> {
  if (answerLost(error)) {
    return lostAnswerError(await settleLostAnswer(scope, change), error);
  }
  await _settleUnchanged(scope);
  return _providerError(error);
}

// Auth refused or was never called: the intent is settled `unchanged`. The
// caller is already answering with an error; an intent left open by a
// failure here is settled by the row's next holder the same way.
async function _settleUnchanged(scope: Scope): Promise<void> {
  try {
    await settleIntent(scope.sql, scope.intentId, "unchanged", scope.lease);
  } catch (error) {
    logEvent("warn", "Intent not settled", {
      fn: "auth-sync",
      intent_id: scope.intentId,
      cause: errorText(error),
    });
  }
}

function _providerError(error: AuthError): HttpError {
  if (isProviderDown(error)) return providerUnavailable(error);
  if (error.code === "email_exists") {
    return new HttpError("email_exists", { cause: error });
  }
  if (error.code === "weak_password") {
    // Auth's reasons (`length`, `characters`, `pwned`), for a client's hints.
    return new HttpError("weak_password", {
      extra: {
        error: redact(error.message),
        reasons: isAuthWeakPasswordError(error) ? error.reasons : [],
      },
      cause: error,
    });
  }
  return new HttpError("idp_error", {
    extra: { error: redact(error.message), error_code: error.code ?? null },
    cause: error,
  });
}

async function _writeRow(
  sql: Sql,
  actor: Actor,
  row: _Row,
  columns: OptionalColumns,
  plan: {
    set: RowSet;
    changed: Field[];
    lease: Lease;
    intentId: string | null;
  },
): Promise<Omit<_Row, "auth_user_id"> & { auth_user_id: string | null }> {
  const set: Record<string, string> = { ...plan.set };
  const authUserId = columns.authUserId
    ? sql`u.auth_user_id::text`
    : sql`null::text`;
  return await sql.begin(async (tx) => {
    await boundTransaction(tx);
    // A write takes the row; a call that writes nothing to it (a password
    // only) only keeps it from being deleted or re-keyed, and waits for
    // none of the app's own updates.
    const [locked] = await tx<{ auth_user_id: string | null }[]>`
      select ${authUserId} as auth_user_id
      from public.usuarios u
      where u.id = ${row.id}
      ${Object.keys(set).length > 0 ? tx`for update` : tx`for key share`}
    `;
    // The lease keeps other updates out, but not a sync or another writer.
    if (!locked) throw new HttpError("target_not_found");
    if (locked.auth_user_id !== row.auth_user_id) {
      throw new Error(`Row "${row.id}" was linked meanwhile`);
    }
    await assertLeaseHeld(tx, plan.lease);
    const rows = Object.keys(set).length > 0
      ? await tx<(Omit<_Row, "id"> & { id: string })[]>`
          update public.usuarios u set ${tx(set)}
          where u.id = ${row.id}
          returning u.id, u.correo, u.nombre_usuario,
                    ${authUserId} as auth_user_id, u.rol`
      : await tx<(Omit<_Row, "id"> & { id: string })[]>`
          select u.id, u.correo, u.nombre_usuario,
                 ${authUserId} as auth_user_id, u.rol
          from public.usuarios u where u.id = ${row.id}`;
    // Settled in the same transaction: a reader of the intent knows whether
    // this COMMIT landed, even when its answer is lost.
    if (
      plan.intentId !== null &&
      !(await settleIntent(tx, plan.intentId, "applied", plan.lease))
    ) throw new Error(`Intent "${plan.intentId}" was settled meanwhile`);
    await writeAudit(tx, {
      actor,
      action: "update",
      targetId: row.id,
      fields: plan.changed,
      outcome: "ok",
    });
    return { ...rows[0], id: Number(rows[0].id) };
  });
}

// What the call changes, in the order of `changed`: a field sent with the
// value the row (and, for the email, the account) already holds is none
// (an admin form sent back whole). A password always is: it cannot be read.
function _changes(
  input: UpdateRequest,
  row: _Row,
  plan: _Plan | null,
): Field[] {
  const atAuth = plan !== null && plan.email !== null;
  return _requested(input).filter((field) =>
    field === "password" ||
    (field === "email"
      ? atAuth || input.email !== row.correo
      : input.nombre_usuario !== row.nombre_usuario)
  );
}

function _requested(input: UpdateRequest): Field[] {
  const fields: Field[] = [];
  if (input.email !== undefined) fields.push("email");
  if (input.password !== undefined) fields.push("password");
  if (input.nombre_usuario !== undefined) fields.push("nombre_usuario");
  return fields;
}

// What the database said, before Auth changed anything (afterwards the
// answers are the undo's own): the unique indexes on lower(correo) and
// lower(nombre_usuario) still have the last word when another writer got
// there between check and write; a lock or statement timeout is 503
// db_timeout, a serialization failure or deadlock 503 db_conflict; a value the row refuses (class 22 data exceptions, other
// integrity constraints, an app trigger's RAISE) is 422 row_refused.
function _asHttpError(error: unknown): HttpError {
  if (error instanceof HttpError) return error;
  const missing = asMigrationMissing(error);
  if (missing) return missing;
  const busy = asDbBusy(error);
  if (busy) return busy;
  const taken = _taken(error);
  if (taken) return taken;
  if (
    error instanceof postgres.PostgresError &&
    /^(22|23)|^P0001$/.test(error.code)
  ) {
    return new HttpError("row_refused", {
      extra: { error: publicDbError(error) },
      cause: error,
    });
  }
  return _syncFailed(error);
}

// 500 sync_failed, naming the database's condition only.
function _syncFailed(error: unknown): HttpError {
  return new HttpError("sync_failed", {
    extra: { error: publicDbError(error) },
    cause: error,
  });
}

// A unique index of correo or nombre_usuario refused the value: 409.
function _taken(error: unknown): HttpError | null {
  if (!(error instanceof postgres.PostgresError) || error.code !== "23505") {
    return null;
  }
  const constraint = error.constraint_name ?? "";
  if (constraint.includes("nombre_usuario")) {
    return new HttpError("username_exists", { cause: error });
  }
  if (constraint.includes("correo")) {
    return new HttpError("email_exists", { cause: error });
  }
  return null;
}
