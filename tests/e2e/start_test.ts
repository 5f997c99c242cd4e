/**
 * `npm start` as a developer runs it: local/start.ts in its own process on
 * free ports and a fresh data folder (or a fresh PostgreSQL database with
 * TEST_DATABASE_URL), driven with supabase-js as the README's quickstart
 * says, stopped with Ctrl-C, and started again on the same data.
 */
import assert from "node:assert/strict";
import { createClient } from "@supabase/supabase-js";
import postgres from "postgres";
import { freePorts } from "../../local/testing/cluster.ts";
import { createTestDatabase } from "../../local/testing/database.ts";
import { SEED_IDENTITIES } from "../../local/fixture.ts";
import { e2eTest } from "../support/e2e.ts";
import { invoke } from "../support/invoke.ts";

const ROOT = new URL("../../", import.meta.url).pathname;

interface Running {
  child: Deno.ChildProcess;
  output: () => string;
  apiUrl: string;
  anonKey: string;
}

async function start(
  args: string[],
  env: Record<string, string> = {},
): Promise<Running> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", "local/start.ts", ...args],
    cwd: ROOT,
    env,
    stdout: "piped",
    stderr: "piped",
    stdin: "null",
  }).spawn();
  let text = "";
  const decoder = new TextDecoder();
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    for await (const chunk of stream) text += decoder.decode(chunk);
  };
  void pump(child.stdout);
  void pump(child.stderr);
  const deadline = Date.now() + 90_000;
  while (!text.includes("Press Ctrl-C to stop.")) {
    if (Date.now() > deadline) throw new Error(`start timed out:\n${text}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const apiUrl = /API URL: (\S+)/.exec(text)![1];
  const anonKey = /anon key: (\S+)/.exec(text)![1];
  return { child, output: () => text, apiUrl, anonKey };
}

async function stop(running: Running): Promise<Deno.CommandStatus> {
  running.child.kill("SIGINT");
  return await running.child.status;
}

const db = Deno.env.get("TEST_DATABASE_URL")
  ? await createTestDatabase()
  : null;
const dataDir = await Deno.makeTempDir({ prefix: "stack-" });
// Three ports at once, all different: a port chosen, closed, and chosen
// again for the next setting made the stack refuse its own mail port.
const args = () => {
  const [api, pg, mail] = freePorts(3);
  return [
    "--port",
    String(api),
    "--db-port",
    String(pg),
    "--mail-port",
    String(mail),
    "--data-dir",
    dataDir,
    ...(db ? ["--database-url", db.url] : []),
  ];
};

e2eTest(
  "npm start: prints the status, serves Auth and the functions, and a seeded user goes through sign-in, refresh and sign-out",
  async () => {
    const running = await start(args());
    try {
      const out = running.output();
      for (
        const label of [
          "API URL",
          "DB URL",
          "JWT secret",
          "Publishable key",
          "Secret key",
          "anon key",
          "service_role key",
          "Mailpit URL",
        ]
      ) {
        assert.match(out, new RegExp(`${label}: \\S+`), label);
      }
      // supabase start's mail catcher address answers Mailpit's API.
      const mailpit = /Mailpit URL: (\S+)/.exec(out)![1];
      const inbox = await fetch(`${mailpit}/api/v1/messages`);
      assert.equal(inbox.status, 200);
      assert.equal(typeof (await inbox.json()).total, "number");
      for (const u of SEED_IDENTITIES) {
        assert.ok(out.includes(u.email), u.email);
      }
      assert.match(
        out,
        /Applying migration 20261122080000_create_usuarios\.sql/,
      );

      // The README's "Trying it" block, word for word, after the banner's
      // export lines, as a newcomer pastes them.
      const exports = out.split("\n").filter((l) =>
        /^\s*export (API_URL|ANON_KEY|SERVICE_ROLE_KEY)=\S+$/.test(l)
      );
      assert.equal(exports.length, 3);
      const readme = await Deno.readTextFile(
        new URL("../../README.md", import.meta.url),
      );
      const block = /### Trying it\n[\s\S]*?```sh\n([\s\S]*?)```/.exec(
        readme,
      )![1];
      const tried = await new Deno.Command("bash", {
        args: ["-euo", "pipefail", "-c", `${exports.join("\n")}\n${block}`],
        stdout: "piped",
        stderr: "piped",
      }).output();
      const said = new TextDecoder().decode(tried.stdout);
      assert.equal(
        tried.code,
        0,
        new TextDecoder().decode(tried.stderr).slice(0, 500),
      );
      assert.match(said, /"ok":true/);
      assert.match(said, /"presence_state":"offline"/);

      const ana = SEED_IDENTITIES[0];
      const client = createClient(running.apiUrl, running.anonKey, {
        auth: { persistSession: false, autoRefreshToken: false },
      });
      const signIn = await client.auth.signInWithPassword({
        email: ana.email,
        password: ana.password,
      });
      assert.equal(signIn.error, null);
      const first = signIn.data.session!;
      const me = await client.auth.getUser(first.access_token);
      assert.equal(me.data.user?.id, ana.id);

      const ping = await invoke(client, "presence-ping", {
        body: { state: "online" },
      });
      assert.equal(ping.status, 200);
      assert.equal(ping.body.user.presence_state, "online");
      const spec = await fetch(`${running.apiUrl}/api/presence-ping`, {
        method: "POST",
        headers: { Authorization: `Bearer ${first.access_token}` },
      });
      assert.equal(spec.status, 200);
      assert.equal((await spec.json()).user.id, ping.body.user.id);
      // Served as `supabase functions serve` serves it: its deployed entry,
      // in a worker of its own.
      assert.match(
        running.output(),
        /\[presence-ping\] Starting supabase\/functions\/presence-ping\/index\.ts/,
      );

      const refreshed = await client.auth.refreshSession();
      assert.equal(refreshed.error, null);
      assert.notEqual(
        refreshed.data.session!.refresh_token,
        first.refresh_token,
      );
      const current = refreshed.data.session!.access_token;
      assert.equal((await client.auth.signOut()).error, null);
      const after = await client.auth.getUser(current);
      assert.equal(after.data.user, null);
      assert.ok(after.error);
      const refused = await fetch(
        `${running.apiUrl}/functions/v1/presence-ping`,
        {
          method: "POST",
          headers: { Authorization: `Bearer ${current}` },
        },
      );
      assert.equal(refused.status, 401);
      assert.equal((await refused.json()).code, "invalid_token");
    } finally {
      const status = await stop(running);
      assert.equal(status.code, 0, running.output().slice(-2000));
    }
  },
);

e2eTest(
  "npm start: a restart on the same data applies nothing twice and keeps the users",
  async () => {
    const running = await start(args());
    try {
      const out = running.output();
      assert.match(out, /Remote database is up to date/);
      assert.doesNotMatch(out, /Applying migration/);
      const dbUrl = /DB URL: (\S+)/.exec(out)![1];
      const sql = postgres(dbUrl, {
        max: 1,
        prepare: false,
        onnotice: () => {},
      });
      try {
        const [{ rows }] =
          await sql`select count(*)::int as rows from public.usuarios`;
        assert.equal(rows, 6);
        const [{ users }] = await sql`
        select count(*)::int as users from auth.users where email like '%@example.com'
          or email like '%@elsewhere.test'`;
        assert.equal(users, SEED_IDENTITIES.length);
      } finally {
        await sql.end();
      }
      const client = createClient(running.apiUrl, running.anonKey, {
        auth: { persistSession: false, autoRefreshToken: false },
      });
      const bruno = SEED_IDENTITIES[1];
      const signIn = await client.auth.signInWithPassword({
        email: bruno.email,
        password: bruno.password,
      });
      assert.equal(signIn.error, null);
      const ping = await invoke(client, "presence-ping");
      assert.equal(ping.status, 200);
    } finally {
      assert.equal((await stop(running)).code, 0);
    }
  },
);

async function run(script: string, extra: string[]): Promise<{
  code: number;
  out: string;
  err: string;
}> {
  const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", script, ...extra],
    cwd: ROOT,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder();
  return { code, out: text.decode(stdout), err: text.decode(stderr) };
}

e2eTest(
  "npm start: a second stack on the same data folder is refused naming the first; npm run status prints the running one's URLs and keys; its lines, and the refused one's failure, are in <data dir>/logs/stack.log",
  async () => {
    const running = await start(args());
    try {
      const second = await run("local/start.ts", args());
      assert.equal(second.code, 1, second.out + second.err);
      assert.match(
        second.err,
        /^npm start failed: The data folder \S+ is in use by another local stack \(process \d+, http:\/\/127\.0\.0\.1:\d+\)\. Stop that one/,
      );
      const status = await run("local/status.ts", ["--data-dir", dataDir]);
      assert.equal(status.code, 0, status.err);
      assert.ok(status.out.includes(`API URL: ${running.apiUrl}`));
      assert.ok(status.out.includes(`anon key: ${running.anonKey}`));
      assert.ok(status.out.includes(`Inbox: ${running.apiUrl}/inbox/`));
      const log = await Deno.readTextFile(`${dataDir}/logs/stack.log`);
      assert.ok(log.includes(`Serving the API on ${running.apiUrl}`), log);
      assert.ok(
        log.includes("npm start failed: The data folder"),
        "the second one's failure is in the log too",
      );
    } finally {
      assert.equal((await stop(running)).code, 0);
    }
    const gone = await run("local/status.ts", ["--data-dir", dataDir]);
    assert.equal(gone.code, 1);
    assert.match(gone.err, /No local stack is running on/);
  },
);

e2eTest(
  "npm start --reset: starts on an empty local database, migrated and seeded again (refused with --database-url)",
  async () => {
    if (db) {
      const refused = await run("local/start.ts", [...args(), "--reset"]);
      assert.equal(refused.code, 1);
      assert.match(refused.err, /--reset deletes the local PGlite data/);
      return;
    }
    const running = await start([...args(), "--reset"]);
    try {
      const out = running.output();
      assert.match(out, /Deleted the local database in /);
      assert.match(out, /Applying migration 20261122080000_create_usuarios/);
    } finally {
      assert.equal((await stop(running)).code, 0);
    }
  },
);

e2eTest(
  "npm start: a DATABASE_URL set in the shell for another app is ignored, and said so: the stack runs on PGlite and writes nothing there",
  async () => {
    const other = await createTestDatabase();
    const dir = await Deno.makeTempDir({ prefix: "stack-env-" });
    try {
      const [api, pg] = freePorts(2);
      const running = await start([
        "--port",
        String(api),
        "--db-port",
        String(pg),
        "--mail-port",
        "0",
        "--data-dir",
        dir,
      ], { DATABASE_URL: other.url, LOCAL_DATABASE_URL: "" });
      try {
        assert.match(
          running.output(),
          /DATABASE_URL is set in this shell and ignored/,
        );
        assert.match(running.output(), /Local stack is running \(pglite\)/);
      } finally {
        assert.equal((await stop(running)).code, 0);
      }
      const sql = postgres(other.url, { max: 1, onnotice: () => {} });
      const [{ usuarios, migrations }] = await sql`
        select to_regclass('public.usuarios') is not null as usuarios,
               to_regclass('supabase_migrations.schema_migrations') is not null
                 as migrations`;
      await sql.end();
      assert.deepEqual({ usuarios, migrations }, {
        usuarios: false,
        migrations: false,
      });
    } finally {
      await other.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
);

e2eTest("npm start: cleans up its test data", async () => {
  await Deno.remove(dataDir, { recursive: true });
  await db?.close();
  await assert.rejects(Deno.stat(dataDir));
});
