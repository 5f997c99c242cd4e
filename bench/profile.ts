/**
 * `deno run -A --cpu-prof --cpu-prof-dir=DIR bench/profile.ts`: a CPU
 * profile of presence-ping's Deno side under load. It sets the bench up
 * as `npm run bench` does (bench/setup.ts) and drives ES256 pings with
 * wrk (or the Deno client) at concurrency 16 for `--duration` seconds, and
 * prints the functions with the most self time in this process, grouped by
 * package, from the profile V8 writes when the process exits (`--top`
 * lines; rerun with the profile's path as `--read=FILE` to print it again).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { load } from "./context.ts";
import { setUp } from "./setup.ts";

interface _Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

/**
 * Self time per function and per package of a `.cpuprofile`, largest
 * first, as text.
 */
export function summarizeProfile(profile: {
  nodes: _Node[];
  samples: number[];
  timeDeltas: number[];
}, top = 30): string {
  const self = new Map<number, number>();
  profile.samples.forEach((id, i) =>
    self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0))
  );
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  const byFunction = new Map<string, number>();
  const byPackage = new Map<string, number>();
  for (const node of profile.nodes) {
    const us = self.get(node.id) ?? 0;
    if (!us) continue;
    const f = node.callFrame;
    const where = _package(f.url);
    const key = `${f.functionName || "(anonymous)"} ${where}:${
      f.lineNumber + 1
    }`;
    byFunction.set(key, (byFunction.get(key) ?? 0) + us);
    byPackage.set(where, (byPackage.get(where) ?? 0) + us);
  }
  const lines = (m: Map<string, number>, n: number) =>
    [...m].sort((a, b) => b[1] - a[1]).slice(0, n).map(([k, us]) =>
      `  ${(100 * us / total).toFixed(1).padStart(5)}%  ${k}`
    );
  return [
    `Self time by package (${(total / 1e6).toFixed(1)} s sampled):`,
    ...lines(byPackage, 15),
    `Self time by function (top ${top}):`,
    ...lines(byFunction, top),
  ].join("\n");
}

function _package(url: string): string {
  if (!url) return "(native/idle/gc)";
  const npm = /node_modules\/(?:\.deno\/)?(@?[^/@]+(?:\/[^/@]+)?)/.exec(url) ??
    /registry\.npmjs\.org\/(@?[^/]+(?:\/[^/]+)?)\//.exec(url);
  if (npm) return `npm:${npm[1]}`;
  const local = /\/(supabase\/functions|local|bench|tests)\/(.*)$/.exec(url);
  if (local) return `${local[1]}/${local[2]}`;
  if (url.startsWith("ext:")) return url.split("/").slice(0, 2).join("/");
  return url;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      duration: { type: "string", default: "15" },
      read: { type: "string" },
      top: { type: "string", default: "30" },
    },
  });
  if (values.read) {
    const profile = JSON.parse(await Deno.readTextFile(values.read));
    console.log(summarizeProfile(profile, Number(values.top)));
    return;
  }
  const log = (line: string) => console.error(line);
  // The bench's own set-up (bench/setup.ts): its other variants stay idle.
  const bench = await setUp({
    quick: false,
    durationS: Number(values.duration),
    warmupS: 2,
    users: 1000,
    skipIntervalS: 60,
    log,
  });
  try {
    const { ctx } = bench;
    const url = ctx.stack.variants.main.pingUrl;
    await load(ctx, url, "es256", 16, ctx.warmupS);
    const result = await load(ctx, url, "es256", 16, ctx.durationS);
    console.error(
      `ES256 c=16: ${result.rps.toFixed(0)} req/s, ${result.errors} errors`,
    );
  } finally {
    await bench.close();
  }
  console.error(
    "Profile written on exit; print it with: deno run -A bench/profile.ts --read=<file>.cpuprofile",
  );
}

if (import.meta.main) await main();
