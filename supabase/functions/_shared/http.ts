/**
 * The request pipeline both functions share: CORS preflight, method check,
 * environment, then the function's own work, with every failure turned into
 * a response in one place.
 *
 * @module
 */
import { corsHeaders } from "./cors.ts";
import { asDbBusy, isDbError, isDbFailure, publicDbError } from "./db.ts";
import { asMigrationMissing } from "./db_function.ts";
import { type EnvSource, type FunctionEnv, readEnv } from "./env.ts";
import { errorResponse, HttpError } from "./errors.ts";
import {
  errorText,
  forRequest,
  LOG_LEVEL_RANK,
  logEvent,
  type LogLevel,
  type RequestNotes,
} from "./log.ts";

/** Largest request body either function reads (64 KiB). */
export const MAX_BODY_BYTES = 64 * 1024;

/** What a function's work receives besides the request. */
export interface RequestContext {
  /** The validated environment. */
  readonly env: FunctionEnv;
  /** Id of this request, also sent in 500 bodies and log lines. */
  readonly requestId: string;
}

/** A function's work, once method and environment have passed. */
export type Work = (req: Request, ctx: RequestContext) => Promise<Response>;

/** Options of {@linkcode createFunction}. */
export interface FunctionOptions {
  /**
   * The level of the line of a call refused with 401, 403 or 404: `info` by
   * default (an expired token is routine for a ping); `warn` where each
   * refusal is worth a look (auth-sync: who tried an administrator's call).
   */
  readonly refusalsAt?: "info" | "warn";
}

/**
 * Wraps a function's work in the shared pipeline. The result is what
 * `Deno.serve` takes.
 *
 * Each request writes one line, `Request handled`, with its status, code,
 * the public reason and the private cause (redacted), and what its work
 * added (`log.ts` `noteOnRequest`); at `error` for a failure of 500 and
 * above, `warn` for a 503 (a dependency that did not answer in time: the
 * client is told when to retry), else `info` (refusals: see
 * {@linkcode FunctionOptions.refusalsAt}), or higher where the work's note
 * asked for it (a read answered in full because the change log is not
 * whole). One line, not a failure line
 * and then a summary: an outage doubles no one's log volume.
 *
 * @example
 * ```ts
 * Deno.serve(createFunction("presence-ping", denoEnv, presencePing));
 * ```
 */
export function createFunction(
  name: string,
  env: EnvSource,
  work: Work,
  options: FunctionOptions = {},
): (req: Request) => Promise<Response> {
  return (req) => {
    // Our own id, always: a client's header would let it choose, repeat or
    // forge the id of another request in the logs. Its own id, if sane, is
    // logged beside ours for correlation. Every line logged while the
    // request is worked on carries it.
    const requestId = crypto.randomUUID();
    const notes: RequestNotes = { fields: {}, level: "info" };
    return forRequest(requestId, async () => {
      const clientRequestId = clientRequestIdOf(req);
      const started = performance.now();
      let response: Response;
      // Why a call was refused or failed, for its line: the code the client
      // got, the public detail when there is one (Auth's reason for a
      // token), and the private cause: a failure's, or the database's own
      // message for a 4xx answered for its sake (a row it refused), which
      // the client is not told.
      let code: string | undefined;
      let reason: unknown;
      let cause: string | undefined;
      let extra: Record<string, unknown> = {};
      // The environment's PRESENCE_LOG_LEVEL, once read.
      let lowest: LogLevel = "info";
      try {
        if (
          req.method === "OPTIONS" &&
          req.headers.has("access-control-request-method")
        ) {
          response = new Response(null, { status: 204, headers: corsHeaders });
        } else if (req.method !== "POST") {
          throw new HttpError("method_not_allowed", {
            headers: { Allow: "POST, OPTIONS" },
          });
        } else {
          const read = readEnv(env);
          lowest = read.logLevel;
          response = await work(req, { env: read, requestId });
        }
      } catch (thrown) {
        const error = _answerFor(thrown);
        response = errorResponse(error, requestId);
        const known = error instanceof HttpError ? error : undefined;
        code = known?.code ?? "internal_error";
        reason = known?.extra.error;
        extra = known?.extra ?? {};
        const failed = !known || known.status >= 500;
        if (failed || isDbError(known.cause)) {
          const source = known ? known.cause : error;
          if (source !== undefined) cause = errorText(source);
        }
        // A client that went away (a closed tab, a load generator's last
        // requests) had its statements cancelled: nobody reads this answer,
        // and nothing failed.
        if (req.signal.aborted) {
          code = "client_closed";
          reason = cause = undefined;
        }
      }
      const status = response.status;
      const byStatus = code === "client_closed"
        ? "info"
        : _levelOf(status, options);
      const level = LOG_LEVEL_RANK[notes.level] > LOG_LEVEL_RANK[byStatus]
        ? notes.level
        : byStatus;
      if (LOG_LEVEL_RANK[level] < LOG_LEVEL_RANK[lowest]) return response;
      logEvent(
        level,
        "Request handled",
        {
          fn: name,
          client_request_id: clientRequestId,
          method: req.method,
          status,
          code,
          reason: typeof reason === "string"
            ? reason.slice(0, _REASON_CHARS)
            : undefined,
          cause,
          // The environment's variables that are missing or invalid, as
          // the answer names them (names and what is wrong, no values).
          missing: extra.missing,
          invalid: extra.invalid,
          ...notes.fields,
          ms: Math.round(performance.now() - started),
        },
      );
      return response;
    }, notes);
  };
}

