/**
 * Answers that change rarely, kept for a while and asked once at a time:
 * Auth's settings and key refusals (`auth.ts` `AuthSettings`) and who may
 * write the rights columns (`admin.ts` `rightsWritableBy`).
 *
 * On a busy project the question is the expensive part: the rights check
 * reads the catalog (about a second with a few thousand views), and an
 * Auth that does not answer holds each caller for its timeout. So:
 *
 * - an answer is kept `ttlMs`, counted from when it came;
 * - callers that ask while a question is out wait for that one question
 *   instead of asking their own (a burst of administrators after the
 *   answer expired asks once);
 * - a failure is kept `failureMs`, shorter: its waiters and the callers of
 *   the next moments get the same error without asking, so an outage or a
 *   timeout is not asked again by every request;
 * - except a question its asker abandoned (the request whose statement
 *   it was went away and the statement was cancelled): that failure is
 *   not the answer, so it is forgotten and each waiter asks again.
 *
 * Not a library's: the caches on npm keep values, not a question in flight
 * with its failure, and this is forty lines.
 *
 * @module
 */

/** Options of {@linkcode Kept}. */
export interface KeptOptions {
  /** The clock, ms since the epoch. */
  readonly now: () => number;
  /** How long an answer is kept, ms. */
  readonly ttlMs: number;
  /** How long a failure is kept, ms. */
  readonly failureMs: number;
}

interface _Entry<T> {
  readonly answer: Promise<T>;
  // Until when the entry holds; Infinity while the question is out.
  until: number;
  readonly abandoned: () => boolean;
}

/**
 * Answers by question, each asked once at a time and kept for a while.
 *
 * @example
 * ```ts
 * const kept = new Kept<boolean>({ now: Date.now, ttlMs: 60_000, failureMs: 5_000 });
 * await kept.get("autoconfirm", () => askAuth()); // asks
 * await kept.get("autoconfirm", () => askAuth()); // kept for a minute
 * ```
 */
export class Kept<T> {
  readonly #options: KeptOptions;
  readonly #entries = new Map<string, _Entry<T>>();

  /** Answers kept by `options.now`, for `ttlMs`, failures for `failureMs`. */
  constructor(options: KeptOptions) {
    this.#options = options;
  }

  /**
   * The answer to `id`: kept, being asked, or asked now with `ask`.
   * `abandoned` tells, once `ask` has failed, whether its asker went away
   * (then the failure is forgotten and the waiters ask again).
   */
  get(
    id: string,
    ask: () => Promise<T>,
    abandoned: () => boolean = () => false,
  ): Promise<T> {
    const { now, ttlMs, failureMs } = this.#options;
    const held = this.#entries.get(id);
    if (held && held.until > now()) {
      return held.answer.catch((error) => {
        if (!held.abandoned()) throw error;
        return this.get(id, ask, abandoned);
      });
    }
    const entry: _Entry<T> = {
      answer: ask(),
      until: Infinity,
      abandoned,
    };
    this.#entries.set(id, entry);
    entry.answer.then(
      () => entry.until = now() + ttlMs,
      () => {
        entry.until = abandoned() ? -Infinity : now() + failureMs;
      },
    );
    return entry.answer;
  }
}
