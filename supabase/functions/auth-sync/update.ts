/**
 * auth-sync `update`: changes the email, password and username of one
 * `usuarios` row and of its Supabase Auth account, kept in step.
 *
 * Order of work, one row at a time under its lease ({@linkcode withLease}):
 *
 * 1. read the row (404 `target_not_found`);
 * 2. refuse a username or email another row or account already has (409),
 *    before anything changes;
 * 3. find the row's account: its `auth_user_id` if that account exists,
 *    else the account of its `correo` if no other row is linked to it (the
 *    row is then linked), else none;
 * 4. change the account through the Auth admin API, or create one when the
 *    row has none and an email or password is to be set;
 * 5. write the row and the audit row in one short transaction that takes the
 *    row lock.
 *
 * A provider failure in step 4 changes nothing. When the call's answer is
 * lost (dropped connection, timeout, 5xx: {@linkcode answerLost}), Auth may
 * have applied it all the same, so the account is read back: a changed email
 * is set back and a created account deleted (503 `idp_unavailable`), and
 * what cannot be undone or known (a password, a failed undo, a failed
 * read-back) is answered 500 `partial_failure` ({@linkcode lostAnswerError}).
 * A database failure in step 5 undoes step 4 the same way where the Auth API
 * can (an email is set back, a created account deleted: 500 `sync_failed`)
 * and is answered `partial_failure` where it cannot (a password).
 *
 * @module
 */
