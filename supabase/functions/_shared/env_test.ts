import assert from "node:assert/strict";
import { FUNCTION_SETTINGS, parseAdminEmails, readEnv } from "./env.ts";
import { HttpError } from "./errors.ts";

const full: Record<string, string> = {
  SUPABASE_URL: "http://127.0.0.1:54321/",
  SUPABASE_ANON_KEY: "anon",
  SUPABASE_SERVICE_ROLE_KEY: "service",
  SUPABASE_DB_URL: "postgresql://u:p@h/db",
};
const from = (vars: Record<string, string>) => (name: string) => vars[name];

Deno.test("readEnv: reads every variable and trims the URL's slash", () => {
  const env = readEnv(
    from({ ...full, ADMIN_EMAILS: "A@x.io", DB_POOL_MAX: "7" }),
  );
  assert.equal(env.supabaseUrl, "http://127.0.0.1:54321");
  assert.equal(env.serviceRoleKey, "service");
  assert.deepEqual([...env.adminEmails], ["a@x.io"]);
  assert.equal(env.dbPoolMax, 7);
});

Deno.test("readEnv: SUPABASE_SERVICE_KEY stands in for SUPABASE_SERVICE_ROLE_KEY", () => {
  const { SUPABASE_SERVICE_ROLE_KEY: _, ...rest } = full;
  const env = readEnv(from({ ...rest, SUPABASE_SERVICE_KEY: "legacy" }));
  assert.equal(env.serviceRoleKey, "legacy");
});

Deno.test("readEnv: reports every missing or empty variable at once as 500 missing_env", () => {
  assert.throws(
    () => readEnv(from({ SUPABASE_URL: "http://x", SUPABASE_ANON_KEY: "  " })),
    (e: unknown) => {
      assert.ok(e instanceof HttpError);
      assert.equal(e.status, 500);
      assert.equal(e.code, "missing_env");
      assert.deepEqual(e.extra.missing, {
        SUPABASE_URL: false,
        SUPABASE_ANON_KEY: true,
        SUPABASE_SERVICE_ROLE_KEY_or_SUPABASE_SERVICE_KEY: true,
        SUPABASE_DB_URL: true,
      });
      return true;
    },
  );
});

Deno.test("readEnv: unset or blank settings take their defaults", () => {
  const env = readEnv(from({ ...full, DB_POOL_MAX: " ", PRESENCE_VERIFY: "" }));
  assert.equal(env.dbPoolMax, 2);
  assert.equal(env.dbStatementTimeoutMs, 3000);
  assert.equal(env.presenceVerify, "local");
  assert.equal(env.presenceMinWriteIntervalS, 0);
  assert.equal(env.usernameMatchDomains.size, 0);
});

Deno.test("readEnv: settings are read trimmed and case-insensitively where they are words", () => {
  const env = readEnv(from({
    ...full,
    PRESENCE_VERIFY: " AUTH ",
    PRESENCE_MIN_WRITE_INTERVAL_S: "60",
    USERNAME_MATCH_DOMAINS: " Example.com, corp.example.org ,",
  }));
  assert.equal(env.presenceVerify, "auth");
  assert.equal(env.presenceMinWriteIntervalS, 60);
  assert.deepEqual([...env.usernameMatchDomains], [
    "example.com",
    "corp.example.org",
  ]);
});

Deno.test("readEnv: bad setting values are refused with 500 invalid_env naming each setting", () => {
  assert.throws(
    () =>
      readEnv(from({
        ...full,
        DB_POOL_MAX: "abc",
        PRESENCE_VERIFY: "getuser",
        PRESENCE_MIN_WRITE_INTERVAL_S: "-1",
        USERNAME_MATCH_DOMAINS: "example.com,@bad",
      })),
    (e: unknown) => {
      assert.ok(e instanceof HttpError);
      assert.equal(e.status, 500);
      assert.equal(e.code, "invalid_env");
      const invalid = e.extra.invalid as Record<string, string>;
      assert.deepEqual(Object.keys(invalid).sort(), [
        "DB_POOL_MAX",
        "PRESENCE_MIN_WRITE_INTERVAL_S",
        "PRESENCE_VERIFY",
        "USERNAME_MATCH_DOMAINS",
      ]);
      // What is expected, never the value given.
      assert.ok(!JSON.stringify(invalid).includes("getuser"));
      return true;
    },
  );
  assert.throws(
    () => readEnv(from({ ...full, DB_POOL_MAX: "0" })),
    (e: unknown) =>
      e instanceof HttpError && e.code === "invalid_env" &&
      "DB_POOL_MAX" in (e.extra.invalid as object),
  );
});

