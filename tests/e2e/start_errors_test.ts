/**
 * `npm start` failures: local/start.ts run in its own process, as a
 * developer runs it, must print one line saying what failed and what to
 * do, exit 1, and show no stack trace.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { freePort } from "../../local/testing/cluster.ts";
import { createTestDatabase } from "../../local/testing/database.ts";
import { e2eTest } from "../support/e2e.ts";

const ROOT = new URL("../../", import.meta.url).pathname;

interface Failed {
  readonly line: string;
  readonly output: string;
}

/** Runs `npm start` with `args`; asserts it failed as a person expects. */
async function startFails(args: string[]): Promise<Failed> {
  const dataDir = await Deno.makeTempDir({ prefix: "start-errors-" });
  try {
    const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-all",
        "local/start.ts",
        "--data-dir",
        dataDir,
        // Mailpit's port may be taken on this machine (supabase start);
        // a test's own --mail-port comes later and wins.
        "--mail-port",
        "0",
        ...args,
      ],
      cwd: ROOT,
      // Nothing from the caller's environment decides these runs.
      env: {
        DATABASE_URL: "",
        LOCAL_DATABASE_URL: "",
        LOCAL_API_PORT: "",
        LOCAL_DB_PORT: "",
        LOCAL_MAIL_PORT: "",
        LOCAL_DATA_DIR: "",
        LOCAL_SEED: "",
      },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    const err = new TextDecoder().decode(stderr);
    const output = new TextDecoder().decode(stdout) + err;
    assert.equal(code, 1, output);
    const lines = err.split("\n").filter((l) => l.trim() !== "");
    assert.equal(lines.length, 1, err);
    assert.match(lines[0], /^npm start failed: .+\. .+\.$/);
    assert.doesNotMatch(output, /\n\s+at |Stack backtrace|Uncaught/);
    return { line: lines[0], output };
  } finally {
    await Deno.remove(dataDir, { recursive: true });
  }
}

e2eTest("npm start -- --help: prints every flag and exits 0", async () => {
  const { code, stdout } = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", "local/start.ts", "--help"],
    cwd: ROOT,
    stdin: "null",
    stdout: "piped",
    stderr: "null",
  }).output();
  const text = new TextDecoder().decode(stdout);
  assert.equal(code, 0);
  for (
    const flag of [
      "--port",
      "--db-port",
      "--mail-port",
      "--data-dir",
      "--database-url",
      "--seed",
      "--reset",
    ]
  ) {
    assert.ok(text.includes(flag), flag);
  }
});

e2eTest("npm start: an unknown flag names it and lists the flags", async () => {
  const { line } = await startFails(["--bogus"]);
  assert.match(line, /Unknown option '--bogus'/);
  assert.match(line, /--database-url <url>, --seed/);
});

e2eTest(
  "npm start: a port that is not a number names the setting",
  async () => {
    const { line } = await startFails(["--port", "abc"]);
    assert.match(
      line,
      /--port must be a port number from 0 to 65535, not "abc"/,
    );
  },
);

e2eTest(
  "npm start: an unreachable database says which one, without its password",
  async () => {
    const port = freePort();
    const { line, output } = await startFails([
      "--port",
      "0",
      "--database-url",
      `postgresql://postgres:s3cret-pw@127.0.0.1:${port}/nowhere`,
    ]);
    assert.match(
      line,
      new RegExp(
        `Cannot use the database at postgresql://postgres@127\\.0\\.0\\.1:${port}/nowhere: .*ECONNREFUSED.*Check --database-url`,
      ),
    );
    assert.doesNotMatch(output, /s3cret-pw/);
  },
);

e2eTest(
  "npm start: a database URL whose password has a raw # or @ (a pasted pooler URL) is never echoed, password or pieces of it",
  async () => {
    for (
      const password of ["my#Secret!Pass", "my@Secret#Pass", "my/Secret@Pass"]
    ) {
      const { line, output } = await startFails([
        "--port",
        "0",
        "--database-url",
        `postgresql://postgres.abcdefghij:${password}@127.0.0.1:6543/postgres`,
      ]);
      assert.match(
        line,
        /Cannot use the database at postgresql:\/\/postgres\.abcdefghij@127\.0\.0\.1:6543\/postgres: /,
      );
      assert.match(line, /percent-encode/);
      assert.doesNotMatch(output, /Secret|Pass/, password);
    }
  },
);

// A port held by another program: start stops with one line naming the
// port and the flag that moves it.
async function portTaken(flag: string): Promise<void> {
  const held = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = held.addr as Deno.NetAddr;
  try {
    const { line } = await startFails(
      flag === "--port"
        ? [flag, String(port)]
        : ["--port", "0", flag, String(port)],
    );
    assert.match(
      line,
      new RegExp(`Port ${port} on 127\\.0\\.0\\.1 is already in use.*${flag}`),
    );
  } finally {
    held.close();
  }
}

e2eTest(
  "npm start: an API port in use says so and names --port",
  () => portTaken("--port"),
);

e2eTest(
  "npm start: a mail port in use (supabase start's Mailpit) says so and names --mail-port",
  () => portTaken("--mail-port"),
);

e2eTest(
  "npm start: a PGlite port in use says so and names --db-port",
  () => portTaken("--db-port"),
);

e2eTest(
  "npm start: a migration the database refuses names the file and the server's error",
  async () => {
    const db = await createTestDatabase();
    try {
      const sql = postgres(db.url, {
        max: 1,
        prepare: false,
        onnotice: () => {},
      });
      // Someone's own table of that name, in another shape.
      await sql`create table public.auth_sync_audit (id integer)`;
      await sql.end();
      const { line } = await startFails([
        "--port",
        "0",
        "--database-url",
        db.url,
      ]);
      assert.match(
        line,
        /The database refused 20261122080100_create_auth_sync_audit\.sql: column "actor_auth_user_id" .* does not exist \(SQLSTATE 42703\)\. Fix the table/,
      );
    } finally {
      await db.close();
    }
  },
);
