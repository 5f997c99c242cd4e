/**
 * What the suite needs from the machine beyond `npm ci`, each a test of its
 * own: when one is missing, the run names it and says how to install it,
 * instead of the tests that need it vanishing from the count.
 */
import assert from "node:assert/strict";
import { toolVersion } from "../../bench/load.ts";
import { clusterUnavailable } from "../../local/testing/cluster.ts";
import { APP_NODE_MAJOR, appNode } from "../support/node.ts";
import { pgbouncerPath } from "../support/pgbouncer.ts";

/**
 * `path --version`'s first line, or a failure naming the Debian package to
 * install (and the setting that points elsewhere, if any).
 */
function _version(path: string, pkg: string, setting?: string) {
  return toolVersion(
    path,
    `No ${path}: install Debian's ${pkg} (apt-get install ${pkg})${
      setting ? ` or set ${setting}` : ""
    }`,
  );
}

Deno.test("prerequisite: Chromium for the browser tests is installed (CHROMIUM_PATH, default /usr/bin/chromium)", async () => {
  const path = Deno.env.get("CHROMIUM_PATH") ?? "/usr/bin/chromium";
  const version = await _version(path, "chromium", "CHROMIUM_PATH");
  assert.match(version, /Chromium|Chrome/, `${path} --version: ${version}`);
});

Deno.test("prerequisite: PostgreSQL server programs (initdb) for the run on a real PostgreSQL are installed, or TEST_DATABASE_URL is set", () => {
  if (Deno.env.get("TEST_DATABASE_URL")) return;
  const why = clusterUnavailable();
  assert.equal(why, null, `${why}, or set TEST_DATABASE_URL`);
});

Deno.test("prerequisite: pgbouncer, the transaction pooler the functions are tested through on PostgreSQL (tests/e2e/pooler_test.ts), is installed (PGBOUNCER_PATH, default /usr/sbin/pgbouncer)", async () => {
  const path = pgbouncerPath();
  const version = await _version(path, "pgbouncer", "PGBOUNCER_PATH");
  assert.match(version, /PgBouncer/, `${path} --version: ${version}`);
});

for (const [tool, pkg] of [["wrk", "wrk"], ["pgbench", "postgresql"]]) {
  Deno.test(`prerequisite: ${tool}, for the benchmark's tests (bench/), is installed`, async () => {
    await _version(tool, pkg);
  });
}

Deno.test(`prerequisite: a Node ${APP_NODE_MAJOR} for the app example (npm ci installs it)`, async () => {
  // appNode() throws with the cause and what to do.
  assert.ok(await appNode());
});