Deno.test("parseAdminEmails: trims, lower-cases and drops empty entries", () => {
  assert.deepEqual(
    [...parseAdminEmails(" Ana@Example.com, ,bo@x.io,")],
    ["ana@example.com", "bo@x.io"],
  );
  assert.equal(parseAdminEmails(undefined).size, 0);
});

Deno.test("readEnv: presence thresholds default to 300 s (away) and 900 s (offline)", () => {
  const env = readEnv(from(full));
  assert.equal(env.presenceAwayAfterS, 300);
  assert.equal(env.presenceOfflineAfterS, 900);
  const set = readEnv(from({
    ...full,
    PRESENCE_AWAY_AFTER_S: " 120 ",
    PRESENCE_OFFLINE_AFTER_S: "600",
  }));
  assert.equal(set.presenceAwayAfterS, 120);
  assert.equal(set.presenceOfflineAfterS, 600);
});

/**
 * The `invalid` of the 500 invalid_env that `full` with `vars` gives
 * (fails the test if it is accepted).
 */
function invalidEnv(vars: Record<string, string>): Record<string, string> {
  try {
    readEnv(from({ ...full, ...vars }));
  } catch (e) {
    assert.ok(e instanceof HttpError);
    assert.equal(e.code, "invalid_env");
    return e.extra.invalid as Record<string, string>;
  }
  assert.fail(`accepted: ${JSON.stringify(vars)}`);
}

Deno.test("readEnv: presence thresholds refuse bad values and away >= offline with 500 invalid_env", () => {
  const invalidOf = (vars: Record<string, string>) =>
    Object.keys(invalidEnv(vars)).sort();
  assert.deepEqual(invalidOf({ PRESENCE_AWAY_AFTER_S: "soon" }), [
    "PRESENCE_AWAY_AFTER_S",
  ]);
  assert.deepEqual(invalidOf({ PRESENCE_OFFLINE_AFTER_S: "0" }), [
    "PRESENCE_OFFLINE_AFTER_S",
  ]);
  assert.deepEqual(invalidOf({ PRESENCE_AWAY_AFTER_S: "1.5" }), [
    "PRESENCE_AWAY_AFTER_S",
  ]);
  assert.deepEqual(
    invalidOf({
      PRESENCE_AWAY_AFTER_S: "900",
      PRESENCE_OFFLINE_AFTER_S: "900",
    }),
    ["PRESENCE_OFFLINE_AFTER_S"],
  );
  assert.deepEqual(invalidOf({ PRESENCE_AWAY_AFTER_S: "1000" }), [
    "PRESENCE_OFFLINE_AFTER_S",
  ]);
});

const NEW_KEYS: Record<string, string> = {
  SUPABASE_URL: "http://127.0.0.1:54321",
  SUPABASE_PUBLISHABLE_KEYS: JSON.stringify({
    web: "sb_publishable_web",
    default: "sb_publishable_default",
  }),
  SUPABASE_SECRET_KEYS: JSON.stringify({
    backoffice: "sb_secret_backoffice",
    default: "sb_secret_default",
  }),
  SUPABASE_DB_URL: "postgresql://u:p@h/db",
};

