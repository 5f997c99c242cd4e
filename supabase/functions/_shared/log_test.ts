import assert from "node:assert/strict";
import { forRequest, logEvent, redact } from "./log.ts";

Deno.test("redact: removes JWTs, API keys, URL credentials and passwords", () => {
  const jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl";
  const text = redact(
    `token ${jwt} key sb_secret_abc123 db postgresql://postgres:hunter2@db:5432/x password=hunter2`,
  );
  assert.ok(!text.includes(jwt));
  assert.ok(!text.includes("sb_secret_abc123"));
  assert.ok(!text.includes("hunter2"));
  assert.ok(text.includes("postgresql://[redacted]@db:5432/x"));
});

Deno.test("redact: leaves ordinary text alone", () => {
  assert.equal(
    redact('column "correo" does not exist'),
    'column "correo" does not exist',
  );
});

Deno.test("redact: a password value after = or : is removed in every notation", () => {
  for (
    const text of [
      '{"password":"hunter2"}',
      "{'password': 'hunter2'}",
      "password=hunter2&x=1",
      "new_password: hunter2",
      'PASSWORD = "hunter2"',
    ]
  ) {
    assert.ok(!redact(text).includes("hunter2"), text);
  }
});

Deno.test("redact: Auth's password messages stay word for word", () => {
  for (
    const text of [
      "Password should be at least 6 characters.",
      "Password should contain at least one character of each: abc, ABC, 123.",
      "New password should be different from the old password.",
    ]
  ) {
    assert.equal(redact(text), text);
  }
});

Deno.test("forRequest: every line written under it, however deep and after awaits, carries its request_id; two requests at once keep their own", async () => {
  const lines: Record<string, unknown>[] = [];
  const saved = { log: console.log, warn: console.warn };
  console.log = console.warn = (text: string) => lines.push(JSON.parse(text));
  try {
    const deep = async (n: number) => {
      await new Promise((r) => setTimeout(r, 5 * n));
      logEvent("warn", "deep", { n });
    };
    await Promise.all([
      forRequest("req-a", () => deep(2)),
      forRequest("req-b", () => deep(1)),
    ]);
    logEvent("info", "outside");
  } finally {
    Object.assign(console, saved);
  }
  assert.deepEqual(lines, [
    { level: "warn", msg: "deep", request_id: "req-b", n: 1 },
    { level: "warn", msg: "deep", request_id: "req-a", n: 2 },
    { level: "info", msg: "outside" },
  ]);
});

Deno.test("redact: credentials with @, / or a space in a URL, escaped quotes and commas in a password, Auth's tokens and PKCE verifier, and strings deep in a field are removed (logs L3)", () => {
  const cases: [string, string][] = [
    [
      "postgresql://postgres:p@ssw0rd@db.ref.supabase.co:5432/postgres",
      "ssw0rd",
    ],
    ["postgresql://postgres:pa/ss@db:5432/postgres", "pa/ss"],
    ['{"password":"ab\\"cd,ef"}', "cd,ef"],
    ["password=hunter2,tail", "tail"],
    ["grant_type=refresh_token&refresh_token=r3fr3sh", "r3fr3sh"],
    ['{"refresh_token":"r3fr3sh","token_type":"bearer"}', "r3fr3sh"],
    ["/auth/v1/verify?token=pkce_0123abc&type=signup", "pkce_0123abc"],
    ['{"code_verifier":"v3rifier-xyz"}', "v3rifier-xyz"],
    ["apikey=sb_secret_abc/def+ghi", "def+ghi"],
  ];
  for (const [text, secret] of cases) {
    const out = redact(text);
    assert.ok(!out.includes(secret), `${text} -> ${out}`);
  }
  // What is not a secret stays.
  assert.equal(
    redact('{"token_type":"bearer","code":"invalid_token"}'),
    '{"token_type":"bearer","code":"invalid_token"}',
  );
  const lines: string[] = [];
  const saved = console.log;
  console.log = (line: string) => lines.push(line);
  try {
    logEvent("info", "deep", {
      list: ["postgresql://u:s3cret@h/db"],
      nested: { password: "x", url: "https://u:s3cret@h" },
    });
  } finally {
    console.log = saved;
  }
  assert.ok(!lines[0].includes("s3cret"), lines[0]);
});

Deno.test("redact: a prefixed password key in JSON is removed to its closing quote", () => {
  const out = redact('{"new_password":"a\\"b,c d"}');
  assert.equal(out, '{"new_password":"[redacted]"}');
});
