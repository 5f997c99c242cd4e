/**
 * `npm test` / `deno task test`: format, lint and type checks, the unit
 * tests, then the database-backed tests (Auth stand-in and end to end) once
 * on PGlite and once on a real PostgreSQL. Ends with one plain line
 * `N passed, N failed` counted from the runs' JUnit reports.
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
  const { code } = await new Deno.Command(deno, { args, cwd: ROOT }).output();
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
  const { code } = await new Deno.Command(deno, {
    args: [
      "test",
      "--allow-all",
      "--no-check",
      `--junit-path=${report}`,
      ...paths,
    ],
    cwd: ROOT,
    env,
  }).output();
  let passed = 0, failed = 0;
  try {
    const xml = await Deno.readTextFile(report);
    const head = /<testsuites[^>]*>/.exec(xml)?.[0] ?? "";
    const total = Number(/tests="(\d+)"/.exec(head)?.[1] ?? 0);
    failed = Number(/failures="(\d+)"/.exec(head)?.[1] ?? 0) +
      Number(/errors="(\d+)"/.exec(head)?.[1] ?? 0);
    passed = total - failed;
    // The runs' own output is not shown (function logs are long): name what failed.
    for (
      const m of xml.matchAll(/<testcase name="([^"]*)"[^>]*>\s*<failure/g)
    ) {
      console.log(`FAILED (${name}): ${m[1]}`);
    }
  } catch {
    // No report: the run crashed before reporting.
  }
  if (code !== 0 && failed === 0) failed = 1;
  outcomes.push({ name, passed, failed });
}

await Deno.mkdir(REPORTS, { recursive: true });
await check("fmt", ["fmt", "--check"]);
await check("lint", ["lint"]);
await check("check", [
  "check",
  "supabase/functions",
  "local",
  "tests",
  "bench",
  "scripts",
  "client",
]);
await suite("unit", ["supabase/functions", "client"]);
const dbPaths = ["local", "tests/e2e", "tests/verify"];
await suite("pglite", dbPaths, { TEST_DATABASE_URL: "" });
// TEST_DATABASE_URL, or a throw-away cluster of the run's own: the suite
// never starts, stops or alters a cluster it did not create.
const pg = await testPostgres();
if (pg.url !== null) {
  try {
    await suite("postgres", dbPaths, { TEST_DATABASE_URL: pg.url });
  } finally {
    await pg.close();
  }
} else {
  console.log(`\n== postgres: not run (${pg.reason})`);
  outcomes.push({ name: "postgres", passed: 0, failed: 1, note: pg.reason });
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
