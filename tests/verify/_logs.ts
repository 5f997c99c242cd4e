/**
 * Captures this process's console output, so that the log lines of the
 * stacks a suite runs in-process can be scanned for secrets.
 *
 * @module
 */

type _Method = "log" | "info" | "warn" | "error" | "debug";
const _METHODS: _Method[] = ["log", "info", "warn", "error", "debug"];

/** Console lines captured since {@linkcode captureConsole}. */
export interface CapturedConsole {
  readonly lines: string[];
  /** Puts the console back. */
  restore(): void;
}

/**
 * Replaces the console methods with ones that keep every line; with
 * `echo`, lines are still printed.
 */
export function captureConsole(echo = false): CapturedConsole {
  const lines: string[] = [];
  const saved = new Map<_Method, (...args: unknown[]) => void>();
  for (const m of _METHODS) {
    const original = console[m].bind(console);
    saved.set(m, original);
    console[m] = (...args: unknown[]) => {
      lines.push(
        args.map((a) => typeof a === "string" ? a : Deno.inspect(a)).join(" "),
      );
      if (echo) original(...args);
    };
  }
  return {
    lines,
    restore() {
      for (const [m, fn] of saved) console[m] = fn;
    },
  };
}
