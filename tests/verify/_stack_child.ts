/**
 * The local stack as `npm start` runs it (`local/start.ts`, same flags),
 * plus one thing the reliability run needs: on SIGUSR1 it prints its memory
 * after a garbage collection, as one `VERIFY_MEMORY {json}` line.
 *
 * @module
 */

Deno.addSignalListener("SIGUSR1", () => {
  // Present when started with --v8-flags=--expose-gc.
  (globalThis as { gc?: () => void }).gc?.();
  console.log(`VERIFY_MEMORY ${JSON.stringify(Deno.memoryUsage())}`);
});

await import("../../local/start.ts");
