/**
 * A Node.js for the app-side smoke test, of the major version the README
 * names for apps. The pinned `@supabase/*` packages need Node 22 (their
 * `engines`; Node 20 has no native WebSocket, so `createClient` throws),
 * and the stack itself runs on Deno, so a machine may well have only an
 * older Node. `npm ci` therefore installs the official Node 22 binary as
 * an optional dependency pinned in package-lock.json (`node-<os>-<arch>`,
 * the package the npm `node` package installs; npm skips the ones for
 * other platforms): nothing is fetched while the tests run.
 *
 * @module
 */

/** The Node.js major version apps need, as the README says. */
export const APP_NODE_MAJOR = 22;

const ROOT = new URL("../../", import.meta.url).pathname;

/** Major version of the Node binary at `path`, or `null` if it does not run. */
export async function nodeMajor(path: string): Promise<number | null> {
  try {
    const out = await new Deno.Command(path, {
      args: ["--version"],
      stdout: "piped",
      stderr: "null",
      stdin: "null",
    }).output();
    const match = /^v(\d+)\./.exec(new TextDecoder().decode(out.stdout));
    return out.success && match ? Number(match[1]) : null;
  } catch {
    return null;
  }
}

/**
 * Path of a Node binary of at least {@linkcode APP_NODE_MAJOR}: `APP_NODE`
 * when set, else the one `npm ci` installed (`node_modules/.bin/node`),
 * else `node` on the PATH when new enough. Throws, naming what to do, when
 * there is none.
 */
export async function appNode(): Promise<string> {
  const configured = Deno.env.get("APP_NODE");
  const candidates = configured
    ? [configured]
    : [`${ROOT}node_modules/.bin/node`, "node"];
  for (const path of candidates) {
    if (((await nodeMajor(path)) ?? 0) >= APP_NODE_MAJOR) return path;
  }
  throw new Error(
    configured
      ? `APP_NODE=${configured} is not Node ${APP_NODE_MAJOR}+`
      : `No Node ${APP_NODE_MAJOR}+: node_modules/.bin/node is missing (run npm ci; it installs Node ${APP_NODE_MAJOR} on Linux x64/arm64 and macOS x64) and the PATH's node is older. Install Node ${APP_NODE_MAJOR} or set APP_NODE to one`,
  );
}
