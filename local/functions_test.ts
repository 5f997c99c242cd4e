import assert from "node:assert/strict";
import { functionEnv } from "./functions.ts";

const STACK = {
  apiUrl: "http://127.0.0.1:54321",
  dbUrl: "postgresql://postgres:postgres@127.0.0.1:54322/postgres",
  anonKey: "anon-key",
  serviceRoleKey: "service-key",
};

Deno.test("functionEnv: supabase/functions/.env sets the functions' own settings, never the platform's names nor PRESENCE_DB_URL (a hosted project's pooler string kept there), which is said once without its value", () => {
  const lines: string[] = [];
  const hosted =
    "postgresql://postgres.ref:s3cret@aws-0-eu-west-1.pooler.supabase.com:6543/postgres";
  const env = functionEnv({
    ...STACK,
    dotenv: {
      PRESENCE_DB_URL: hosted,
      SUPABASE_DB_URL: hosted,
      SUPABASE_URL: "https://ref.supabase.co",
      PRESENCE_AWAY_AFTER_S: "120",
    },
    log: (line) => lines.push(line),
  });
  assert.equal(env.get("PRESENCE_DB_URL"), undefined);
  assert.equal(env.get("SUPABASE_DB_URL"), STACK.dbUrl);
  assert.equal(env.get("SUPABASE_URL"), STACK.apiUrl);
  assert.equal(env.get("PRESENCE_AWAY_AFTER_S"), "120");
  assert.equal(lines.length, 1);
  assert.match(lines[0], /\.env sets PRESENCE_DB_URL, which npm start ignores/);
  assert.ok(!lines[0].includes("s3cret"));
});