import type { AuthError } from "@supabase/supabase-js";
import postgres from "postgres";
import {
  type Identity,
  isProviderDown,
  providerUnavailable,
} from "../_shared/auth.ts";
import { type OptionalColumns, withColumns } from "../_shared/columns.ts";
import { publicDbError, type Sql } from "../_shared/db.ts";
import type { FunctionEnv } from "../_shared/env.ts";
import { HttpError } from "../_shared/errors.ts";
import { errorText, logEvent, redact } from "../_shared/log.ts";
import {
  type Account,
  CREATED_BY_KEY,
  findAccounts,
  findCreatedAccount,
  linkedRows,
  normalizeEmail,
} from "./accounts.ts";
import { autoconfirms, ownsEmail } from "./ownership.ts";
import { AuditedError, auditFailure, type Field, writeAudit } from "./audit.ts";
import {
  assertLeaseHeld,
  boundTransaction,
  type Lease,
  withLease,
} from "./lease.ts";
import {
  adminApi,
  answerLost,
  type LostAnswer,
  lostAnswerError,
  type ProviderField,
} from "./provider.ts";
import { type UpdateRequest, validationFailed } from "./schema.ts";

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
  /** Fields changed, in this order: email, password, nombre_usuario, auth_user_id. */
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
 * const result = await updateUsuario(sql, env, actor, { action: "update", id: 42, email: "new@example.com" });
 * ```
 */
export async function updateUsuario(
  sql: Sql,
  env: FunctionEnv,
  actor: Identity,
  input: UpdateRequest,
): Promise<UpdateResult> {
  try {
    return await withLease(
      sql,
      input.id,
      (lease) =>
        withColumns(
          sql,
          (columns) => _update(sql, env, actor, input, columns, lease),
        ),
    );
  } catch (error) {
    const failure = _asHttpError(error);
    const note = failure instanceof AuditedError ? failure.audit : {
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

/** What was done at the provider, to undo it if the row cannot follow. */
type _ProviderChange =
  | { kind: "created"; accountId: string }
  | {
    kind: "updated";
    account: Account;
    email: boolean;
    password: boolean;
  };

async function _update(
  sql: Sql,
  env: FunctionEnv,
  actor: Identity,
  input: UpdateRequest,
  columns: OptionalColumns,
  lease: Lease,
): Promise<UpdateResult> {
  const row = await _readRow(sql, input.id, columns);
  if (!row) throw new HttpError("target_not_found");
  await _refuseTaken(sql, row, input);
  const { account, link } = await _rowAccount(sql, env, row, columns, input);
  if (input.email !== undefined) {
    const { byEmail } = await findAccounts(sql, { emails: [input.email] });
    const owner = byEmail.get(input.email);
    if (owner && owner.id !== account?.id) {
      throw new HttpError("email_exists");
    }
  }
  const change = await _changeProvider(sql, env, row, account, input);
  const accountId = change?.kind === "created"
    ? change.accountId
    : account?.id ?? null;
  const changed = _requested(input);
  const relink = columns.authUserId && accountId !== null &&
    (link || change?.kind === "created");
  if (relink) changed.push("auth_user_id");
  try {
    const user = await _writeRow(sql, actor, row, input, columns, {
      accountId: relink ? accountId : null,
      changed,
      lease,
    });
    return {
      user: { ...user, auth_user_id: user.auth_user_id ?? accountId },
      changed,
      identity_created: change?.kind === "created",
    };
  } catch (error) {
    if (change) throw await _undo(sql, env, change, error);
    throw error;
  }
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
async function _refuseTaken(
  sql: Sql,
  row: _Row,
  input: UpdateRequest,
): Promise<void> {
  const taken = (column: "correo" | "nombre_usuario", value: string) =>
    sql`
      select exists (
        select 1 from public.usuarios u
        where lower(u.${sql(column)}) = lower(${value}::text)
          and u.id <> ${row.id}
      ) as taken
    `.then(([r]) => r.taken as boolean);
  if (
    input.nombre_usuario !== undefined &&
    await taken("nombre_usuario", input.nombre_usuario)
  ) throw new HttpError("username_exists");
  if (input.email !== undefined && await taken("correo", input.email)) {
    throw new HttpError("email_exists");
  }
}

// The row's account, and whether it still has to be linked to it. An
// account found by the row's correo counts only when it is proven to own
// that address (ownership.ts); otherwise changing it would hand the row's
// new password to whoever signed up first with the address: 409.
async function _rowAccount(
  sql: Sql,
  env: FunctionEnv,
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
  if (!ownsEmail(byCorreo, await autoconfirms(env))) {
    if (input.email === undefined && input.password === undefined) {
      return { account: null, link: false };
    }
    throw new HttpError("identity_unverified");
  }
  return { account: byCorreo, link: columns.authUserId };
}

async function _changeProvider(
  sql: Sql,
  env: FunctionEnv,
  row: _Row,
  account: Account | null,
  input: UpdateRequest,
): Promise<_ProviderChange | null> {
  const { email, password } = input;
  if (email === undefined && password === undefined) return null;
  const admin = adminApi(env);
  if (account) {
    const { error } = await admin.updateUserById(account.id, {
      ...(email !== undefined ? { email, email_confirm: true } : {}),
      ...(password !== undefined ? { password } : {}),
    });
    if (error && answerLost(error)) {
      throw lostAnswerError(
        await _settleLostUpdate(sql, env, account, input),
        error,
      );
    }
    if (error) throw _providerError(error);
    return {
      kind: "updated",
      account,
      email: email !== undefined,
      password: password !== undefined,
    };
  }
  const newEmail = email ?? normalizeEmail(row.correo);
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
  const requestId = crypto.randomUUID();
  const { data, error } = await admin.createUser({
    email: newEmail,
    password,
    email_confirm: true,
    app_metadata: { [CREATED_BY_KEY]: requestId },
  });
  if (error && answerLost(error)) {
    throw lostAnswerError(
      await _settleLostCreate(sql, env, newEmail, requestId),
      error,
    );
  }
  if (error) throw _providerError(error);
  return { kind: "created", accountId: data.user.id };
}

// An account update whose answer was lost: reads the account back, sets a
// changed email back, and says what is left. A password can be neither read
// back nor set back, so one that was sent counts as changed: the request
// left (answerLost excludes one that never did) and may have been applied.
//
// The read-back sees what Auth has committed by then. A request still held
// up inside Auth past the timeout could in principle land later; nothing
// here can wait for that, and the lease keeps this row's next update out
// only for its own length.
async function _settleLostUpdate(
  sql: Sql,
  env: FunctionEnv,
  account: Account,
  input: UpdateRequest,
): Promise<LostAnswer> {
  const sent: ProviderField[] = [];
  if (input.email !== undefined) sent.push("email");
  if (input.password !== undefined) sent.push("password");
  let now: Account | undefined;
  try {
    now = (await findAccounts(sql, { ids: [account.id] })).byId.get(
      account.id,
    );
  } catch (error) {
    _logLost("Account not read back after a lost answer", error);
    return { state: "unknown", fields: sent };
  }
  const emailApplied = input.email !== undefined && now !== undefined &&
    input.email !== account.email && now.email === input.email;
  if (
    input.email !== undefined && !emailApplied &&
    await _heldByAnother(sql, input.email, account.id)
  ) return { state: "email_taken" };
  const left: ProviderField[] = [];
  if (emailApplied && !(await _restoreEmail(sql, env, account))) {
    left.push("email");
  }
  if (input.password !== undefined) left.push("password");
  if (left.length > 0) return { state: "changed", fields: left };
  return { state: emailApplied ? "undone" : "unchanged" };
}

// An account creation whose answer was lost: the account this call
// created, if Auth applied it, is the one carrying its request id
// (findCreatedAccount); it is deleted again. Any other account of that
// email (a stranger's sign-up meanwhile) is left alone.
async function _settleLostCreate(
  sql: Sql,
  env: FunctionEnv,
  email: string,
  requestId: string,
): Promise<LostAnswer> {
  let created: string | null;
  try {
    created = await findCreatedAccount(sql, email, requestId);
  } catch (error) {
    _logLost("Account not read back after a lost answer", error);
    return { state: "unknown", fields: ["email", "password"] };
  }
  if (!created) return { state: "unchanged" };
  if (await _deleteAccount(sql, env, created)) return { state: "undone" };
  return { state: "changed", fields: ["email", "password"] };
}

// Sets an account's email back to what it was. When the answer to that is
// lost too, the account is read back once more to see whether it worked.
async function _restoreEmail(
  sql: Sql,
  env: FunctionEnv,
  account: Account,
): Promise<boolean> {
  const previous = account.email;
  if (previous === null) return false;
  const { error } = await adminApi(env).updateUserById(account.id, {
    email: previous,
    ...(account.emailConfirmed ? { email_confirm: true } : {}),
  });
  if (!error) return true;
  _logLost("Email not set back", error);
  if (!answerLost(error)) return false;
  try {
    const { byId } = await findAccounts(sql, { ids: [account.id] });
    return byId.get(account.id)?.email === previous;
  } catch {
    return false;
  }
}

// Deletes an account auth-sync created; as _restoreEmail, reads back when
// the answer is lost.
async function _deleteAccount(
  sql: Sql,
  env: FunctionEnv,
  accountId: string,
): Promise<boolean> {
  const { error } = await adminApi(env).deleteUser(accountId);
  if (!error) return true;
  _logLost("Created account not deleted", error);
  if (!answerLost(error)) return false;
  try {
    const { byId } = await findAccounts(sql, { ids: [accountId] });
    return !byId.has(accountId);
  } catch {
    return false;
  }
}

// Whether another account holds `email` now. Auth makes an account change
// in one transaction, so a request whose new email another account holds
// could not commit at all: Auth's 500 was its unique index refusing it (a
// concurrent change to the same email won), not a lost answer.
async function _heldByAnother(
  sql: Sql,
  email: string,
  accountId: string,
): Promise<boolean> {
  const address = normalizeEmail(email);
  if (address === null) return false;
  try {
    const holder = (await findAccounts(sql, { emails: [address] })).byEmail
      .get(address);
    return holder !== undefined && holder.id !== accountId;
  } catch (error) {
    _logLost("Email holder not read after a lost answer", error);
    return false;
  }
}

function _logLost(message: string, error: unknown): void {
  logEvent("warn", message, { fn: "auth-sync", cause: errorText(error) });
}

function _providerError(error: AuthError): HttpError {
  if (isProviderDown(error)) return providerUnavailable(error);
  if (error.code === "email_exists") {
    return new HttpError("email_exists", { cause: error });
  }
  if (error.code === "weak_password") {
    return new HttpError("weak_password", {
      extra: { error: redact(error.message) },
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
  actor: Identity,
  row: _Row,
  input: UpdateRequest,
  columns: OptionalColumns,
  plan: { accountId: string | null; changed: Field[]; lease: Lease },
): Promise<Omit<_Row, "auth_user_id"> & { auth_user_id: string | null }> {
  const set: Record<string, string> = {};
  if (input.email !== undefined) set.correo = input.email;
  if (input.nombre_usuario !== undefined) {
    set.nombre_usuario = input.nombre_usuario;
  }
  if (plan.accountId !== null) set.auth_user_id = plan.accountId;
  const authUserId = columns.authUserId
    ? sql`u.auth_user_id::text`
    : sql`null::text`;
  return await sql.begin(async (tx) => {
    await boundTransaction(tx);
    const [locked] = await tx<{ auth_user_id: string | null }[]>`
      select ${authUserId} as auth_user_id
      from public.usuarios u
      where u.id = ${row.id}
      for update
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

