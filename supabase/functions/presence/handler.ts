/**
 * `presence`: who is online, by the database clock (docs/api.md,
 * "POST /functions/v1/presence").
 *
 * Checks, in this order: method and environment ({@linkcode createFunction}),
 * `Authorization`, the token, that the caller has a `usuarios` row or is an
 * administrator, and only then the body, so that nobody without access
 * learns anything from validation answers.
 *
 * @module
 */
import { adminPolicy, isAdmin } from "../_shared/admin.ts";
import { bearerToken } from "../_shared/auth.ts";
import { withColumns } from "../_shared/columns.ts";
import type { FunctionDeps } from "../_shared/deps.ts";
import type { EnvSource } from "../_shared/env.ts";
import { HttpError, json } from "../_shared/errors.ts";
import {
  createFunction,
  readJsonBody,
  type RequestContext,
} from "../_shared/http.ts";
import { noteOnRequest } from "../_shared/log.ts";
import { type ReaderDeps, readingCaller } from "./caller.ts";
import {
  CursorKeys,
  type CursorState,
  openCursor,
  sealCursor,
} from "./cursor.ts";
import { FIRST_PAGE, readShared } from "./query.ts";
import { parsePresenceRequest } from "./schema.ts";

/**
 * The `change_log` of a read's log line while the change log is not whole
 * (`query.ts` `CHANGE_LOG_TRIGGERS`): at `warn` once every
 * {@linkcode CHANGE_LOG_WARN_EVERY_MS}, else at `info`.
 */
export const CHANGE_LOG_NOT_WHOLE =
  "the change log is not whole: a presence trigger on public.usuarios is missing or disabled, or a table inherits usuarios; every changes-since read is answered in full until it is mended (docs/api.md, How the cursor works)";

/**
 * The `change_log` of a read's log line while a change-log trigger is
 * enabled for origin sessions only (as {@linkcode CHANGE_LOG_NOT_WHOLE}).
 */
export const CHANGE_LOG_ORIGIN_ONLY =
  "a presence trigger on public.usuarios is enabled for origin sessions only (ENABLE TRIGGER ALL, pg_restore --disable-triggers): writes in replica mode (a logical-replication subscription, a data-only dump run through psql) are not logged; enable them ALWAYS (docs/api.md, How the cursor works)";

/**
 * How often, at most, a `presence` handler logs at `warn` that the change
 * log is not whole or enabled for origin sessions only (its other reads'
 * lines say so at `info`).
 */
export const CHANGE_LOG_WARN_EVERY_MS = 60_000;

/** What a `presence` handler keeps across its requests. */
export interface PresenceHeld {
  /** The caller's proof, and the auth-schema errors already logged. */
  readonly reader: ReaderDeps;
  /** The cursor keys derived so far. */
  readonly cursorKeys: CursorKeys;
  /**
   * When a read last logged at warn that the change log is not whole
   * (`deps.now()` ms).
   */
  readonly changeLogWarnedAt: { ms: number };
}

/**
 * Serves one read (method and environment already checked).
 *
 * 200 `{ok, server_time, users, removed, next_after_id, cursor, resync}`.
 */
export async function presence(
  req: Request,
  ctx: RequestContext,
  deps: FunctionDeps,
  { reader, cursorKeys, changeLogWarnedAt }: PresenceHeld,
): Promise<Response> {
  const sql = deps.database(ctx.env, req.signal);
  const { identity, row } = await readingCaller(
    sql,
    bearerToken(req),
    ctx.env,
    reader,
  );
  const policy = adminPolicy(ctx.env, deps, sql);
  const admin = await isAdmin(identity, row, policy);
  if (!row && !admin) throw new HttpError("user_not_found");
  const body = parsePresenceRequest(await readJsonBody(req));
  const { presenceAwayAfterS: awayS, presenceOfflineAfterS: offlineS } =
    ctx.env;
  let since: CursorState | null = null;
  let resync = false;
  if (body.cursor !== undefined) {
    since = await openCursor(
      body.cursor,
      ctx.env.serviceRoleKey,
      cursorKeys,
    );
    // A cursor sealed under another key, or issued under other thresholds,
    // cannot be continued: the answer starts a full read over. (Its age is
    // the statement's to judge, by the database clock that issued it.)
    if (!since || since.awayS !== awayS || since.offlineS !== offlineS) {
      since = null;
      resync = true;
    }
  }
  const read = (from: CursorState | null) =>
    withColumns(
      sql,
      (columns) =>
        readShared(sql, columns, {
          ids: body.ids,
          status: body.status,
          afterId: from || !resync ? body.after_id ?? FIRST_PAGE : FIRST_PAGE,
          limit: body.limit,
          since: from,
          admin,
          awayS,
          offlineS,
        }),
    );
  let result = await read(since);
  if (result.reset) {
    // The cursor is too old, the table was truncated, or the cursor comes
    // from another timeline (a restore, a failover) or another cluster's
    // transaction ids: only a full read is sure. Or a bulk write changed
    // more rows than a full read costs to page through.
    resync = true;
    result = await read(null);
  }
  const changeLog = !result.changeLogWhole
    ? CHANGE_LOG_NOT_WHOLE
    : result.changeLogOriginOnly
    ? CHANGE_LOG_ORIGIN_ONLY
    : null;
  if (changeLog) {
    // Every watcher is answered in full at every poll meanwhile (not
    // whole), or replica-mode writes go unseen (origin only): the operator
    // is the one who can mend it. Every line says so; one a minute per
    // instance is at warn, so that a project of many watchers (and
    // PRESENCE_LOG_LEVEL=warn) is not flooded with the same news.
    const now = deps.now();
    const warn = now - changeLogWarnedAt.ms >= CHANGE_LOG_WARN_EVERY_MS;
    if (warn) changeLogWarnedAt.ms = now;
    noteOnRequest({ change_log: changeLog }, warn ? "warn" : "info");
  }
  return json({
    ok: true,
    server_time: result.serverTime.toISOString(),
    users: result.users,
    removed: result.removed,
    next_after_id: result.nextAfterId,
    cursor: await sealCursor(
      result.cursor,
      ctx.env.serviceRoleKey,
      cursorKeys,
    ),
    resync,
  });
}

/**
 * The handler `Deno.serve` takes, over the environment `env` and the
 * dependencies `deps`: `index.ts` wires the real ones, the local gateway
 * and tests their own.
 *
 * @example
 * ```ts
 * Deno.serve(createPresence(denoEnv, createDeps()));
 * ```
 */
export function createPresence(
  env: EnvSource,
  deps: FunctionDeps,
): (req: Request) => Promise<Response> {
  const held: PresenceHeld = {
    reader: { ...deps, schemaErrorsLogged: new Set() },
    cursorKeys: new CursorKeys(),
    changeLogWarnedAt: { ms: -Infinity },
  };
  return createFunction(
    "presence",
    env,
    (req, ctx) => presence(req, ctx, deps, held),
  );
}
