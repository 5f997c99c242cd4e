/**
 * Runs Supabase's own auth-js test suite (supabase/supabase-js,
 * `packages/core/auth-js/test`) against the Auth stand-in: the yardstick
 * docs/local.md quotes. A manual command, not part of `npm test` (it needs
 * a supabase-js checkout and the npm registry):
 *
 *   git clone https://github.com/supabase/supabase-js
 *   npm run auth-js-suite -- ../supabase-js
 *
 * The argument is a supabase-js work tree (its files as they are on disk)
 * or a git directory (bare clones too; `--ref <rev>` picks the revision,
 * default HEAD). The runner:
 *
 * 1. copies `packages/core/auth-js` and `tsconfig.base.json` into a
 *    temporary folder;
 * 2. installs there, with npm, the suite's tools at pinned versions
 *    ({@linkcode SUITE_DEPENDENCIES}: the versions of supabase-js's pnpm
 *    catalog, which plain npm cannot read);
 * 3. starts this project's stack on free ports with an in-memory PGlite and
 *    without the local fixture (never the developer's `.local/data`),
 *    taking the suite's `[auth]` settings from its `test/supabase/config.toml`
 *    where the stand-in has them;
 * 4. adapts `test/lib/clients.ts` as little as it can ({@linkcode
 *    adaptClients}) and runs the suite's own key generator, as its
 *    `test:generate-keys` step does;
 * 5. runs jest with the suite's `jest.config.cli.js` on every test file that
 *    talks to the live server through `test/lib/clients.ts` (or the files
 *    named with `--file`), on Node 22 (as tests/support/node.ts finds it);
 * 6. prints each file's counts, the failing tests grouped by the flow they
 *    exercise ({@linkcode flowOf}), and `N passed, N failed`;
 * 7. stops the stack and deletes the temporary folder (`--keep` keeps it,
 *    with the stack's log and jest's JSON report).
 *
 * It exits 1 only when it could not run the suite (no checkout, npm or
 * jest failing, a test file that does not load); failing suite tests are
 * its result, not an error.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { type AuthConfig, authConfig, startStack } from "../local/stack.ts";
import {
  LOCAL_ANON_KEY,
  LOCAL_JWT_SECRET,
  LOCAL_SERVICE_ROLE_KEY,
} from "../local/auth/mod.ts";
import { appNode } from "../tests/support/node.ts";

/**
 * What the suite needs installed, pinned: supabase-js's pnpm catalog
 * (`typescript ~5.8.3`, `jest 30.4.2`, `ts-jest ^29.4.9`, `@types/jest
 * 30.0.0`, `@types/node 20.19.9`, `prettier ^3.6.2`) and auth-js's own
 * devDependencies, at the versions those ranges gave on 2026-11-24.
 */
export const SUITE_DEPENDENCIES: Readonly<Record<string, string>> = {
  "tslib": "2.8.1",
  "@faker-js/faker": "9.9.0",
  "@types/jest": "30.0.0",
  "@types/jsonwebtoken": "8.5.9",
  "@types/node": "20.19.9",
  "jest": "30.4.2",
  "jest-environment-jsdom": "30.4.1",
  "jest-mock-server": "0.1.0",
  "jsonwebtoken": "9.0.2",
  "prettier": "3.6.2",
  "ts-jest": "29.4.9",
  "typescript": "5.8.3",
};

const AUTH_JS = "packages/core/auth-js";

const USAGE =
  `Usage: npm run auth-js-suite -- <supabase-js checkout or git dir> [--ref <rev>] [--keys legacy|new] [--file <test file>]... [--keep]

Runs Supabase's auth-js suite against the local Auth stand-in (docs/local.md).
  --ref <rev>    revision of a git directory to run (default HEAD)
  --keys <kind>  the keys the suite's clients send: legacy (the CLI's anon and
                 service_role JWTs, default) or new (the stack's
                 sb_publishable_ and sb_secret_ keys)
  --file <name>  run only this test file of test/ (repeatable)
  --keep         keep the temporary folder (suite, stack log, jest report)`;

