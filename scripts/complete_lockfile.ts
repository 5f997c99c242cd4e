/**
 * Adds to package-lock.json the entries of platform packages that npm could
 * not lock here: binaries for other systems that `deno`, `supabase` and
 * friends list as optionalDependencies. The npm registry this machine
 * reaches lacks some of them (e.g. `@supabase/cli-darwin-arm64@3.1.0`), so
 * npm leaves them out of the lock, and `npm ci` then refuses the lock as
 * out of sync with package.json. An entry carrying `os`/`cpu`/`libc` is
 * skipped on other systems and fetched by name and version where it fits,
 * exactly as npm would have written it. Run after any `npm install`:
 *
 *   deno run --allow-read --allow-write scripts/complete_lockfile.ts
 *
 * No npm option does this (npm locks only what it can resolve), hence this
 * script. `os`, `cpu` and `libc` come from the package names, which follow
 * one pattern in every package involved.
 *
 * @module
 */

interface LockEntry {
  version?: string;
  dev?: boolean;
  optional?: boolean;
  optionalDependencies?: Record<string, string>;
  [key: string]: unknown;
}

const path = new URL("../package-lock.json", import.meta.url);
const lock = JSON.parse(await Deno.readTextFile(path)) as {
  packages: Record<string, LockEntry>;
};

/** `os`, `cpu` and `libc` of a platform package, read from its name. */
export function platformOf(
  name: string,
): { os: string[]; cpu: string[]; libc?: string[] } | null {
  const os = /(darwin|macos)/.test(name)
    ? "darwin"
    : /(win32|windows)/.test(name)
    ? "win32"
    : /linux/.test(name)
    ? "linux"
    : null;
  const cpu = /arm64|aarch64/.test(name)
    ? "arm64"
    : /x64|x86_64|amd64/.test(name)
    ? "x64"
    : null;
  if (!os || !cpu) return null;
  const libc = os === "linux"
    ? (/musl/.test(name) ? "musl" : "glibc")
    : undefined;
  return { os: [os], cpu: [cpu], ...(libc ? { libc: [libc] } : {}) };
}

let added = 0;
for (const [key, entry] of Object.entries(lock.packages)) {
  for (
    const [name, version] of Object.entries(entry.optionalDependencies ?? {})
  ) {
    const target = `node_modules/${name}`;
    if (lock.packages[target]) continue;
    const platform = platformOf(name);
    if (!platform) {
      console.warn(`Cannot tell the platform of "${name}" (from "${key}")`);
      continue;
    }
    lock.packages[target] = {
      version,
      ...(entry.dev ? { dev: true } : {}),
      optional: true,
      ...platform,
    };
    added++;
  }
}
lock.packages = Object.fromEntries(
  Object.entries(lock.packages).sort(([a], [b]) =>
    a === "" ? -1 : b === "" ? 1 : a.localeCompare(b)
  ),
);
await Deno.writeTextFile(path, JSON.stringify(lock, null, 2) + "\n");
console.log(`Added ${added} platform entries to package-lock.json.`);
