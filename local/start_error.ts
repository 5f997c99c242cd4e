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
 * the `host:port/database` it names, with no query or fragment. The
 * credentials are taken to end at the last `@`, as a person who pasted a
 * password with a raw `@`, `#`, `/` or `?` meant it (a URL parser may
 * read part of such a password as the host or the path).
 *
 * @example
 * ```ts
 * redactUrl("postgresql://postgres:secret@db:5432/app"); // "postgresql://postgres@db:5432/app"
 * redactUrl("postgresql://u:my@pa#ss@db/app"); // "postgresql://u@db/app"
 * ```
 */
export function redactUrl(url: string): string {
  const parts = _parts(url);
  if (!parts) return "<unparsable database URL>";
  const user = parts.user ? `${parts.user}@` : "";
  return `${parts.scheme}://${user}${parts.rest.replace(/[?#].*$/s, "")}`;
}

/**
 * `text` (a driver's error message) with every copy of `url` replaced by
 * {@linkcode redactUrl}'s form, and its password masked `***`: whole, and
 * each piece of it between `@ # / ? :` (which a driver may have taken for
 * a host or a path), where it stands as a word of its own.
 *
 * @example
 * ```ts
 * redactIn("getaddrinfo ENOTFOUND Secret", "postgresql://u:my@Secret#Pass@db/app");
 * // "getaddrinfo ENOTFOUND ***"
 * ```
 */
export function redactIn(text: string, url: string): string {
  let out = text.replaceAll(url, redactUrl(url));
  const password = _parts(url)?.password;
  if (!password) return out;
  let decoded = password;
  try {
    decoded = decodeURIComponent(password);
  } catch {
    // Not percent-encoded text: the raw copy is all there is.
  }
  const secrets = new Set([password, decoded]);
  for (const piece of `${password} ${decoded}`.split(/[@#/?:\s]+/)) {
    if (piece.length >= 3) secrets.add(piece);
  }
  // Longest first, so that a piece never splits a longer secret's copy.
  for (const secret of [...secrets].sort((a, b) => b.length - a.length)) {
    const escaped = secret.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    out = out.replace(
      new RegExp(`(?<![A-Za-z0-9])${escaped}(?![A-Za-z0-9])`, "g"),
      "***",
    );
  }
  return out;
}

// scheme, user, password and what follows the credentials (host, port,
// path, query), the credentials ending at the last "@"; null for what is
// not `scheme://…`.
function _parts(
  url: string,
): { scheme: string; user: string; password: string; rest: string } | null {
  const m = /^([a-z][a-z0-9+.-]*):\/\/(.*)$/is.exec(url.trim());
  if (!m) return null;
  const [, scheme, after] = m;
  const at = after.lastIndexOf("@");
  const rest = after.slice(at + 1);
  if (rest === "" && at >= 0) return null;
  const credentials = at >= 0 ? after.slice(0, at) : "";
  const colon = credentials.indexOf(":");
  return {
    scheme,
    user: colon >= 0 ? credentials.slice(0, colon) : credentials,
    password: colon >= 0 ? credentials.slice(colon + 1) : "",
    rest,
  };
}
