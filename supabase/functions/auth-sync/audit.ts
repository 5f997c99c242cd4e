/**
 * The audit trail of auth-sync (`public.auth_sync_audit`): who changed which
 * row's which fields, and how it ended. Field names only, never values, so
 * no password can end up here.
 *
 * @module
 */
import type { AdminGround } from "../_shared/admin.ts";
import type { Identity } from "../_shared/auth.ts";
import type postgres from "postgres";
import {
  type ErrorCode,
  HttpError,
  type HttpErrorOptions,
} from "../_shared/errors.ts";
import { pgArray } from "../_shared/db.ts";
import { errorText, logEvent } from "../_shared/log.ts";

/** How a change ended. */
export type Outcome = "ok" | "failed" | "partial_failure";

/** A field auth-sync changes. */
export type Field = "email" | "password" | "nombre_usuario" | "auth_user_id";

/**
 * Who made a call, as audit rows and intents record it: an administrator
 * (`user`), or a trusted server that presented the project's secret key
 * (`secret_key`) or legacy service role key (`service_role_key`), which has
 * no identity id or email.
 */
export interface AuditActor {
  readonly kind: "user" | "secret_key" | "service_role_key";
  /** Identity id; `null` for a server. */
  readonly id: string | null;
  /** Identity email; `null` for a server or an identity without one. */
  readonly email: string | null;
  /**
   * A server's key name (`ServerCaller.keyName`), never the key; `null`
   * for a user.
   */
  readonly keyName: string | null;
}

/** Who makes a call, and with which rights. */
export interface Actor extends AuditActor {
  /**
   * Whether the caller speaks for the operator: a server, or an
   * administrator by `ADMIN_EMAILS` (`_shared/admin.ts` `AdminGround`).
   */
  readonly operator: boolean;
}

/**
 * The actor of a call by an authenticated administrator, whose rights come
 * from `ground`.
 *
 * @example
 * ```ts
 * userActor({ id, email: "ana@example.com", emailConfirmed: true }, "rol").operator; // false
 * ```
 */
export function userActor(identity: Identity, ground: AdminGround): Actor {
  return {
    kind: "user",
    id: identity.id,
    email: identity.email,
    keyName: null,
    operator: ground === "listed",
  };
}

/** One audit row. */
export interface AuditEntry {
  /** Who called. */
  readonly actor: AuditActor;
  /** What was done or tried; `unknown` for a refused call whose body names no action. */
  readonly action: "update" | "sync" | "unknown";
  /** `usuarios.id`; `null` when the failure concerns no one row. */
  readonly targetId: number | null;
  readonly fields: readonly Field[];
  readonly outcome: Outcome;
  /** Error code of a failure; `null` on success. */
  readonly detail?: string | null;
}

/** What the audit row of a failure says, when its code alone would not. */
export interface AuditNote {
  readonly outcome: Exclude<Outcome, "ok">;
  /** A short code, e.g. `idp_unavailable_undone`; never a value. */
  readonly detail: string;
}

/**
 * An {@linkcode HttpError} whose audit row says more than its code: e.g. a
 * 503 after which the provider had changed the account and was set back.
 * Answered like any other `HttpError`.
 *
 * @example
 * ```ts
 * throw new AuditedError("idp_unavailable", { outcome: "failed", detail: "idp_unavailable_undone" });
 * ```
 */
export class AuditedError extends HttpError {
  /**
   * Outcome and detail of the audit row; `"recorded"` when the call's audit
   * row is already written (by another call that settled its intent).
   */
  readonly audit: AuditNote | "recorded";

  constructor(
    code: ErrorCode,
    audit: AuditNote | "recorded",
    options?: HttpErrorOptions,
  ) {
    super(code, options);
    this.audit = audit;
  }
}

/**
 * Writes one audit row. Pass the transaction that makes the change, so the
 * row exists exactly when the change does.
 *
 * @example
 * ```ts
 * await writeAudit(tx, { actor, action: "update", targetId: 42, fields: ["email"], outcome: "ok" });
 * ```
 */
export async function writeAudit(
  sql: postgres.ISql,
  entry: AuditEntry,
): Promise<void> {
  await sql`
    insert into public.auth_sync_audit
      (actor_auth_user_id, actor_email, actor_kind, actor_key, action,
       target_id, fields, outcome, detail)
    values (${entry.actor.id}::uuid, ${entry.actor.email},
            ${entry.actor.kind}, ${entry.actor.keyName}, ${entry.action},
            ${entry.targetId},
            ${pgArray(entry.fields)}::text[], ${entry.outcome},
            ${entry.detail ?? null})
  `;
}

