/**
 * `presence-ping`: the signed-in user sets their own presence.
 *
 * @module
 */
import { z } from "zod";
import { authenticate, bearerToken, type Identity } from "../_shared/auth.ts";
import { type OptionalColumns, withColumns } from "../_shared/columns.ts";
import { database, type Sql } from "../_shared/db.ts";
import { denoEnv, type EnvSource } from "../_shared/env.ts";
import { HttpError, json } from "../_shared/errors.ts";
import {
  createFunction,
  readBodyText,
  type RequestContext,
} from "../_shared/http.ts";
import { errorText } from "../_shared/log.ts";
import { matchCandidate, notLinkedElsewhere } from "../_shared/match_user.ts";

/** A presence state. */
export type PresenceState = "online" | "offline";

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

/** The updated presence of one row, as the response carries it. */
export interface PresenceRow {
  readonly id: number;
  readonly ultimo_acceso: string;
  readonly presence_state: PresenceState;
}

/**
 * Finds the identity's row and sets its presence in one statement; the time
 * is the database's clock truncated to milliseconds, so what is stored is
 * what is returned. `offline` also sets `last_manual_logout_at` where that
 * column exists. `null` when no row matches.
 */
export async function updatePresence(
  sql: Sql,
  identity: Identity,
  state: PresenceState,
): Promise<PresenceRow | null> {
  return await withColumns(
    sql,
    (columns) => _update(sql, identity, state, columns),
  );
}

/** Serves one presence ping (method and environment already checked). */
export async function presencePing(
  req: Request,
  ctx: RequestContext,
): Promise<Response> {
  const identity = await authenticate(bearerToken(req), ctx.env);
  const state = effectiveState(
    await readBodyText(req),
    new URL(req.url).searchParams.get("state"),
  );
  let row: PresenceRow | null;
  try {
    row = await updatePresence(database(ctx.env), identity, state);
  } catch (cause) {
    throw new HttpError("presence_update_failed", {
      extra: { error: errorText(cause) },
      cause,
    });
  }
  if (!row) throw new HttpError("user_not_found");
  return json({ ok: true, user: row });
}

/**
 * The handler `Deno.serve` takes. `env` defaults to the process environment;
 * the local gateway and tests pass their own.
 */
export function createPresencePing(
  env: EnvSource = denoEnv,
): (req: Request) => Promise<Response> {
  return createFunction("presence-ping", env, presencePing);
}

async function _update(
  sql: Sql,
  identity: Identity,
  state: PresenceState,
  columns: OptionalColumns,
): Promise<PresenceRow | null> {
  const logout = state === "offline" && columns.lastManualLogoutAt
    ? sql`, last_manual_logout_at = date_trunc('milliseconds', now())`
    : sql``;
  // Re-checked by the update itself, so a row linked to another identity
  // between the lookup and the write is not taken.
  const stillUnlinked = notLinkedElsewhere(sql, identity, columns);
  const rows = await sql<
    { id: string; ultimo_acceso: Date; presence_state: PresenceState }[]
  >`
    with c as (${matchCandidate(sql, identity, columns)})
    update public.usuarios u
    set ultimo_acceso = date_trunc('milliseconds', now()),
        presence_state = ${state}
        ${logout}
    from c
    where u.id = c.id ${stillUnlinked}
    returning u.id, u.ultimo_acceso, u.presence_state
  `;
  const row = rows[0];
  if (!row) return null;
  return {
    id: Number(row.id),
    ultimo_acceso: row.ultimo_acceso.toISOString(),
    presence_state: row.presence_state,
  };
}

function _parseOrUndefined(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
