/**
 * A Node.js for the app-side smoke test, of the major version the README
 * names for apps. The pinned `@supabase/*` packages need Node 22 (their
 * `engines`; Node 20 has no native WebSocket, so `createClient` throws), and
 * the stack itself runs on Deno, so a machine may well have only an older
 * Node. Then the official Node binary is installed from the npm registry
 * (package `node-<os>-<arch>`, the one the `node` package installs), into the
 * git-ignored `.local/`, once: it is a single executable that needs no
 * download of its own.
 *
 * @module
 */

/** The Node.js major version apps need, as the README says. */
export const APP_NODE_MAJOR = 22;
/** The exact version installed when the machine has no Node that new. */
export const APP_NODE_VERSION = "22.23.3";

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
 * when set, else `node` on the PATH when new enough, else the pinned
 * version from the npm registry (installed on first use).
 */
export async function appNode(): Promise<string> {
  const configured = Deno.env.get("APP_NODE");
  const candidates = configured ? [configured] : ["node", _installedPath()];
  for (const path of candidates) {
    if (((await nodeMajor(path)) ?? 0) >= APP_NODE_MAJOR) return path;
  }
  if (configured) {
    throw new Error(`APP_NODE=${configured} is not Node ${APP_NODE_MAJOR}+`);
  }
  const out = await new Deno.Command("npm", {
    args: [
      "install",
      "--prefix",
      `${ROOT}.local/node-${APP_NODE_MAJOR}`,
      "--no-save",
      "--no-package-lock",
      "--no-audit",
      "--no-fund",
      `${_packageName()}@${APP_NODE_VERSION}`,
    ],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const path = _installedPath();
  if (!out.success || (await nodeMajor(path)) !== APP_NODE_MAJOR) {
    throw new Error(
      `could not install Node ${APP_NODE_VERSION} from the npm registry: ${
        new TextDecoder().decode(out.stderr)
      }`,
    );
  }
  return path;
}

function _packageName(): string {
  const os = Deno.build.os === "windows" ? "win" : Deno.build.os;
  const arch = Deno.build.arch === "x86_64" ? "x64" : "arm64";
  return `node-${os}-${arch}`;
}

function _installedPath(): string {
  const exe = Deno.build.os === "windows" ? "node.exe" : "bin/node";
  return `${ROOT}.local/node-${APP_NODE_MAJOR}/node_modules/${_packageName()}/${exe}`;
}
