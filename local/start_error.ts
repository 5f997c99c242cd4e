/**
 * A failure of starting the local stack that a person can act on: what
 * failed and what to do, printed by `npm start` as one line instead of a
 * stack trace.
 *
 * @module
 */

/**
 * What failed (`message`) and what to do about it (`hint`); `detail` holds
 * longer output (the CLI's), kept for logs and tests, never printed by
 * `npm start`.
 *
 * @example
 * ```ts
 * throw new StartError(
 *   'Port 54321 is already in use',
 *   "Stop what uses it or pass --port <another>",
 * );
 * ```
 */
export class StartError extends Error {
  /** What to do about it. */
  readonly hint: string;
  /** Longer output behind the failure, if any. */
  readonly detail: string;

  constructor(
    message: string,
    hint: string,
    detail = "",
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = "StartError";
    this.hint = hint;
    this.detail = detail;
  }

  /** The one line `npm start` prints. */
  line(): string {
    return `${this.message.replace(/\.$/, "")}. ${this.hint}.`.replaceAll(
      /\s*\n\s*/g,
      " ",
    );
  }
}

/**
 * A connection string without its password, for messages: the user and
 * the `host:port/database` it names.
 *
 * @example
 * ```ts
 * redactUrl("postgresql://postgres:secret@db:5432/app"); // "postgresql://postgres@db:5432/app"
 * ```
 */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    parsed.password = "";
    parsed.search = "";
    return parsed.toString();
  } catch {
    return "<unparsable database URL>";
  }
}

/**
 * `text` (a driver's error message) with every copy of `url` replaced by
 * {@linkcode redactUrl}'s form, and any other copy of its password by
 * `***`. Drivers quote a URL they cannot parse whole, and that is when a
 * password with an unencoded `#`, `/`, `?` or `@` is most likely.
 *
 * @example
 * ```ts
 * redactIn("Invalid URL: 'postgres://u:p#w@h/d'", "postgres://u:p#w@h/d");
 * // "Invalid URL: '<unparsable database URL>'"
 * ```
 */
export function redactIn(text: string, url: string): string {
  let out = text.replaceAll(url, redactUrl(url));
  // The userinfo's password: up to the last "@", which may itself be in it.
  const password = /^[a-z][a-z0-9+.-]*:\/\/[^:@/]*:(.*)@[^@]*$/is.exec(url)
    ?.[1];
  if (password) {
    out = out.replaceAll(password, "***");
    try {
      out = out.replaceAll(decodeURIComponent(password), "***");
    } catch {
      // Not percent-encoded text: the raw copy is all there is.
    }
  }
  return out;
}
