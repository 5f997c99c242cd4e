/**
 * `npm test` / `deno task test`: format, lint and type checks, the unit
 * tests, then the database-backed tests (Auth stand-in and end to end) once
 * on PGlite and once on a real PostgreSQL. Ends with one plain line
 * `N passed, N failed` counted from the runs' JUnit reports.
 *
 * Stage names as arguments run only those stages, in the usual order:
 * `deno task unit` is `tests/run.ts unit`, `deno task e2e` is
 * `tests/run.ts pglite postgres`.
 *
 * @module
 */
import { testPostgres } from "./support/postgres.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const REPORTS = `${ROOT}.local/test-results`;
const deno = Deno.execPath();

interface Outcome {
  name: string;
  passed: number;
  failed: number;
  note?: string;
}
const outcomes: Outcome[] = [];

async function check(name: string, args: string[]): Promise<void> {
  console.log(`\n== ${name}`);
  // fmt, lint and check print only what is wrong: shown as it is.
  const { code } = await new Deno.Command(deno, {
    args,
    cwd: ROOT,
    stdout: "inherit",
    stderr: "inherit",
  }).output();
  outcomes.push({
    name,
    passed: code === 0 ? 1 : 0,
    failed: code === 0 ? 0 : 1,
  });
}

async function suite(
  name: string,
  paths: string[],
  env: Record<string, string> = {},
): Promise<void> {
  console.log(`\n== ${name}`);
  const report = `${REPORTS}/${name}.xml`;
  await Deno.remove(report).catch(() => {});
  const run = await new Deno.Command(deno, {
    args: [
      "test",
      "--allow-all",
      "--no-check",
      `--junit-path=${report}`,
      ...paths,
    ],
    cwd: ROOT,
    // Plain text: the causes are shown on the console and kept in a file.
    env: { ...env, NO_COLOR: "1" },
  }).output();
  const code = run.code;
  // The runs' own output is long (function logs): it goes to a file, and
  // the console shows each failure's name and cause.
  const log = `${REPORTS}/${name}.log`;
  await Deno.writeFile(log, run.stdout);
  await Deno.writeFile(log, run.stderr, { append: true });
  let passed = 0, failed = 0;
  try {
    const xml = await Deno.readTextFile(report);
    const head = /<testsuites[^>]*>/.exec(xml)?.[0] ?? "";
    const total = Number(/tests="(\d+)"/.exec(head)?.[1] ?? 0);
    failed = Number(/failures="(\d+)"/.exec(head)?.[1] ?? 0) +
      Number(/errors="(\d+)"/.exec(head)?.[1] ?? 0);
    passed = total - failed;
    for (const f of failures(xml)) {
      console.log(`FAILED (${name}): ${f.name}\n${indent(f.cause)}`);
    }
  } catch {
    // No report: the run crashed before reporting.
  }
  // A module that throws outside a test (say, at load) is absent from the
  // report: the runner's own ERRORS section names it.
  for (const f of uncaught(new TextDecoder().decode(run.stdout))) {
    failed++;
    console.log(`FAILED (${name}): ${f.name}\n${indent(f.cause)}`);
  }
  if (code !== 0 && failed === 0) {
    const text = new TextDecoder().decode(run.stderr) ||
      new TextDecoder().decode(run.stdout);
    console.log(
      `FAILED (${name}): the run exited with code ${code}\n${
        indent(text.split("\n").slice(-30).join("\n"))
      }`,
    );
  }
  if (code !== 0) console.log(`Full output of ${name}: ${log}`);
  if (code !== 0 && failed === 0) failed = 1;
  outcomes.push({ name, passed, failed });
}

/** Each failed test case of a JUnit report: its name and the failure text. */
function failures(xml: string): { name: string; cause: string }[] {
  const out = [];
  for (
    const m of xml.matchAll(
      /<testcase name="([^"]*)"[^>]*>\s*<(?:failure|error)[^>]*>([\s\S]*?)<\/(?:failure|error)>/g,
    )
  ) {
    out.push({ name: unescape(m[1]), cause: unescape(m[2]) });
  }
  return out;
}

/** The "(uncaught error)" blocks of `deno test`'s ERRORS section. */
function uncaught(output: string): { name: string; cause: string }[] {
  const section = /\n ERRORS \n([\s\S]*?)\n FAILURES \n/.exec(output)?.[1] ??
    "";
  return section.split(/\n\s*\n/).map((block) => block.trim().split("\n"))
    .filter(([first]) => first?.endsWith("(uncaught error)"))
    .map(([first, ...rest]) => ({ name: first, cause: rest.join("\n") }));
}

function unescape(text: string): string {
  return text.replaceAll("&lt;", "<").replaceAll("&gt;", ">")
    .replaceAll("&quot;", '"').replaceAll("&apos;", "'")
    .replaceAll("&amp;", "&");
}

// The first lines of a cause, indented under its test's name.
function indent(text: string, lines = 12): string {
  const kept = text.trim().split("\n");
  const shown = kept.slice(0, lines).map((l) => `    ${l}`);
  if (kept.length > lines) shown.push("    ...");
  return shown.join("\n");
}

const DB_PATHS = ["local", "tests/e2e", "tests/verify"];

/**
 * The stages, in the order `npm test` runs them; the one home of what each
 * checks. `deno task unit` and `deno task e2e` run some of them by name.
 */
const STAGES: Record<string, () => Promise<void>> = {
  fmt: () => check("fmt", ["fmt", "--check"]),
  lint: () => check("lint", ["lint"]),
  check: () =>
    check("check", [
      "check",
      "supabase/functions",
      "local",
      "tests",
      "bench",
      "scripts",
      "client",
    ]),
  unit: () =>
    suite("unit", ["supabase/functions", "client", "bench", "scripts"]),
  pglite: () => suite("pglite", DB_PATHS, { TEST_DATABASE_URL: "" }),
  // TEST_DATABASE_URL, or a throw-away cluster of the run's own: the suite
  // never starts, stops or alters a cluster it did not create.
  postgres: async () => {
    const pg = await testPostgres();
    if (pg.url === null) {
      console.log(`\n== postgres: not run (${pg.reason})`);
      outcomes.push({
        name: "postgres",
        passed: 0,
        failed: 1,
        note: pg.reason,
      });
      return;
    }
    try {
      await suite("postgres", DB_PATHS, { TEST_DATABASE_URL: pg.url });
    } finally {
      await pg.close();
    }
  },
};
const unknown = Deno.args.filter((name) => !(name in STAGES));
if (unknown.length) {
  console.error(
    `Unknown stage ${unknown.join(", ")}; stages: ${
      Object.keys(STAGES).join(", ")
    }`,
  );
  Deno.exit(2);
}
await Deno.mkdir(REPORTS, { recursive: true });
for (const [name, run] of Object.entries(STAGES)) {
  if (Deno.args.length === 0 || Deno.args.includes(name)) await run();
}

const passed = outcomes.reduce((n, o) => n + o.passed, 0);
const failed = outcomes.reduce((n, o) => n + o.failed, 0);
console.log("\nsuite      passed  failed");
for (const o of outcomes) {
  console.log(
    `${o.name.padEnd(10)} ${String(o.passed).padStart(6)}  ${
      String(o.failed).padStart(6)
    }${o.note ? `  (${o.note})` : ""}`,
  );
}
console.log(`${passed} passed, ${failed} failed`);
Deno.exit(failed === 0 ? 0 : 1);
