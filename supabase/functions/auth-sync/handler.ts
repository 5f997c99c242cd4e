/**
 * `auth-sync`: administrators keep `usuarios` rows and their Supabase Auth
 * accounts in step (docs/api.md "auth-sync").
 *
 * Checks, in this order: method and environment ({@linkcode createFunction}),
 * `Authorization`, the token, administrator rights, and only then the body,
 * so that nobody without rights learns anything from validation answers. A
 * trusted server that presents the project's secret (or service role) key
 * ({@linkcode serverCaller}) needs no token and no rights, and is audited as
 * such.
 *
 * @module
 */
import { bearerToken, serverCaller } from "../_shared/auth.ts";
import {
  type AdminGround,
  adminPolicy,
  requireAdmin,
} from "../_shared/admin.ts";
import type { Sql } from "../_shared/db.ts";
import type { FunctionDeps } from "../_shared/deps.ts";
import type { EnvSource } from "../_shared/env.ts";
import { HttpError, json } from "../_shared/errors.ts";
import {
  createFunction,
  readBodyText,
  readJsonBody,
  type RequestContext,
} from "../_shared/http.ts";
import { noteOnRequest } from "../_shared/log.ts";
import { type Actor, auditRefusal, userActor } from "./audit.ts";
import { findUsuario, matchRules } from "../_shared/match_user.ts";
import { reconcile } from "./reconcile.ts";
import { callDeps } from "./provider.ts";
import { parseRequest } from "./schema.ts";
import { syncUsuarios } from "./sync.ts";
import { updateUsuario } from "./update.ts";

/**
 * Serves one auth-sync call (method and environment already checked).
 *
 * - `{"action":"update","id":42,"email"?,"password"?,"nombre_usuario"?}`:
 *   200 `{ok, user, changed, identity_created}`;
 * - `{"action":"sync","ids"?,"after_id"?,"limit"?,"dry_run"?}`:
 *   200 `{ok, results, summary, next_after_id}`;
 * - `{"action":"reconcile","after_id"?,"limit"?,"dry_run"?}`:
 *   200 `{ok, settled, mismatches, next_after_id}`.
 */
export async function authSync(
  req: Request,
  ctx: RequestContext,
  deps: FunctionDeps,
): Promise<Response> {
  // Not tied to the request's signal: once Auth has changed an account, the
  // row write, the intent, the audit row and the lease release must follow
  // whether or not the caller is still there (a closed tab would otherwise
  // leave Auth and the row apart). Statements stay bounded by their timeout.
  const sql = deps.database(ctx.env);
  const server = await serverCaller(
    req,
    ctx.env,
    (key) => deps.keyRefusal(key, ctx.env),
  );
  if (server) {
    const actor: Actor = {
      kind: server.via,
      id: null,
      email: null,
      keyName: server.keyName,
      operator: true,
    };
    return await _serve(req, ctx, sql, deps, actor);
  }
  const identity = await deps.authenticate(bearerToken(req), ctx.env);
  // The account's id only, on the request's line: function logs are
  // readable by every member of the project, and the audit row (service
  // role only) keeps the email.
  noteOnRequest({ actor_auth_user_id: identity.id });
  const row = await findUsuario(sql, identity, matchRules(ctx.env));
  let ground: AdminGround;
  try {
    ground = await requireAdmin(
      identity,
      row,
      adminPolicy(ctx.env, deps, sql),
    );
  } catch (error) {
    const code = error instanceof HttpError ? error.code : null;
    // A caller without rights, with a row (403) or without (404: any fresh
    // sign-up). Who tried what, from the body nobody else reads: fields'
    // names only.
    if (code === "admin_required" || code === "user_not_found") {
      await auditRefusal(
        sql,
        identity,
        await readBodyText(req).catch(() => ""),
        code,
      );
    }
    throw error;
  }
  return await _serve(req, ctx, sql, deps, userActor(identity, ground));
}

// The body, read only once the caller has the right to be answered.
async function _serve(
  req: Request,
  ctx: RequestContext,
  sql: Sql,
  deps: FunctionDeps,
  actor: Actor,
): Promise<Response> {
  const body = parseRequest(await readJsonBody(req));
  const call = callDeps(ctx.env, deps);
  if (body.action === "update") {
    const result = await updateUsuario(sql, call, actor, body);
    return json({ ok: true, ...result });
  }
  if (body.action === "reconcile") {
    const result = await reconcile(sql, body);
    return json({ ok: true, ...result });
  }
  const result = await syncUsuarios(sql, call, actor, body);
  return json({ ok: true, ...result });
}

/**
 * The handler `Deno.serve` takes, over the environment `env` and the
 * dependencies `deps` (the pool, Auth's user and admin APIs, its settings,
 * the clock): `index.ts` wires the real ones, the local gateway and tests
 * their own.
 *
 * @example
 * ```ts
 * Deno.serve(createAuthSync(denoEnv, createDeps()));
 * ```
 */
export function createAuthSync(
  env: EnvSource,
  deps: FunctionDeps,
): (req: Request) => Promise<Response> {
  // Each refusal at warn: who tried an administrator's call.
  return createFunction(
    "auth-sync",
    env,
    (req, ctx) => authSync(req, ctx, deps),
    { refusalsAt: "warn" },
  );
}
