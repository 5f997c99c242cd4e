import assert from "node:assert/strict";
import { createClient } from "@supabase/supabase-js";
import postgres from "postgres";
import { ADMIN_STAMP } from "../supabase/functions/_shared/email_proof.ts";
import { SEED_IDENTITIES } from "./fixture.ts";
import { seedIdentities } from "./seed_identities.ts";
import { startStack } from "./stack.ts";
import { createTestDatabase } from "./testing/database.ts";

Deno.test("seedIdentities: only the fixture's ADMIN_EMAILS identity is stamped, it reads as an administrator, and a later start stamps it again", async () => {
  const db = Deno.env.get("TEST_DATABASE_URL")
    ? await createTestDatabase()
    : null;
  const stack = await startStack({
    apiPort: 0,
    dbPort: 0,
    dataDir: null,
    databaseUrl: db?.url,
  });
  const sql = postgres(stack.dbUrl, { max: 1, prepare: false });
  try {
    const stamped = await sql`
      select email from auth.users
      where raw_app_meta_data ->> ${ADMIN_STAMP} = email order by email`;
    assert.deepEqual(
      stamped.map((r) => r.email),
      SEED_IDENTITIES.filter((s) => s.adminVerified).map((s) => s.email),
    );
    const jefa = SEED_IDENTITIES.find((s) => s.email === "jefa@example.com")!;
    const client = createClient(stack.apiUrl, stack.anonKey, {
      auth: { persistSession: false, autoRefreshToken: false },
    });
    const signIn = await client.auth.signInWithPassword(jefa);
    assert.equal(signIn.error, null);
    const read = async () => {
      const { data, error } = await client.functions.invoke("presence", {
        body: { ids: [1] },
      });
      return error ? error.context.status : data.users[0].correo;
    };
    assert.equal(await read(), "ana@example.com");

    // A data folder seeded before the stamp existed: the account is there,
    // unstamped, and has no rights (no row, so 404).
    const admin = createClient(stack.apiUrl, stack.serviceRoleKey, {
      auth: { persistSession: false, autoRefreshToken: false },
    });
    const unstamped = await admin.auth.admin.updateUserById(jefa.id, {
      app_metadata: { [ADMIN_STAMP]: null },
    });
    assert.equal(unstamped.error, null);
    assert.equal(await read(), 404);
    await seedIdentities(stack.apiUrl, stack.serviceRoleKey);
    assert.equal(await read(), "ana@example.com");
  } finally {
    await sql.end();
    await stack.close();
    await db?.close();
  }
});

// `deno task seed:identities`, as a developer runs it after `supabase db
// reset`, with `env` in the shell.
async function seedTask(env: Record<string, string>) {
  const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", "--no-check", "local/seed_identities.ts"],
    cwd: new URL("../", import.meta.url).pathname,
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code, out: text(stdout), err: text(stderr) };
}

Deno.test("seed:identities: with no key in the shell it uses the local service_role key, which the local Auth accepts", async () => {
  const stack = await startStack({
    apiPort: 0,
    dbPort: 0,
    dataDir: null,
    seed: false,
  });
  try {
    const run = await seedTask({
      SUPABASE_URL: stack.apiUrl,
      SUPABASE_SERVICE_ROLE_KEY: "",
    });
    assert.equal(run.code, 0, run.err);
    assert.match(
      run.out,
      new RegExp(`Seeded ${SEED_IDENTITIES.length} identities`),
    );
    const sql = postgres(stack.dbUrl, { max: 1, prepare: false });
    try {
      const [{ n }] = await sql`select count(*)::int as n from auth.users`;
      assert.equal(n, SEED_IDENTITIES.length);
    } finally {
      await sql.end();
    }
  } finally {
    await stack.close();
  }
});

Deno.test("seed:identities: a SUPABASE_URL left in the shell for a hosted project is refused before any request", async () => {
  const run = await seedTask({
    SUPABASE_URL: "https://abcdefghijklmnop.supabase.co",
    SUPABASE_SERVICE_ROLE_KEY: "a-hosted-key",
  });
  assert.equal(run.code, 1);
  assert.match(
    run.err,
    /seed:identities refused: SUPABASE_URL \(abcdefghijklmnop\.supabase\.co\) is not this machine/,
  );
  assert.ok(!run.err.includes("a-hosted-key"));
});

Deno.test("seed:identities: a SUPABASE_URL that is not an http(s) URL is refused in one line, before any request", async () => {
  // Without a scheme, and one URL reads as a scheme with an empty host.
  for (const url of ["abcdefghijklmnop.supabase.co", "project.co:54321"]) {
    const run = await seedTask({
      SUPABASE_URL: url,
      SUPABASE_SERVICE_ROLE_KEY: "a-hosted-key",
    });
    assert.equal(run.code, 1, url);
    assert.equal(
      run.err.trim(),
      "seed:identities refused: SUPABASE_URL is not an http(s) URL (expected e.g. http://127.0.0.1:54321). Unset it to seed the local stack.",
    );
  }
});
