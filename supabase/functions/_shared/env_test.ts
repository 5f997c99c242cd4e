import assert from "node:assert/strict";
import { parseAdminEmails, readEnv } from "./env.ts";
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

Deno.test("readEnv: a bad DB_POOL_MAX falls back to 4", () => {
  assert.equal(readEnv(from({ ...full, DB_POOL_MAX: "-2" })).dbPoolMax, 4);
});

Deno.test("parseAdminEmails: trims, lower-cases and drops empty entries", () => {
  assert.deepEqual(
    [...parseAdminEmails(" Ana@Example.com, ,bo@x.io,")],
    ["ana@example.com", "bo@x.io"],
  );
  assert.equal(parseAdminEmails(undefined).size, 0);
});