/** One failing or passing test, as jest's JSON report gives it. */
export interface SuiteTest {
  file: string;
  /** `describe` titles, outermost first. */
  ancestors: string[];
  title: string;
  status: string;
  /** Error answers of the stack while the test ran (jest runs in band). */
  errors?: AuthError[];
}

/** An error answer of the stack under `/auth/v1`. */
export interface AuthError {
  /** Method, path below `/auth/v1` and `grant_type`, e.g. `POST /token?grant_type=pkce`. */
  route: string;
  status: number;
  /** `error_code` (or `code`), else `message`. */
  code: string;
}

/**
 * The not-served flow an error answer shows, or `null`: a route the
 * stand-in answers 404 `not_found` (not supported), an `*_disabled` code,
 * or the gateway's 401 for a request without `apikey`.
 */
export function flowOfError(error: AuthError): string | null {
  if (error.status === 401 && error.code === "No API key found in request") {
    return "no apikey sent";
  }
  const routes: [RegExp, string][] = [
    [/passkey/, "passkeys"],
    [/\/factors|webauthn/, "MFA and WebAuthn"],
    [/\/sso/, "SSO/SAML"],
    [/\/admin\/oauth|\/oauth\//, "OAuth server admin"],
    [/\/reauthenticate/, "reauthentication"],
    [/\/user\/identities/, "identity linking"],
    [/grant_type=id_token/, "ID tokens"],
    [/grant_type=web3/, "Web3"],
  ];
  for (const [pattern, flow] of routes) {
    if (pattern.test(error.route)) return flow;
  }
  const codes: [RegExp, string][] = [
    [/anonymous/, "anonymous sign-ins"],
    [/phone|sms/, "phone and SMS"],
    [/provider_disabled|unsupported.*provider/i, "OAuth providers"],
  ];
  for (const [pattern, flow] of codes) {
    if (pattern.test(error.code)) return flow;
  }
  return null;
}

/**
 * The flow a test exercises, for grouping failures: from its titles, else
 * from the stack's error answers while it ran ({@linkcode flowOfError};
 * timing only, so a late answer to the previous test can show up: the
 * runner prints them beside such tests). The not-served flows are the ones
 * docs/local.md lists; anything else is `"served flows"`, where a failure
 * is a defect of the stand-in.
 *
 * @example
 * ```ts
 * flowOf({ file: "", ancestors: ["MFA"], title: "enroll", status: "" });
 * // "MFA and WebAuthn"
 * ```
 */
export function flowOf(test: SuiteTest): string {
  const byTitle = flowOfTitles(test);
  if (byTitle) return byTitle;
  for (const error of test.errors ?? []) {
    const flow = flowOfError(error);
    if (flow) return flow;
  }
  return "served flows";
}

/** The not-served flow a test's titles name, or `null`. */
export function flowOfTitles(test: SuiteTest): string | null {
  const text = [...test.ancestors, test.title].join(" › ");
  const rules: [RegExp, string][] = [
    [/passkey/i, "passkeys"],
    [
      /\bmfa\b|factor|webauthn|totp|\baal\b|authenticator assurance/i,
      "MFA and WebAuthn",
    ],
    [/sso\b|saml/i, "SSO/SAML"],
    [
      /oauth ?(2\.1 )?(server|client|admin)|admin\.oauth/i,
      "OAuth server admin",
    ],
    [/anonymous/i, "anonymous sign-ins"],
    [/web3|solana|ethereum|siwe/i, "Web3"],
    [/reauthenticat/i, "reauthentication"],
    [
      /link ?identit|unlink|identit(y|ies) link|linkIdentity/i,
      "identity linking",
    ],
    [/id ?token/i, "ID tokens"],
    [/phone|sms/i, "phone and SMS"],
    [/oauth|provider/i, "OAuth providers"],
  ];
  for (const [pattern, flow] of rules) if (pattern.test(text)) return flow;
  return null;
}

/**
 * The suite's `test/lib/clients.ts` with what cannot stay as it is for the
 * stand-in, and nothing else, changed:
 *
 * - the Auth URL: the stack runs on a free port, not the CLI's 54321, so
 *   that a running `npm start` (or `supabase start`) is left alone;
 * - the publishable and secret keys: the suite signs them with the RSA key
 *   of its `signing_keys.json`, which the CLI it was written for is
 *   configured with (`signing_keys_path`). The stand-in has the CLI's
 *   default keys only and its gateway, like Supabase's hosted one, takes
 *   exactly the project's keys as `apikey`, so they become `keys`: by
 *   default the anon and service_role keys `supabase start` prints (HS256
 *   over the CLI's JWT secret, which the file already exports as
 *   `GOTRUE_JWT_SECRET`), or the stack's `sb_publishable_`/`sb_secret_`
 *   keys (`--keys new`), which the gateway turns into those JWTs as
 *   Supabase's does;
 * - the admin JWT (`role: supabase_admin`): the same claims, signed HS256
 *   with that secret instead of RS256 with the suite's key. The stand-in,
 *   like `supabase start` (GOTRUE_JWT_ADMIN_ROLES=service_role), refuses it
 *   on /admin; the suite's one use of it (a deleteUser in
 *   GoTrueClient.test.ts) does not check the answer.
 *
 * Throws when the file no longer has the shape these rely on.
 */
export function adaptClients(
  source: string,
  authUrl: string,
  keys: { publishable: string; secret: string } = {
    publishable: LOCAL_ANON_KEY,
    secret: LOCAL_SERVICE_ROLE_KEY,
  },
): string {
  let text = source;
  const replace = (
    pattern: RegExp,
    by: (match: string, ...groups: string[]) => string,
    what: string,
  ) => {
    const matches = text.match(new RegExp(pattern.source, "g")) ?? [];
    if (matches.length !== 1) {
      throw new Error(
        `test/lib/clients.ts: expected one ${what}, found ${matches.length}; the suite changed, adapt scripts/auth_js_suite.ts`,
      );
    }
    text = text.replace(pattern, by);
  };
  replace(
    /'http:\/\/127\.0\.0\.1:54321\/auth\/v1'/,
    () => `'${authUrl}'`,
    "CLI Auth URL",
  );
  replace(
    /export const SUPABASE_PUBLISHABLE_KEY = jwt\.sign\([\s\S]*?\n\)\n/,
    () =>
      "// auth_js_suite.ts: the project's publishable key (the stand-in's\n" +
      "// gateway takes exactly the project's keys as apikey)\n" +
      `export const SUPABASE_PUBLISHABLE_KEY = '${keys.publishable}'\n`,
    "SUPABASE_PUBLISHABLE_KEY = jwt.sign(...)",
  );
  replace(
    /export const SUPABASE_SECRET_KEY = jwt\.sign\([\s\S]*?\n\)\n/,
    () =>
      "// auth_js_suite.ts: the project's secret key\n" +
      `export const SUPABASE_SECRET_KEY = '${keys.secret}'\n`,
    "SUPABASE_SECRET_KEY = jwt.sign(...)",
  );
  replace(
    /(const AUTH_ADMIN_JWT = jwt\.sign\(\s*\{[^}]*\},\s*)privateKey,\s*\{ algorithm: 'RS256', keyid: rsaKey\.kid \}/,
    (_, head) =>
      head +
      "GOTRUE_JWT_SECRET, // auth_js_suite.ts: HS256, the CLI's secret\n" +
      "  { algorithm: 'HS256' }",
    "AUTH_ADMIN_JWT signed RS256",
  );
  if (!text.includes(`'${LOCAL_JWT_SECRET}'`)) {
    throw new Error(
      "test/lib/clients.ts no longer exports the CLI's JWT secret as GOTRUE_JWT_SECRET; adapt scripts/auth_js_suite.ts",
    );
  }
  return text;
}

/**
 * The stand-in's settings from the suite's `test/supabase/config.toml`, read
 * as `npm start` reads a project's (`authConfig`), except that a setting the
 * stand-in cannot honour (the suite turns anonymous sign-ins on) is passed
 * over: the suite's tests of that flow fail, grouped as not served.
 */
export function suiteAuthConfig(text: string): AuthConfig {
  return authConfig(text, () => {});
}

/** Test files that import the live-server clients, in name order. */
export function liveFiles(files: Record<string, string>): string[] {
  return Object.keys(files)
    .filter((name) =>
      name.endsWith(".test.ts") &&
      /from '\.\/lib\/clients'/.test(files[name])
    )
    .sort();
}

class HarnessError extends Error {}

async function run(
  cmd: string,
  args: string[],
  options: { cwd?: string; env?: Record<string, string>; quiet?: boolean } = {},
): Promise<string> {
  const out = await new Deno.Command(cmd, {
    args,
    cwd: options.cwd,
    env: options.env,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decode = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
  if (!out.success) {
    throw new HarnessError(
      `${cmd} ${args.join(" ")} failed (exit ${out.code}):\n${
        decode(out.stderr).slice(-4000)
      }${decode(out.stdout).slice(-2000)}`,
    );
  }
  return decode(out.stdout);
}

async function copyTree(from: string, to: string): Promise<void> {
  await Deno.mkdir(to, { recursive: true });
  for await (const entry of Deno.readDir(from)) {
    if (["node_modules", "coverage", "dist", ".git"].includes(entry.name)) {
      continue;
    }
    const source = `${from}/${entry.name}`;
    const target = `${to}/${entry.name}`;
    if (entry.isDirectory) await copyTree(source, target);
    else if (entry.isFile) await Deno.copyFile(source, target);
  }
}

async function isDir(path: string): Promise<boolean> {
  return await Deno.stat(path).then((s) => s.isDirectory, () => false);
}

/**
 * Copies the suite into `root` (same layout as the repository) and says
 * which revision it is.
 */
async function fetchSuite(
  source: string,
  ref: string | undefined,
  root: string,
): Promise<string> {
  if (await isDir(`${source}/${AUTH_JS}`)) {
    if (ref) {
      throw new HarnessError(
        "--ref is for a git directory; a work tree runs as it is on disk",
      );
    }
    await copyTree(`${source}/${AUTH_JS}`, `${root}/${AUTH_JS}`);
    await Deno.copyFile(
      `${source}/tsconfig.base.json`,
      `${root}/tsconfig.base.json`,
    );
    try {
      const commit = (await run("git", ["-C", source, "rev-parse", "HEAD"]))
        .trim();
      const dirty = (await run("git", [
        "-C",
        source,
        "status",
        "--porcelain",
        "--",
        AUTH_JS,
      ])).trim();
      return dirty ? `${commit} with local changes to ${AUTH_JS}` : commit;
    } catch {
      return "not a git checkout";
    }
  }
  const gitDir = ["--git-dir", source];
  let commit;
  try {
    commit = (await run("git", [
      ...gitDir,
      "rev-parse",
      "--verify",
      `${ref ?? "HEAD"}^{commit}`,
    ])).trim();
  } catch {
    throw new HarnessError(
      `${source} is neither a supabase-js work tree (no ${AUTH_JS}) nor a git directory with revision ${
        ref ?? "HEAD"
      }`,
    );
  }
  const archive = `${root}/suite.tar`;
  await run("git", [
    ...gitDir,
    "archive",
    "-o",
    archive,
    commit,
    AUTH_JS,
    "tsconfig.base.json",
  ]);
  await run("tar", ["-xf", archive, "-C", root]);
  await Deno.remove(archive);
  return commit;
}

interface JestReport {
  testResults: {
    name: string;
    status: string;
    message: string;
    assertionResults: {
      ancestorTitles: string[];
      title: string;
      status: string;
      startAt?: number | null;
      duration?: number | null;
    }[];
  }[];
}

async function main(): Promise<number> {
  const { values, positionals } = parseArgs({
    args: Deno.args,
    allowPositionals: true,
    options: {
      ref: { type: "string" },
      keys: { type: "string", default: "legacy" },
      file: { type: "string", multiple: true },
      keep: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (
    values.help || positionals.length !== 1 ||
    !["legacy", "new"].includes(values.keys)
  ) {
    console.log(USAGE);
    return values.help ? 0 : 1;
  }
  const source = positionals[0].replace(/\/+$/, "");
  const root = await Deno.makeTempDir({ prefix: "auth-js-suite-" });
  const dir = `${root}/${AUTH_JS}`;
  let stack: Awaited<ReturnType<typeof startStack>> | null = null;
  let logFile: Deno.FsFile | null = null;
  const cleanup = async () => {
    await stack?.close();
    stack = null;
    logFile?.close();
    logFile = null;
    if (values.keep) console.log(`Kept ${root}`);
    else await Deno.remove(root, { recursive: true }).catch(() => {});
  };
  const interrupted = () => {
    cleanup().finally(() => Deno.exit(130));
  };
  Deno.addSignalListener("SIGINT", interrupted);
  try {
    const commit = await fetchSuite(source, values.ref, root);
    console.log(`supabase-js ${commit}`);

    const node = await appNode();
    const nodeVersion = (await run(node, ["--version"])).trim();
    const denoVersion = Deno.version.deno;
    const cores = navigator.hardwareConcurrency;
    console.log(
      `Node ${nodeVersion}, Deno ${denoVersion}, ${cores} cores, ${
        new Date().toISOString()
      }`,
    );

    // The suite's package.json names its tools through pnpm's `catalog:`,
    // which npm cannot install: it gets the pinned list instead.
    await Deno.writeTextFile(
      `${dir}/package.json`,
      JSON.stringify(
        {
          name: "auth-js-suite",
          private: true,
          devDependencies: SUITE_DEPENDENCIES,
        },
        null,
        2,
      ) + "\n",
    );
    console.log("Installing the suite's tools with npm...");
    await run("npm", [
      "install",
      "--no-audit",
      "--no-fund",
      "--ignore-scripts",
      "--loglevel=error",
    ], { cwd: dir });

    const testDir = `${dir}/test`;
    const sources: Record<string, string> = {};
    for await (const entry of Deno.readDir(testDir)) {
      if (entry.isFile && entry.name.endsWith(".test.ts")) {
        sources[entry.name] = await Deno.readTextFile(
          `${testDir}/${entry.name}`,
        );
      }
    }
    const files = values.file?.length ? values.file : liveFiles(sources);
    for (const file of files) {
      if (!(file in sources)) {
        throw new HarnessError(`no test/${file} in this supabase-js`);
      }
    }

    const logPath = `${root}/stack.log`;
    logFile = await Deno.open(logPath, { write: true, create: true });
    const encoder = new TextEncoder();
    const suiteConfig = suiteAuthConfig(
      await Deno.readTextFile(`${testDir}/supabase/config.toml`),
    );
    const errors: (AuthError & { at: number })[] = [];
    stack = await startStack({
      apiPort: 0,
      dbPort: 0,
      dataDir: null,
      seed: false,
      authConfig: suiteConfig,
      onResponse: (req, res) => {
        const url = new URL(req.url);
        if (res.status < 400 || !url.pathname.startsWith("/auth/v1/")) return;
        const grant = url.searchParams.get("grant_type");
        const route = `${req.method} ${url.pathname.slice("/auth/v1".length)}${
          grant ? `?grant_type=${grant}` : ""
        }`;
        const at = Date.now();
        type Body = { error_code?: string; code?: string; message?: string };
        res.clone().json().then(
          (body) => body as Body,
          (): Body => ({}),
        ).then((body) => {
          errors.push({
            at,
            route,
            status: res.status,
            code: String(body.error_code ?? body.code ?? body.message ?? ""),
          });
        });
      },
      log: (line) => logFile?.writeSync(encoder.encode(line + "\n")),
    });
    console.log(`Stack on ${stack.apiUrl} (in-memory PGlite)`);

    const clients = `${testDir}/lib/clients.ts`;
    await Deno.writeTextFile(
      clients,
      adaptClients(
        await Deno.readTextFile(clients),
        `${stack.apiUrl}/auth/v1`,
        values.keys === "new"
          ? { publishable: stack.publishableKey, secret: stack.secretKey }
          : undefined,
      ),
    );
    // The suite's own `test:generate-keys` step: clients.ts still reads the
    // RSA key (unused once adapted) at load time.
    await run(node, ["test/generate-signing-keys.js"], { cwd: dir });

    console.log(`Running jest on ${files.join(", ")}...`);
    const report = `${root}/jest-report.json`;
    const jest = await new Deno.Command(node, {
      args: [
        "node_modules/jest/bin/jest.js",
        "--config",
        "jest.config.cli.js",
        "--runInBand",
        "--coverage=false",
        "--json",
        `--outputFile=${report}`,
        ...files.map((f) =>
          `test/${f.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}$`
        ),
      ],
      cwd: dir,
      env: { CI: "true" },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    let parsed: JestReport;
    try {
      parsed = JSON.parse(await Deno.readTextFile(report));
    } catch {
      throw new HarnessError(
        `jest wrote no report (exit ${jest.code}):\n${
          new TextDecoder().decode(jest.stderr).slice(-4000)
        }`,
      );
    }
    return summarize(parsed, dir, errors);
  } finally {
    Deno.removeSignalListener("SIGINT", interrupted);
    await cleanup();
  }
}

function summarize(
  report: JestReport,
  dir: string,
  errors: (AuthError & { at: number })[],
): number {
  const tests: SuiteTest[] = [];
  const broken: string[] = [];
  console.log("");
  for (const result of report.testResults) {
    const file = result.name.slice(`${dir}/test/`.length);
    if (result.assertionResults.length === 0 && result.status === "failed") {
      broken.push(`${file}: ${result.message.slice(0, 2000)}`);
      continue;
    }
    const mine = result.assertionResults.map((a) => {
      const from = a.startAt ?? Infinity;
      const to = from + (a.duration ?? 0);
      return {
        file,
        ancestors: a.ancestorTitles,
        title: a.title,
        status: a.status,
        errors: errors.filter((e) => e.at >= from && e.at <= to),
      };
    });
    tests.push(...mine);
    const passed = mine.filter((t) => t.status === "passed").length;
    const failed = mine.filter((t) => t.status === "failed").length;
    const other = mine.length - passed - failed;
    console.log(
      `${file}: ${mine.length} tests, ${passed} passed, ${failed} failed${
        other ? `, ${other} skipped` : ""
      }`,
    );
  }
  if (broken.length) {
    throw new HarnessError(
      `test files that did not run:\n${broken.join("\n")}`,
    );
  }
  const failures = tests.filter((t) => t.status === "failed");
  const groups = new Map<string, SuiteTest[]>();
  for (const test of failures) {
    const flow = flowOf(test);
    groups.set(flow, [...(groups.get(flow) ?? []), test]);
  }
  const order = [...groups.keys()].sort((a, b) =>
    a === "served flows" ? 1 : b === "served flows" ? -1 : a.localeCompare(b)
  );
  if (failures.length) console.log("\nFailing tests by flow:");
  for (const flow of order) {
    const list = groups.get(flow)!;
    console.log(`\n${flow} (${list.length})`);
    for (const t of list) {
      console.log(`  ${t.file}: ${[...t.ancestors, t.title].join(" › ")}`);
      // What put a test whose titles name no flow here: the answers.
      if (!flowOfTitles(t)) {
        for (const e of t.errors ?? []) {
          console.log(`      ${e.status} ${e.code} (${e.route})`);
        }
      }
    }
  }
  const passed = tests.filter((t) => t.status === "passed").length;
  console.log(`\n${passed} passed, ${failures.length} failed`);
  return 0;
}

if (import.meta.main) {
  try {
    Deno.exit(await main());
  } catch (error) {
    console.error(
      `auth-js suite: ${
        error instanceof HarnessError
          ? error.message
          : (error as Error)?.stack ?? String(error)
      }`,
    );
    Deno.exit(1);
  }
}
