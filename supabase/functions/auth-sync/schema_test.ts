import assert from "node:assert/strict";
import { HttpError } from "../_shared/errors.ts";
import { isRequestEmail, parseRequest } from "./schema.ts";

function issuesOf(body: unknown) {
  try {
    parseRequest(body);
  } catch (error) {
    assert.ok(error instanceof HttpError);
    assert.equal(error.code, "validation_failed");
    assert.equal(error.status, 400);
    return error.extra.issues as { path: unknown[]; message: string }[];
  }
  assert.fail("expected validation_failed");
}

Deno.test("parseRequest: update trims and lower-cases the email and the username is trimmed", () => {
  assert.deepEqual(
    parseRequest({
      action: "update",
      id: 7,
      email: "  Ana@Example.COM ",
      nombre_usuario: " ana ",
    }),
    {
      action: "update",
      id: 7,
      email: "ana@example.com",
      nombre_usuario: "ana",
    },
  );
});

Deno.test("parseRequest: update needs at least one of email, password, nombre_usuario", () => {
  const issues = issuesOf({ action: "update", id: 7 });
  assert.deepEqual(issues, [{
    path: [],
    message: "At least one of email, password or nombre_usuario is required",
  }]);
});

Deno.test("parseRequest: update needs a positive integer id", () => {
  for (const id of [undefined, 0, -1, 1.5, "7", null]) {
    const issues = issuesOf({ action: "update", id, password: "secret-1" });
    assert.deepEqual(issues.map((i) => i.path), [["id"]], String(id));
  }
});

Deno.test("parseRequest: a bad email, an empty username and unknown keys are refused", () => {
  const issues = issuesOf({
    action: "update",
    id: 1,
    email: "not-an-email",
    nombre_usuario: "   ",
    correo: "x@y.z",
  });
  assert.deepEqual(issues.map((i) => i.path), [
    ["email"],
    ["nombre_usuario"],
    [],
  ]);
  assert.match(issues[2].message, /correo/);
});

Deno.test("parseRequest: issues never echo a password", () => {
  const password = "p".repeat(73);
  const issues = issuesOf({ action: "update", id: 1, password, email: 5 });
  assert.deepEqual(issues.map((i) => i.path), [["email"], ["password"]]);
  assert.ok(!JSON.stringify(issues).includes(password));
  const empty = issuesOf({ action: "update", id: 1, password: "" });
  assert.deepEqual(empty.map((i) => i.path), [["password"]]);
});

Deno.test("parseRequest: a password over 72 bytes is refused, 72 bytes are accepted", () => {
  assert.deepEqual(
    issuesOf({ action: "update", id: 1, password: "é".repeat(37) }).map((i) =>
      i.path
    ),
    [["password"]],
  );
  const ok = parseRequest({
    action: "update",
    id: 1,
    password: "é".repeat(36),
  });
  assert.equal(ok.action, "update");
});

Deno.test("parseRequest: sync defaults limit to 100 and dry_run to false", () => {
  assert.deepEqual(parseRequest({ action: "sync" }), {
    action: "sync",
    limit: 100,
    dry_run: false,
  });
  assert.deepEqual(
    parseRequest({
      action: "sync",
      ids: [3, 1],
      after_id: 0,
      limit: 500,
      dry_run: true,
    }),
    { action: "sync", ids: [3, 1], after_id: 0, limit: 500, dry_run: true },
  );
});

Deno.test("parseRequest: sync limit is 1..500 and ids are positive integers", () => {
  assert.deepEqual(issuesOf({ action: "sync", limit: 0 }).map((i) => i.path), [[
    "limit",
  ]]);
  assert.deepEqual(
    issuesOf({ action: "sync", limit: 501 }).map((i) => i.path),
    [["limit"]],
  );
  assert.deepEqual(
    issuesOf({ action: "sync", ids: [1, -2, "3"] }).map((i) => i.path),
    [["ids", 1], ["ids", 2]],
  );
  assert.deepEqual(issuesOf({ action: "sync", ids: [] }).map((i) => i.path), [[
    "ids",
  ]]);
  assert.deepEqual(
    issuesOf({ action: "sync", dry_run: "yes" }).map((i) => i.path),
    [["dry_run"]],
  );
});

Deno.test("parseRequest: a missing or unknown action, or a body that is not an object, is refused", () => {
  for (const body of [undefined, null, [], "sync", {}, { action: "delete" }]) {
    const issues = issuesOf(body);
    assert.equal(issues.length, 1, JSON.stringify(body));
    assert.equal(typeof issues[0].message, "string");
  }
  assert.deepEqual(issuesOf({ action: "delete" })[0].path, ["action"]);
});

Deno.test("parseRequest: a NUL character in nombre_usuario, email or password is refused", () => {
  const nul = "Must not contain the NUL character (U+0000)";
  for (
    const [field, value] of [
      ["nombre_usuario", "a\u0000b"],
      ["nombre_usuario", "\u0000"],
      ["email", "ana\u0000@example.com"],
      ["email", "ana@example.com\u0000"],
      ["password", "secret\u0000-1"],
    ] as const
  ) {
    const issues = issuesOf({ action: "update", id: 1, [field]: value });
    assert.ok(
      issues.some((i) => i.path[0] === field && i.message === nul),
      `${field}: ${JSON.stringify(issues)}`,
    );
    assert.ok(issues.every((i) => i.path[0] === field), JSON.stringify(issues));
    assert.ok(!JSON.stringify(issues).includes("\u0000"));
  }
  // Other control characters in a password are the provider's to judge
  // (in a username they are refused: see below).
  assert.equal(
    parseRequest({ action: "update", id: 1, password: "a\u0001bcdef" })
      .action,
    "update",
  );
});

Deno.test("parseRequest: an email Supabase Auth would refuse (a domain label over 63 characters, a hyphen at a label's end) is a 400 here, not Auth's refusal; what Auth accepts passes", () => {
  for (
    const email of [
      "x@a-.com",
      "x@-a.com",
      `x@${"a".repeat(64)}.com`,
    ]
  ) {
    const issues = issuesOf({ action: "update", id: 1, email });
    assert.deepEqual(issues.map((i) => i.path), [["email"]], email);
  }
  for (
    const email of [
      `x@${"a".repeat(63)}.com`,
      "first.last+tag@sub-domain.example.co",
      "o'brien@example.com",
    ]
  ) {
    const body = parseRequest({ action: "update", id: 1, email });
    assert.equal(body.action === "update" && body.email, email);
  }
});

Deno.test("isRequestEmail: an address exactly as a request would carry it, never one with spaces, capitals or a format Auth refuses", () => {
  assert.equal(isRequestEmail("ana@example.com"), true);
  for (const value of [" ana@example.com", "Ana@example.com", "x@a-.com", ""]) {
    assert.equal(isRequestEmail(value), false, value);
  }
});

Deno.test("parseRequest: a username with invisible characters (zero-width, bidirectional override, a control, a lone surrogate) is refused; letters of any script pass", () => {
  for (
    const name of [
      "ad\u200bmin",
      "admin\u202e",
      "a\u0007b",
      "x\ud800",
      "ana\u2066x",
    ]
  ) {
    const issues = issuesOf({ action: "update", id: 1, nombre_usuario: name });
    assert.deepEqual(issues.map((i) => i.path), [["nombre_usuario"]], name);
  }
  for (const name of ["José", "Łukasz", "山田", "ana_01", "o'brien 😀"]) {
    const body = parseRequest({
      action: "update",
      id: 1,
      nombre_usuario: name,
    });
    assert.equal(body.action === "update" && body.nombre_usuario, name);
  }
});
