/**
 * `presence-ping`: the signed-in user sets their own presence.
 *
 * One path per request: the caller is authenticated (locally against the
 * JWKS, or by Auth: decided in {@linkcode identify}), the database function
 * `presence.record_ping` is called once with what that proved, and its row
 * is the answer. Only a session the statement could not prove goes back to
 * Auth, which then says why (or vouches for the token, and the call is made
 * again with Auth's identity).
 *
 * @module
 */
import { z } from "zod";
import { bearerToken, type Identity } from "../_shared/auth.ts";
import { publicDbError, type Sql } from "../_shared/db.ts";
import { isAuthSchemaError } from "../_shared/db_function.ts";
import type { FunctionDeps } from "../_shared/deps.ts";
import type { EnvSource, FunctionEnv } from "../_shared/env.ts";
import { HttpError, json } from "../_shared/errors.ts";
import {
  createFunction,
  readBodyText,
  type RequestContext,
} from "../_shared/http.ts";
import { errorText, logEvent } from "../_shared/log.ts";
import type { SessionClaims } from "../_shared/jwt_local.ts";
import { matchableEmail } from "../_shared/match_user.ts";
import {
  type PingCaller,
  type PresenceResult,
  type PresenceState,
  recordPing,
} from "./record_ping.ts";

export type {
  PresenceResult,
  PresenceRow,
  PresenceState,
} from "./record_ping.ts";

// A state is trimmed and lower-cased; anything else, or a non-string, is
// "online" (spec 4, rule 3).
const _State = z.unknown().transform((value): PresenceState => {
  const text = typeof value === "string" ? value.trim().toLowerCase() : "";
  return text === "offline" ? "offline" : "online";
});

const _Body = z.object({ state: z.unknown() });

/**
 * The effective state: the body's `state` when the body is a JSON object
 * that has one (not `null`), else the query's, else `online`.
 *
 * @example
 * ```ts
 * effectiveState('{"state":"offline"}', "online"); // "offline"
 * effectiveState("not json", "OFFLINE "); // "offline"
 * ```
 */
export function effectiveState(
  bodyText: string,
  queryState: string | null,
): PresenceState {
  const body = _Body.safeParse(_parseOrUndefined(bodyText));
  const raw = body.success && body.data.state != null
    ? body.data.state
    : queryState;
  return _State.parse(raw);
}

/** The caller as proven so far: locally verified claims, or Auth's identity. */
export type Proof =
  | { readonly via: "local"; readonly claims: SessionClaims }
  | { readonly via: "auth"; readonly identity: Identity };

// How long the fast path stays off after an unreadable auth schema, so
// that pings do not each pay for a failing statement before asking Auth.
const _FAST_PATH_PAUSE_MS = 60_000;

/**
 * The one decision of how a token is proven: locally where
 * `PRESENCE_VERIFY=local`, the fast path is on and the token is one the
 * JWKS can verify; by Auth otherwise.
 */
export async function identify(
  token: string,
  env: FunctionEnv,
  deps: FunctionDeps,
  fastPathOn: boolean,
): Promise<Proof> {
  const claims = env.presenceVerify === "local" && fastPathOn
    ? await deps.verifyLocally(token, env)
    : null;
  return claims
    ? { via: "local", claims }
    : { via: "auth", identity: await deps.authenticate(token, env) };
}

/**
 * The handler `Deno.serve` takes, over the environment `env` and the
 * dependencies `deps`: `index.ts` wires the real ones, the local gateway
 * and tests their own. The fast path's pause lives in this handler, not
 * the module.
 *
 * @example
 * ```ts
 * Deno.serve(createPresencePing(denoEnv, createDeps()));
 * ```
 */
export function createPresencePing(
  env: EnvSource,
  deps: FunctionDeps,
): (req: Request) => Promise<Response> {
  let fastPathOffUntil = 0;
  const schemaErrorsLogged = new Set<string>();

  // One call of record_ping for what was proven; null when the fast path's
  // read of the auth schema failed (then paused, logged once per SQLSTATE).
  async function record(
    sql: Sql,
    proof: Proof,
    state: PresenceState,
    env: FunctionEnv,
  ): Promise<PresenceResult | null> {
    const caller: PingCaller = proof.via === "local"
      ? {
        userId: proof.claims.sub,
        sessionId: proof.claims.sessionId,
        email: null,
      }
      : {
        userId: proof.identity.id,
        sessionId: null,
        email: matchableEmail(proof.identity),
      };
    try {
      return await recordPing(sql, caller, state, {
        usernameDomains: env.usernameMatchDomains,
        minWriteIntervalS: env.presenceMinWriteIntervalS,
      });
    } catch (cause) {
      if (cause instanceof HttpError) throw cause;
      // An unreadable auth schema (record_ping's session proof): the fast
      // path steps aside and Auth decides.
      if (proof.via === "local" && isAuthSchemaError(cause)) {
        fastPathOffUntil = deps.now() + _FAST_PATH_PAUSE_MS;
        if (!schemaErrorsLogged.has(cause.code)) {
          schemaErrorsLogged.add(cause.code);
          logEvent(
            "warn",
            "Fast path cannot read the auth schema; asking Auth",
            {
              fn: "presence-ping",
              sqlstate: cause.code,
              cause: errorText(cause),
            },
          );
        }
        return null;
      }
      throw new HttpError("presence_update_failed", {
        extra: { error: publicDbError(cause) },
        cause,
      });
    }
  }

  async function presencePing(
    req: Request,
    ctx: RequestContext,
  ): Promise<Response> {
    const token = bearerToken(req);
    let proof = await identify(
      token,
      ctx.env,
      deps,
      deps.now() >= fastPathOffUntil,
    );
    let bodyText: string;
    try {
      bodyText = await readBodyText(req);
    } catch (error) {
      // The token outranks the body (the check order of docs/api.md
      // "Errors"): a revoked session must still answer 401 here.
      if (proof.via === "local") await deps.authenticate(token, ctx.env);
      throw error;
    }
    const state = effectiveState(
      bodyText,
      new URL(req.url).searchParams.get("state"),
    );
    const sql = deps.database(ctx.env, req.signal);
    let result = await record(sql, proof, state, ctx.env);
    if (!result?.sessionOk) {
      // Auth says why (signed out, banned, deleted), exactly as when it
      // decides from the start; should it still accept the token, the call
      // is made again with its identity. The same when the fast path could
      // not read the auth schema.
      proof = {
        via: "auth",
        identity: await deps.authenticate(token, ctx.env),
      };
      result = await record(sql, proof, state, ctx.env);
    }
    if (!result?.row) throw new HttpError("user_not_found");
    return json({ ok: true, user: result.row });
  }

  return createFunction("presence-ping", env, presencePing);
}

function _parseOrUndefined(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