// Puts the provider back as it was where the Auth API allows, and says what
// to answer: the database's own failure when everything was undone,
// partial_failure with the fields still changed otherwise.
async function _undo(
  sql: Sql,
  env: FunctionEnv,
  change: _ProviderChange,
  dbError: unknown,
): Promise<unknown> {
  const left: Field[] = [];
  if (change.kind === "created") {
    if (!(await _deleteAccount(sql, env, change.accountId))) {
      left.push("email", "password");
    }
  } else {
    if (change.email && !(await _restoreEmail(sql, env, change.account))) {
      left.push("email");
    }
    if (change.password) left.push("password");
  }
  logEvent("warn", "Row update failed after the provider changed", {
    fn: "auth-sync",
    undone: left.length === 0,
    left_changed: left.join(","),
    cause: errorText(dbError),
  });
  if (left.length === 0) return dbError;
  return new HttpError("partial_failure", {
    extra: { provider_changed: left, error: publicDbError(dbError) },
    cause: dbError,
  });
}

function _requested(input: UpdateRequest): Field[] {
  const fields: Field[] = [];
  if (input.email !== undefined) fields.push("email");
  if (input.password !== undefined) fields.push("password");
  if (input.nombre_usuario !== undefined) fields.push("nombre_usuario");
  return fields;
}

// The unique indexes on lower(correo) and lower(nombre_usuario) still have
// the last word when another writer got there between check and write.
function _asHttpError(error: unknown): HttpError {
  if (error instanceof HttpError) return error;
  if (error instanceof postgres.PostgresError && error.code === "23505") {
    const constraint = error.constraint_name ?? "";
    if (constraint.includes("nombre_usuario")) {
      return new HttpError("username_exists", { cause: error });
    }
    if (constraint.includes("correo")) {
      return new HttpError("email_exists", { cause: error });
    }
  }
  return new HttpError("sync_failed", {
    extra: { error: publicDbError(error) },
    cause: error,
  });
}
