/**
 * Registration helpers for end-to-end test files, which share one stack per
 * file: the functions' connection pools and Auth's clients stay open across
 * tests by design, so Deno's per-test resource sanitizers are off, and the
 * file's last test closes the stack and checks that it is really gone.
 *
 * @module
 */
import assert from "node:assert/strict";

/** `Deno.test` for a test that uses the file's shared stack. */
export function e2eTest(name: string, fn: () => Promise<void>): void {
  Deno.test({ name, fn, sanitizeOps: false, sanitizeResources: false });
}

/**
 * Registers, last in the file, a test that closes the stack and asserts
 * that its API no longer answers.
 */
export function closeStackAfterAll(
  prefix: string,
  stack: { apiUrl: string; close(): Promise<void> },
): void {
  e2eTest(`${prefix}: the stack shuts down cleanly`, async () => {
    await stack.close();
    await assert.rejects(
      fetch(`${stack.apiUrl}/_internal/health`, {
        signal: AbortSignal.timeout(2000),
      }),
    );
  });
}
