/**
 * The request body the `presence` function accepts, as a zod schema: parsed
 * at the edge into a typed value, or refused with 400 `validation_failed`
 * and the issues (never the values given).
 *
 * @module
 */
import { z } from "zod";
import { parseBody } from "../_shared/validation.ts";

/** Most users one call returns, and most `ids` one call may name. */
export const MAX_LIMIT = 500;

/** Users a call returns when `limit` is not given. */
export const DEFAULT_LIMIT = 100;

/** Longest cursor accepted; real ones are a few hundred characters. */
export const MAX_CURSOR_LENGTH = 8192;

/** A status as the database clock computes it. */
export const Status = z.enum(["online", "away", "offline"]);

/** A computed status. */
export type Status = z.infer<typeof Status>;

/**
 * The body: every member optional.
 *
 * - `ids`: only these rows (1 to 500 ids; a legacy table may hold ids of 0
 *   or below);
 * - `status`: only users with one of these computed statuses (full reads
 *   only: a change may take a user out of any status asked for, so a
 *   changes-since answer is never filtered by status);
 * - `after_id` and `limit`: one page, in `id` order (without `after_id`,
 *   from the lowest id, 0 and negative ones included);
 * - `cursor`: the `cursor` of a previous answer, for what changed since.
 */
export const PresenceRequest = z.strictObject({
  ids: z.array(z.int()).min(1).max(MAX_LIMIT).optional(),
  status: z.array(Status).min(1).max(3).optional(),
  after_id: z.int().optional(),
  limit: z.int().min(1).max(MAX_LIMIT).default(DEFAULT_LIMIT),
  cursor: z.string().min(1).max(MAX_CURSOR_LENGTH).optional(),
}).refine((body) => body.cursor === undefined || body.status === undefined, {
  path: ["status"],
  message:
    "Cannot be combined with cursor: a change may take a user out of the statuses asked for",
});

/** A parsed body. */
export type PresenceRequest = z.infer<typeof PresenceRequest>;

/**
 * Parses a JSON body (`undefined`, an absent body, reads as `{}`), or
 * throws 400 `validation_failed` with `issues`.
 *
 * @example
 * ```ts
 * parsePresenceRequest({ status: ["online", "away"] });
 * // { status: ["online", "away"], limit: 100 }
 * ```
 */
export function parsePresenceRequest(body: unknown): PresenceRequest {
  return parseBody(PresenceRequest, body === undefined ? {} : body);
}
