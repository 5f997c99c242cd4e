import assert from "node:assert/strict";
import { createClient } from "@supabase/supabase-js";
import postgres from "postgres";
import { startPgliteServer } from "./db/pglite_server.ts";
import { StartError } from "./start_error.ts";
import { authConfig, configPorts, startStack } from "./stack.ts";
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

Deno.test("authConfig: captcha, jwt_issuer, external_url, signing_keys_path and the email provider turned off (either name) are refused at start with a line naming them; their supabase init defaults and the project's file are not", () => {
  for (
    const [toml, named] of [
      [
        '[auth.captcha]\nenabled = true\nprovider = "hcaptcha"\n',
        "[auth.captcha] enabled = true",
      ],
      [
        '[auth]\njwt_issuer = "https://issuer.example/auth/v1"\n',
        '[auth] jwt_issuer = "https://issuer.example/auth/v1"',
      ],
      [
        '[auth]\nexternal_url = "https://auth.example/auth/v1"\n',
        "[auth] external_url",
      ],
      [
        '[auth]\nsigning_keys_path = "./signing_keys.json"\n',
        "[auth] signing_keys_path",
      ],
      ["[auth.email]\nenabled = false\n", "[auth.email] enabled = false"],
      [
        "[auth.email]\nenable_signup = false\n",
        "[auth.email] enable_signup = false",
      ],
    ]
  ) {
    assert.throws(() => authConfig(toml), (error: unknown) => {
      assert.ok(error instanceof StartError, String(error));
      assert.ok(error.line().includes(named), error.line());
      assert.match(error.line(), /does not support/);
      return true;
    });
  }
  // What supabase init writes for them (apps/cli-go/pkg/config/templates/
  // config.toml), commented-out lines left out, and the project's own file.
  const init = [
    "[auth]",
    'site_url = "http://127.0.0.1:3000"',
    'jwt_issuer = ""',
    'external_url = ""',
    "[auth.email.notification.password_changed]",
    "enabled = false",
    "[auth.sms]",
    "enable_signup = false",
    "enable_confirmations = false",
    "[auth.mfa]",
    "max_enrolled_factors = 10",
    "[auth.mfa.totp]",
    "enroll_enabled = false",
    "verify_enabled = false",
    "[auth.mfa.phone]",
    "enroll_enabled = false",
    "verify_enabled = false",
    "[auth.external.apple]",
    "enabled = false",
    "[auth.web3.solana]",
    "enabled = false",
    "",
  ].join("\n");
  for (const text of [init, undefined]) {
    const refused: string[] = [];
    authConfig(text, (setting) => refused.push(setting));
    assert.deepEqual(refused, []);
  }
});

Deno.test("authConfig: notification mails, phone sign-ins, OAuth providers and MFA factors turned on start, each with a line saying it is not served (their calls fail loudly locally), so that a project with GitHub and email sign-in still starts (fresh6 L3, M2)", () => {
  for (
    const [toml, named] of [
      [
        "[auth.email.notification.password_changed]\nenabled = true\n",
        "[auth.email.notification.password_changed] enabled = true",
      ],
      ["[auth.sms]\nenable_signup = true\n", "[auth.sms] enable_signup = true"],
      ["[auth.sms]\nenabled = true\n", "[auth.sms] enabled = true"],
      [
        '[auth.external.github]\nenabled = true\nclient_id = "x"\n',
        "[auth.external.github] enabled = true",
      ],
      [
        "[auth.mfa.totp]\nenroll_enabled = true\nverify_enabled = true\n",
        "[auth.mfa.totp] enroll_enabled = true",
      ],
      [
        "[auth.mfa.web_authn]\nverify_enabled = true\n",
        "[auth.mfa.web_authn] verify_enabled = true",
      ],
    ]
  ) {
    const refused: string[] = [], notServed: string[] = [];
    authConfig(
      toml,
      (setting) => refused.push(setting),
      (setting) => notServed.push(setting),
    );
    assert.deepEqual(refused, [], toml);
    assert.ok(notServed.includes(named), `${toml}: ${notServed}`);
  }
});

Deno.test("authConfig: phone_autoconfirm is [auth.sms] enable_confirmations off, as the CLI sets GOTRUE_SMS_AUTOCONFIRM (on by default)", () => {
  assert.equal(
    authConfig('[auth]\nsite_url = "http://x"\n').phoneAutoconfirm,
    true,
  );
  assert.equal(
    authConfig("[auth.sms]\nenable_confirmations = false\n").phoneAutoconfirm,
    true,
  );
  assert.equal(
    authConfig("[auth.sms]\nenable_confirmations = true\n").phoneAutoconfirm,
    false,
  );
});