// The longest public reason logged: Auth's message may quote a token's
// header (an unknown `kid`), which the caller chose.
const _REASON_CHARS = 200;

// A line's level by its answer's status (see createFunction).
function _levelOf(
  status: number,
  options: FunctionOptions,
): LogLevel {
  if (status === 503) return "warn";
  if (status >= 500) return "error";
  if ([401, 403, 404].includes(status)) return options.refusalsAt ?? "info";
  return "info";
}

// A statement that ran out of time, or met another transaction's write (a
// serialization failure, a deadlock), answers 503 with Retry-After
// (db.ts asDbBusy) where the answer would otherwise only say "the database
// failed": an unexpected
// error, or presence-ping's presence_update_failed. auth-sync's sync_failed
// and partial_failure keep their code: they report what was done and
// undone at the provider. Any other database failure no handler named (the
// presence read, auth-sync's lookups) stays a 500 internal_error, with the
// condition and SQLSTATE in `error`, as presence-ping's answer has them.
function _answerFor(error: unknown): unknown {
  if (error instanceof HttpError && error.code !== "presence_update_failed") {
    return error;
  }
  const busy = asDbBusy(error);
  if (busy) return busy;
  if (error instanceof HttpError || !isDbFailure(error)) return error;
  const missing = asMigrationMissing(error);
  if (missing) return missing;
  return new HttpError("internal_error", {
    extra: { error: publicDbError(error) },
    cause: error,
  });
}

// What a client's `x-request-id` may look like to be logged: a UUID or a
// similar token. Anything else (control characters, JSON, kilobytes) is
// dropped, so a header cannot forge or flood a log line.
const _CLIENT_REQUEST_ID = /^[A-Za-z0-9._:-]{1,64}$/;

/**
 * The client's `x-request-id`, when it is a short plain token; otherwise
 * `undefined` (and left out of the log line). Never used as the request's
 * own id.
 *
 * @example
 * ```ts
 * clientRequestIdOf(new Request("http://x", { headers: { "x-request-id": "abc-1" } })); // "abc-1"
 * ```
 */
export function clientRequestIdOf(req: Request): string | undefined {
  const value = req.headers.get("x-request-id");
  return value !== null && _CLIENT_REQUEST_ID.test(value) ? value : undefined;
}

/**
 * Reads the body as text, refusing more than {@linkcode MAX_BODY_BYTES} with
 * a 413 without buffering the excess. An absent body reads as `""`.
 */
export async function readBodyText(req: Request): Promise<string> {
  const declared = Number(req.headers.get("content-length"));
  if (declared > MAX_BODY_BYTES) throw new HttpError("payload_too_large");
  if (!req.body) return "";
  const reader = req.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > MAX_BODY_BYTES) {
      await reader.cancel();
      throw new HttpError("payload_too_large");
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  // Invalid UTF-8 becomes U+FFFD, which then fails JSON parsing or schema
  // validation like any other bad input.
  return new TextDecoder().decode(bytes);
}

/**
 * Parses a JSON body. `undefined` for an empty body; throws `bad_json` when
 * the text is not JSON.
 */
export async function readJsonBody(req: Request): Promise<unknown> {
  const text = await readBodyText(req);
  if (text.trim() === "") return undefined;
  try {
    return JSON.parse(text);
  } catch (cause) {
    throw new HttpError("bad_json", { cause });
  }
}
