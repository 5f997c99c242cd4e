/**
 * Request bodies validated with zod at the edge: a parsed, typed value, or
 * 400 `validation_failed` with the issues. Issues carry a path and zod's
 * message only, never the value given, so nothing a client sent (a password,
 * a cursor) is echoed back.
 *
 * @module
 */
import type { z } from "zod";
import { HttpError } from "./errors.ts";

/**
 * The address format Supabase Auth accepts (its `validateEmail`:
 * badoux/checkmail's ValidateFormat, the WHATWG "valid e-mail address"):
 * stricter than zod's `z.email()` on domain labels (at most 63 characters,
 * no hyphen at either end). auth-sync's schema refuses what Auth would, and
 * the local Auth stand-in validates with it.
 */
export const AUTH_EMAIL_FORMAT =
  /^[a-zA-Z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$/;

/** One validation problem, as a 400 body lists it. */
export interface Issue {
  /** Where in the body, e.g. `["ids", 2]`; `[]` for the body itself. */
  readonly path: (string | number)[];
  readonly message: string;
}

/**
 * The 400 `validation_failed` error with these issues; also for rules that
 * need more than the schema to decide (the database, a signature).
 */
export function validationFailed(issues: Issue[]): HttpError {
  return new HttpError("validation_failed", { extra: { issues } });
}

/**
 * Parses `body` with `schema`, or throws 400 `validation_failed`.
 *
 * @example
 * ```ts
 * const body = parseBody(z.strictObject({ limit: z.int() }), { limit: 5 });
 * ```
 */
export function parseBody<S extends z.ZodType>(
  schema: S,
  body: unknown,
): z.output<S> {
  const result = schema.safeParse(body);
  if (result.success) return result.data;
  throw validationFailed(
    result.error.issues.map((issue) => ({
      path: issue.path.map((key) =>
        typeof key === "symbol" ? String(key) : key
      ),
      message: issue.message,
    })),
  );
}
