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

Deno.test("redact: Auth's other token names, a PKCE code, libpq's quoted password, a password with a space and an opaque bearer are removed; prose, JSON fields and key hints stay (fresh4 L1, L2)", () => {
  const leaks: [string, string][] = [
    ['{"confirmation_token":"abc123secret"}', "abc123secret"],
    ['{"hashed_token":"hh1"}', "hh1"],
    ['{"recovery_token":"rt9"}', "rt9"],
    ['{"provider_token":"gho_xyz"}', "gho_xyz"],
    ['{"id_token":"idt"}', "idt"],
    [
      "https://ref.supabase.co/auth/v1/callback?code=pkce-auth-code-1",
      "pkce-auth-code-1",
    ],
    [
      "host=db user=postgres password='my secret pw' dbname=postgres",
      "secret pw",
    ],
    ["connect to postgresql://postgres:pa ss@db:5432/postgres failed", "pa ss"],
    ["Authorization: Bearer opaque-session-token", "opaque-session-token"],
  ];
  for (const [text, secret] of leaks) {
    assert.ok(!redact(text).includes(secret), `${text} -> ${redact(text)}`);
  }
  const kept: [string, string][] = [
    [
      "holds a publishable key: a secret key (sb_secret_…) or the service_role key is needed",
      "(sb_secret_…) or",
    ],
    ["invalid token: token is malformed", "token is malformed"],
    [
      '{"url":"https://x.co/a","user":"jefa@example.com","request_id":"r-1"}',
      '"user":"jefa@example.com"',
    ],
  ];
  for (const [text, part] of kept) {
    assert.ok(redact(text).includes(part), `${text} -> ${redact(text)}`);
  }
});

Deno.test("logEvent: a field named as a secret is removed whole, a URL is redacted as text, and a string over 8 KiB is cut", () => {
  const lines: string[] = [];
  const saved = console.log;
  console.log = (line: string) => lines.push(line);
  try {
    logEvent("info", "x", {
      password: "topsecret",
      nested: { deep: [{ confirmation_token: "ct-1" }] },
      url: new URL("https://user:s3cret@db.example/x"),
      long: "a".repeat(65_536),
    });
  } finally {
    console.log = saved;
  }
  const line = JSON.parse(lines[0]);
  assert.equal(line.password, "[redacted]");
  assert.deepEqual(line.nested, {
    deep: [{ confirmation_token: "[redacted]" }],
  });
  assert.equal(line.url, "https://[redacted]@db.example/x");
  assert.equal(line.long.length, 8192 + "… [cut]".length);
});