/**
 * Writes the audit row of a failure. The caller is already answering with
 * an error, so a database that also refuses this row is logged, not thrown.
 */
export async function auditFailure(
  sql: postgres.ISql,
  entry: AuditEntry,
): Promise<void> {
  try {
    await writeAudit(sql, entry);
  } catch (error) {
    logEvent("error", "Audit row not written", {
      fn: "auth-sync",
      action: entry.action,
      target_id: entry.targetId,
      outcome: entry.outcome,
      detail: entry.detail ?? undefined,
      cause: errorText(error),
    });
  }
}

/**
 * Distinct (action, target) rows one actor's refusals may add in a minute;
 * beyond them, its refusals that minute are counted on one more row
 * (action `unknown`, no target). So a caller without rights adds at most
 * `REFUSAL_ROWS_PER_MINUTE + 1` rows a minute, however often it calls.
 */
export const REFUSAL_ROWS_PER_MINUTE = 5;

/**
 * Records a call of a signed-in caller refused for lack of rights, `code`
 * `admin_required` (403, a row without rights) or `user_not_found` (404, no
 * row): who called, the action and row it named, and the names of the
 * fields it would have changed, read leniently from the body (which is not
 * validated for a caller without rights). Never a value. Refusals are
 * counted, not appended: one row per actor, action, target and minute,
 * whose `attempts` grows and whose `detail` is the code of its first
 * refusal ({@linkcode REFUSAL_ROWS_PER_MINUTE}).
 *
 * @example
 * ```ts
 * await auditRefusal(sql, identity, '{"action":"update","id":1,"password":"x"}', "admin_required");
 * // action "update", target 1, fields ["password"], outcome failed, detail admin_required
 * ```
 */
export async function auditRefusal(
  sql: postgres.ISql,
  actor: Identity,
  bodyText: string,
  code: "admin_required" | "user_not_found",
): Promise<void> {
  const { action, targetId, fields } = _namedInBody(bodyText);
  const named = pgArray(fields);
  try {
    await sql`
      with minute as (select date_trunc('minute', now()) as m),
      others as (
        select count(*) as n
        from public.auth_sync_audit a, minute
        where a.refused_minute = minute.m
          and a.actor_auth_user_id = ${actor.id}::uuid
          and (a.action, coalesce(a.target_id, 0))
            <> (${action}::text, coalesce(${targetId}::bigint, 0))
      ),
      entry as (
        select
          case when crowded then 'unknown' else ${action}::text end as action,
          case when crowded then null else ${targetId}::bigint end as target_id,
          case when crowded then '{}'::text[] else ${named}::text[] end
            as fields
        from (select n >= ${REFUSAL_ROWS_PER_MINUTE} as crowded from others) o
      )
      insert into public.auth_sync_audit as t
        (actor_auth_user_id, actor_email, action, target_id, fields, outcome,
         detail, refused_minute)
      select ${actor.id}::uuid, ${actor.email}, entry.action, entry.target_id,
             entry.fields, 'failed', ${code}::text, minute.m
      from entry, minute
      on conflict
        (actor_auth_user_id, action, (coalesce(target_id, 0)), refused_minute)
        where refused_minute is not null
      do update set
        attempts = t.attempts + 1,
        fields = array(
          select distinct f from unnest(t.fields || excluded.fields) f
          order by f
        )
    `;
  } catch (error) {
    // The caller is already answered 403/404; a refused audit row is logged.
    logEvent("error", "Audit row not written", {
      fn: "auth-sync",
      action,
      target_id: targetId,
      outcome: "failed",
      detail: code,
      cause: errorText(error),
    });
  }
}

// What a refused body named: its action, row and the fields it would change.
function _namedInBody(
  bodyText: string,
): { action: AuditEntry["action"]; targetId: number | null; fields: Field[] } {
  let body: Record<string, unknown> = {};
  try {
    const parsed = JSON.parse(bodyText);
    if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) {
      body = parsed;
    }
  } catch {
    // Not JSON: the row says only who tried.
  }
  const action = body.action === "update" || body.action === "sync"
    ? body.action
    : "unknown";
  const targetId = action === "update" && Number.isSafeInteger(body.id) &&
      (body.id as number) > 0
    ? body.id as number
    : null;
  const fields: Field[] = action === "sync"
    ? ["auth_user_id"]
    : (["email", "password", "nombre_usuario"] as const).filter((f) =>
      f in body
    );
  return { action, targetId, fields };
}
