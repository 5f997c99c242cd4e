/**
 * What a standard user sees of another user's `nombre_usuario`: every
 * address in it reduced to its local part (docs/security.md "Security
 * notes"). Usernames are free text, and apps store anything there: an
 * email, several (`ana@corp.test;ana.old@mail.test`), or a display name
 * with one (`Ana <ana@corp.test> (@ana)`).
 *
 * @module
 */

// Characters that end an address inside free text. `'`, `+`, `.`, `%` and
// `!` are left in: they occur in real local parts.
const _STOP = String.raw`\s<>()[\]{},;:"/\\|`;
// An `@` as apps also store it: URL-encoded (`%40`) or full-width (`＠`,
// U+FF20). Neither is deliverable as written, but each reads as an address.
const _AT = "(?:@|\uFF20|%40)";
// One character of an address part: not a stop, not an `@` of any form.
const _PART = `(?:(?!%40)[^${_STOP}@\uFF20])`;
// `local@domain`, where the domain may itself hold further `@` parts (a
// quoted local part written unquoted, `a@b@c.io`): all of it goes. The
// local part starts where no address character comes before it: the
// leftmost match always does, and without the lookbehind the engine would
// try every later position of a long run with no `@` after it, each to the
// run's end (quadratic: a 60,000-character username cost seconds of CPU
// per read). With it, each run is tried once: linear.
const _ADDRESS = new RegExp(
  `(?<!${_PART})(${_PART}+)(?:${_AT}${_PART}*)+`,
  "g",
);
// What is left of an address whose local part no rule above could find
// (`"ana b"@corp.test`, `@corp.test`): a dotted domain after an `@`. A
// handle (`@ana`) has no dot and stays.
const _DOMAIN = new RegExp(`${_AT}${_PART}*\\.${_PART}*`, "g");

/**
 * `name` with every address-shaped part reduced to the text before its
 * first `@` (or `%40`, or `＠`); `null` stays `null`.
 *
 * @example
 * ```ts
 * maskUsername("carla@example.com"); // "carla"
 * maskUsername("Elena <elena@corp.test> (@elena)"); // "Elena <elena> (@elena)"
 * maskUsername("elena@corp.test;elena.old@gmail.test"); // "elena;elena.old"
 * maskUsername("ana%40corp.test"); // "ana"
 * ```
 */
export function maskUsername(name: string | null): string | null {
  if (name === null) return null;
  return name.replace(_ADDRESS, (_match, local: string) => local)
    .replace(_DOMAIN, "");
}
