import assert from "node:assert/strict";
import { statusText } from "./status.ts";

Deno.test("statusText: the URL of a database passed in is shown without its password; PGlite's well-known local one as it is", () => {
  const passedIn = statusText({
    database: "postgres",
    apiUrl: "http://127.0.0.1:54321",
    dbUrl: "postgresql://app:s3cret-Pw@db.internal:5432/app?sslmode=require",
  });
  assert.ok(!passedIn.includes("s3cret-Pw"), passedIn);
  assert.match(passedIn, /DB URL: postgresql:\/\/app@db\.internal:5432\/app/);
  const local = statusText({
    database: "pglite",
    apiUrl: "http://127.0.0.1:54321",
    dbUrl: "postgresql://postgres:postgres@127.0.0.1:54322/postgres",
  });
  assert.match(
    local,
    /DB URL: postgresql:\/\/postgres:postgres@127\.0\.0\.1:54322\/postgres/,
  );
});

Deno.test("npm run status: an unknown flag (the CLI's -o env) is one line and exit 1, not a stack trace", async () => {
  const { code, stderr } = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", "--no-check", "local/status.ts", "-o", "env"],
    cwd: new URL("../", import.meta.url).pathname,
    stdout: "null",
    stderr: "piped",
  }).output();
  const err = new TextDecoder().decode(stderr).trim();
  assert.equal(code, 1);
  assert.equal(err.split("\n").length, 1, err);
  assert.match(err, /^npm run status failed: .*'-o'.*--data-dir <path>/);
});

Deno.test("statusText: the Mailpit URL line, as supabase status prints it, only when the mail API is served", () => {
  const input = {
    database: "pglite" as const,
    apiUrl: "http://127.0.0.1:54321",
    dbUrl: "postgresql://postgres:postgres@127.0.0.1:54322/postgres",
  };
  assert.match(
    statusText({ ...input, mailUrl: "http://127.0.0.1:54324" }),
    /\n {5}Mailpit URL: http:\/\/127\.0\.0\.1:54324\n {10}DB URL:/,
  );
  assert.doesNotMatch(statusText(input), /Mailpit/);
  assert.doesNotMatch(statusText({ ...input, mailUrl: null }), /Mailpit/);
});
