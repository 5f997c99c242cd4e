/**
 * A bounded cache of verified access tokens, so that an isolate pays for a
 * token's signature check (ES256: about 0.4 ms of CPU in Deno) once rather
 * than on every ping.
 *
 * What it remembers is only that the signature, issuer, audience and
 * expiry checked out: the caller still proves on every request, in the
 * database, that the session lives and the user is neither banned nor
 * deleted. Entries are keyed by the whole token string (a token differing
 * in one byte is another entry), dropped at the token's `exp`, and at most
 * `maxAgeMs` after the key set that verified them was fetched: an entry
 * never outlives the copy of the JWKS behind it, so a signing key withdrawn
 * from the JWKS stops being honoured when that copy expires, not a cache
 * lifetime later. The oldest entry goes first when the cache is full.
 *
 * @module
 */

/** Options of {@linkcode TokenCache}. */
export interface TokenCacheOptions {
  /** How many tokens are remembered at most. */
  readonly maxEntries: number;
  /**
   * How long an entry may be used at most, in ms, counted from when the
   * keys that verified it were fetched (the key set's own cache lifetime).
   */
  readonly maxAgeMs: number;
}

interface _Entry<V> {
  readonly value: V;
  readonly until: number;
}

/**
 * Verified tokens and what they said, by token string.
 *
 * @example
 * ```ts
 * const cache = new TokenCache<SessionClaims>({ maxEntries: 10_000, maxAgeMs: 600_000 });
 * cache.set(token, claims, payload.exp!, Date.now());
 * cache.get(token, Date.now()); // claims, until exp
 * ```
 */
export class TokenCache<V> {
  readonly #entries = new Map<string, _Entry<V>>();
  readonly #options: TokenCacheOptions;

  /** A cache with the given bounds. */
  constructor(options: TokenCacheOptions) {
    if (!(options.maxEntries >= 1) || !(options.maxAgeMs > 0)) {
      throw new RangeError("TokenCache needs maxEntries >= 1 and maxAgeMs > 0");
    }
    this.#options = options;
  }

  /** How many entries are held (expired ones included until touched). */
  get size(): number {
    return this.#entries.size;
  }

  /**
   * What `token` said when verified, or `undefined` when unknown or past
   * its time at `now` (ms since the epoch, the caller's clock).
   */
  get(token: string, now: number): V | undefined {
    const entry = this.#entries.get(token);
    if (!entry) return undefined;
    if (now >= entry.until) {
      this.#entries.delete(token);
      return undefined;
    }
    return entry.value;
  }

  /**
   * Remembers a verified token until its `exp` (seconds since the epoch) or
   * `maxAgeMs` after `keysFetchedAt` (when the keys that verified it were
   * fetched; default `now`), whichever is first. A token already past
   * either at `now` (the caller's clock) is not stored.
   */
  set(
    token: string,
    value: V,
    exp: number,
    now: number,
    keysFetchedAt: number = now,
  ): void {
    const until = Math.min(
      exp * 1000,
      Math.min(keysFetchedAt, now) + this.#options.maxAgeMs,
    );
    if (!(until > now)) return;
    this.#entries.delete(token);
    // Maps keep insertion order: the first key is the entry verified
    // longest ago, and goes first past the bound.
    while (this.#entries.size >= this.#options.maxEntries) {
      const oldest = this.#entries.keys().next().value!;
      this.#entries.delete(oldest);
    }
    this.#entries.set(token, { value, until });
  }

  /** Forgets every entry. */
  clear(): void {
    this.#entries.clear();
  }
}