Deno.test("readEnv: SUPABASE_PUBLISHABLE_KEYS and SUPABASE_SECRET_KEYS satisfy the key variables, the default key first", () => {
  const env = readEnv(from(NEW_KEYS));
  assert.equal(env.anonKey, "sb_publishable_default");
  assert.equal(env.serviceRoleKey, "sb_secret_default");
  assert.deepEqual(env.secretKeys, [
    { name: "default", key: "sb_secret_default" },
    { name: "backoffice", key: "sb_secret_backoffice" },
  ]);
  assert.deepEqual(env.publishableKeys, [
    "sb_publishable_default",
    "sb_publishable_web",
  ]);
  assert.equal(env.jwks, null);
});

Deno.test("readEnv: the new key variables win over the legacy ones, which stay accepted as secret keys", () => {
  const env = readEnv(from({ ...full, ...NEW_KEYS }));
  assert.equal(env.anonKey, "sb_publishable_default");
  assert.equal(env.serviceRoleKey, "sb_secret_default");
  assert.deepEqual(env.secretKeys, [
    { name: "default", key: "sb_secret_default" },
    { name: "backoffice", key: "sb_secret_backoffice" },
    { name: "service_role", key: "service" },
  ]);
  assert.deepEqual(env.publishableKeys, [
    "sb_publishable_default",
    "sb_publishable_web",
    "anon",
  ]);
});

Deno.test("readEnv: without any key variable, missing_env names the legacy members", () => {
  const { SUPABASE_SECRET_KEYS: _, ...noSecret } = NEW_KEYS;
  assert.throws(() => readEnv(from(noSecret)), (e: unknown) => {
    assert.ok(e instanceof HttpError);
    assert.equal(e.code, "missing_env");
    assert.deepEqual(e.extra.missing, {
      SUPABASE_URL: false,
      SUPABASE_ANON_KEY: false,
      SUPABASE_SERVICE_ROLE_KEY_or_SUPABASE_SERVICE_KEY: true,
      SUPABASE_DB_URL: false,
    });
    return true;
  });
});

Deno.test("readEnv: a key variable or SUPABASE_JWKS that is not the platform's JSON gives 500 invalid_env naming it", () => {
  assert.throws(
    () =>
      readEnv(from({
        ...full,
        SUPABASE_SECRET_KEYS: "sb_secret_plain",
        SUPABASE_PUBLISHABLE_KEYS: '["sb_publishable_x"]',
        SUPABASE_JWKS: '{"keys": "none"}',
      })),
    (e: unknown) => {
      assert.ok(e instanceof HttpError);
      assert.equal(e.code, "invalid_env");
      assert.deepEqual(Object.keys(e.extra.invalid as object).sort(), [
        "SUPABASE_JWKS",
        "SUPABASE_PUBLISHABLE_KEYS",
        "SUPABASE_SECRET_KEYS",
      ]);
      return true;
    },
  );
});

Deno.test("readEnv: SUPABASE_JWKS is read as an object with keys or a bare array", () => {
  const key = { kty: "EC", crv: "P-256", x: "x", y: "y", kid: "k1" };
  assert.deepEqual(
    readEnv(from({ ...full, SUPABASE_JWKS: JSON.stringify({ keys: [key] }) }))
      .jwks,
    { keys: [key] },
  );
  assert.deepEqual(
    readEnv(from({ ...full, SUPABASE_JWKS: JSON.stringify([key]) })).jwks,
    { keys: [key] },
  );
});

Deno.test("readEnv: PRESENCE_DB_URL (the transaction pooler) wins over SUPABASE_DB_URL, which it can stand in for", () => {
  const pooler =
    "postgresql://postgres.ref:pw@aws-0-eu-west-1.pooler.supabase.com:6543/postgres";
  assert.equal(
    readEnv(from({ ...full, PRESENCE_DB_URL: ` ${pooler} ` })).dbUrl,
    pooler,
  );
  assert.equal(readEnv(from(full)).dbUrl, full.SUPABASE_DB_URL);
  const { SUPABASE_DB_URL: _, ...rest } = full;
  assert.equal(
    readEnv(from({ ...rest, PRESENCE_DB_URL: pooler })).dbUrl,
    pooler,
  );
});

