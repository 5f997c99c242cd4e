/**
 * What in-process code writes to the console while a test's work runs: the
 * functions' log lines (`_shared/log.ts`), which the local stack and
 * `startTestStack` run in the test's own process.
 *
 * @module
 */

/** Lines written with `console.log`, `warn` or `error` while `work` runs. */
export async function logLines(
  work: () => Promise<unknown>,
): Promise<string[]> {
  const lines: string[] = [];
  const saved = { log: console.log, warn: console.warn, error: console.error };
  const keep = (...args: unknown[]) => lines.push(args.map(String).join(" "));
  console.log = console.warn = console.error = keep;
  try {
    await work();
  } finally {
    Object.assign(console, saved);
  }
  return lines;
}

/** A structured log line (`_shared/log.ts` `logEvent`), parsed. */
export interface LogLine {
  level?: string;
  msg?: string;
  /** The function that wrote it. */
  fn?: string;
  [field: string]: unknown;
}

/** The structured (JSON) lines among `lines`, parsed. */
export function jsonLines(lines: readonly string[]): LogLine[] {
  return lines.filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as LogLine);
}

/** The `msg` of each `{"level":"warn",…}` line among `lines`. */
export function warnings(lines: readonly string[]): string[] {
  return jsonLines(lines).filter((l) => l.level === "warn")
    .map((l) => String(l.msg));
}
