import assert from "node:assert/strict";
import { HttpError } from "../_shared/errors.ts";
import { parsePresenceRequest } from "./schema.ts";

function issuesOf(body: unknown) {
  try {
    parsePresenceRequest(body);
  } catch (error) {
    assert.ok(error instanceof HttpError);
    assert.equal(error.code, "validation_failed");
    assert.equal(error.status, 400);
    return error.extra.issues as { path: unknown[]; message: string }[];
  }
  assert.fail("expected validation_failed");
}

Deno.test("parsePresenceRequest: an absent body or {} is a first page of 100", () => {
  assert.deepEqual(parsePresenceRequest(undefined), { limit: 100 });
  assert.deepEqual(parsePresenceRequest({}), { limit: 100 });
});

Deno.test("parsePresenceRequest: ids, status, after_id, limit and cursor are read", () => {
  assert.deepEqual(
    parsePresenceRequest({
      ids: [3, 1],
      status: ["online", "away"],
      after_id: 0,
      limit: 500,
    }),
    { ids: [3, 1], status: ["online", "away"], after_id: 0, limit: 500 },
  );
  assert.deepEqual(parsePresenceRequest({ cursor: "abc", ids: [2] }), {
    cursor: "abc",
    ids: [2],
    limit: 100,
  });
});

Deno.test("parsePresenceRequest: bad values give validation_failed naming the field, never the value", () => {
  const cases: [unknown, unknown[]][] = [
    [{ status: ["busy"] }, ["status", 0]],
    [{ status: "online" }, ["status"]],
    [{ status: [] }, ["status"]],
    [{ ids: Array.from({ length: 501 }, (_, i) => i + 1) }, ["ids"]],
    [{ ids: [] }, ["ids"]],
    [{ ids: [1, "2"] }, ["ids", 1]],
    [{ ids: [2 ** 53] }, ["ids", 0]],
    [{ ids: [1.5] }, ["ids", 0]],
    [{ limit: 0 }, ["limit"]],
    [{ limit: 501 }, ["limit"]],
    [{ after_id: 1.5 }, ["after_id"]],
    [{ after_id: -(2 ** 53) }, ["after_id"]],
    [{ cursor: "" }, ["cursor"]],
    [{ cursor: 5 }, ["cursor"]],
    [{ cursor: "x".repeat(8193) }, ["cursor"]],
    [{ cursor: "abc", status: ["online"] }, ["status"]],
    [{ secret_sauce: "x" }, []],
  ];
  for (const [body, path] of cases) {
    const issues = issuesOf(body);
    assert.deepEqual(issues[0].path, path, JSON.stringify(body).slice(0, 60));
    assert.ok(!JSON.stringify(issues).includes("busy"));
  }
});

Deno.test("parsePresenceRequest: ids and after_id of 0 and below are accepted (a legacy table may hold them)", () => {
  assert.deepEqual(parsePresenceRequest({ ids: [0, -3], after_id: -10 }), {
    ids: [0, -3],
    after_id: -10,
    limit: 100,
  });
});

Deno.test("parsePresenceRequest: a body that is not an object is refused", () => {
  for (const body of [null, [], "online", 5, true]) {
    assert.deepEqual(issuesOf(body)[0].path, []);
  }
});