Deno.test("readEnv: DB_STATEMENT_TIMEOUT_MS and a database URL it cannot use are refused with 500 invalid_env naming the setting, never the value", () => {
  assert.equal(
    readEnv(from({ ...full, DB_STATEMENT_TIMEOUT_MS: "1500" }))
      .dbStatementTimeoutMs,
    1500,
  );
  assert.throws(
    () =>
      readEnv(from({
        ...full,
        DB_STATEMENT_TIMEOUT_MS: "5",
        PRESENCE_DB_URL: "postgresql://u:s3cret@h/db?sslmode=sometimes",
      })),
    (e: unknown) => {
      assert.ok(e instanceof HttpError);
      assert.equal(e.code, "invalid_env");
      const invalid = e.extra.invalid as Record<string, string>;
      assert.deepEqual(Object.keys(invalid).sort(), [
        "DB_STATEMENT_TIMEOUT_MS",
        "PRESENCE_DB_URL",
      ]);
      assert.match(invalid.PRESENCE_DB_URL, /sslmode/);
      assert.ok(!JSON.stringify(invalid).includes("s3cret"));
      return true;
    },
  );
});

Deno.test("readEnv: a SUPABASE_URL that is not an http(s) URL, and a service key of another kind (publishable, the anon JWT), are refused with 500 invalid_env naming the variable, never the value", () => {
  // A JWT's header and payload as the CLI's keys have them (unsigned here:
  // only the role is read).
  const jwt = (role: string) =>
    [{ alg: "HS256", typ: "JWT" }, { iss: "supabase-demo", role }]
      .map((part) => btoa(JSON.stringify(part)).replace(/=+$/, ""))
      .join(".") + ".c2lnbmF0dXJl";
  const refusal = (vars: Record<string, string>) => {
    const invalid = invalidEnv(vars);
    for (const value of Object.values(vars)) {
      assert.ok(!JSON.stringify(invalid).includes(value), value);
    }
    return invalid;
  };
  for (const url of ["ref.supabase.co", "ftp://ref.supabase.co", "not a url"]) {
    assert.match(refusal({ SUPABASE_URL: url }).SUPABASE_URL, /project's URL/);
  }
  assert.match(
    refusal({ SUPABASE_SERVICE_ROLE_KEY: jwt("anon") })
      .SUPABASE_SERVICE_ROLE_KEY,
    /a JWT whose role is anon: the service_role key/,
  );
  assert.match(
    refusal({
      SUPABASE_SECRET_KEYS: JSON.stringify({ default: "sb_publishable_abc" }),
    }).SUPABASE_SECRET_KEYS,
    /holds a publishable key/,
  );
  assert.match(
    refusal({ SUPABASE_SERVICE_KEY: jwt("x-custom") }).SUPABASE_SERVICE_KEY,
    /role is not service_role/,
  );
  // The right kinds, and keys it cannot read (opaque), pass.
  for (
    const key of [jwt("service_role"), "sb_secret_abc", "opaque-service-key"]
  ) {
    assert.equal(
      readEnv(from({ ...full, SUPABASE_SERVICE_ROLE_KEY: key })).serviceRoleKey,
      key,
    );
  }
  assert.equal(
    readEnv(from({ ...full, SUPABASE_URL: "https://ref.supabase.co" }))
      .supabaseUrl,
    "https://ref.supabase.co",
  );
});

Deno.test("supabase/functions/.env.example: lists every function setting, commented out, with its default where it has one", async () => {
  const example = await Deno.readTextFile(
    new URL("../.env.example", import.meta.url),
  );
  assert.ok(!/^[A-Z]/m.test(example), "no setting is set uncommented");
  // Shown with an example value rather than the default (which is empty).
  const examples = new Set([
    "ADMIN_EMAILS",
    "USERNAME_MATCH_DOMAINS",
    "PRESENCE_TOKEN_ISSUER",
  ]);
  for (const name of FUNCTION_SETTINGS) {
    const value = new RegExp(`^# ${name}=(.*)$`, "m").exec(example)?.[1];
    assert.ok(value !== undefined, name);
    const read = readEnv(from({ ...full, [name]: value }));
    if (!examples.has(name)) assert.deepEqual(read, readEnv(from(full)), name);
  }
});
