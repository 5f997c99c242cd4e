import assert from "node:assert/strict";
import { createClient } from "@supabase/supabase-js";
import postgres from "postgres";
import { startPgliteServer } from "./db/pglite_server.ts";
import { configPorts, startStack } from "./stack.ts";
import { createTestDatabase } from "./testing/database.ts";

Deno.test("startStack: Auth works through the pool it is given (ended with the stack), and onResponse sees every answered request with its status", async () => {
  const db = Deno.env.get("TEST_DATABASE_URL")
    ? await createTestDatabase()
    : null;
  // The pool is made before the stack starts, so its database is too.
  const pglite = db ? null : await startPgliteServer({ port: 0 });
  const url = db?.url ?? pglite!.url;
  const queries: string[] = [];
  const authSql = postgres(url, {
    max: 2,
    prepare: false,
    onnotice: () => {},
    debug: (_conn, query) => queries.push(query),
  });
  const seen: string[] = [];
  const stack = await startStack({
    apiPort: 0,
    dataDir: null,
    databaseUrl: url,
    authSql,
    onResponse: (req, res) =>
      seen.push(`${new URL(req.url).pathname} ${res.status}`),
  });
  try {
    // The seeded identities went through the API as it started.
    assert.ok(seen.includes("/auth/v1/admin/users 200"));
    seen.length = 0;
    const client = createClient(stack.apiUrl, stack.anonKey, {
      auth: { persistSession: false, autoRefreshToken: false },
    });
    const signUp = await client.auth.signUp({
      email: `pool-${crypto.randomUUID()}@example.com`,
      password: "a-long-password",
    });
    assert.equal(signUp.error, null);
    assert.ok(signUp.data.session, "signed up and in (no confirmation)");
    assert.ok(
      queries.some((q) => /insert into auth\.users/i.test(q)),
      "the sign-up wrote auth.users through the given pool",
    );
    const ping = await fetch(`${stack.apiUrl}/functions/v1/presence-ping`, {
      method: "POST",
      headers: { Authorization: "Bearer not-a-jwt" },
    });
    await ping.body?.cancel();
    assert.deepEqual(seen, [
      "/auth/v1/signup 200",
      "/functions/v1/presence-ping 401",
    ]);
  } finally {
    await stack.close();
    await pglite?.close();
    await db?.close();
  }
  await assert.rejects(authSql`select 1`, /CONNECTION_ENDED|ended/i);
});

Deno.test("configPorts: [api] port and [db] port of config.toml, the CLI's way to move ports, are npm start's defaults; 54321 and 54322 without them", () => {
  assert.deepEqual(configPorts("[api]\nport = 64321\n[db]\nport = 64322\n"), {
    api: 64321,
    db: 64322,
    mail: 54324,
  });
  assert.deepEqual(configPorts('project_id = "x"\n'), {
    api: 54321,
    db: 54322,
    mail: 54324,
  });
  assert.deepEqual(configPorts("[api]\nport = 99999\n"), {
    api: 54321,
    db: 54322,
    mail: 54324,
  });
  // The project's own file.
  assert.deepEqual(configPorts(), { api: 54321, db: 54322, mail: 54324 });
});
