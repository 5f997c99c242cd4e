import assert from "node:assert/strict";
import { ApiError } from "./errors.ts";
import {
  canonicalUuid,
  clientIp,
  isUuid,
  parseGoDuration,
  readJson,
  stringField,
} from "./http.ts";

Deno.test("parseGoDuration: Go duration syntax in ms, with Go's error texts", () => {
  assert.equal(parseGoDuration("24h"), 86_400_000);
  assert.equal(parseGoDuration("1h30m"), 5_400_000);
  assert.equal(parseGoDuration("1.5s"), 1500);
  assert.equal(parseGoDuration("-5m"), -300_000);
  assert.equal(parseGoDuration("0"), 0);
  assert.throws(() => parseGoDuration("abc"), {
    message: 'time: invalid duration "abc"',
  });
  assert.throws(() => parseGoDuration("10"), {
    message: 'time: missing unit in duration "10"',
  });
  assert.throws(() => parseGoDuration("1d"), {
    message: 'time: unknown unit "d" in duration "1d"',
  });
});

Deno.test("readJson: bad JSON and wrong field types are 400 bad_json", async () => {
  const post = (body: string) =>
    new Request("http://x", { method: "POST", body });
  await assert.rejects(
    () => readJson(post(""), "SignupParams"),
    (err: unknown) => {
      assert.ok(err instanceof ApiError);
      assert.equal(err.errorCode, "bad_json");
      assert.equal(
        err.message,
        "Could not parse request body as JSON: unexpected end of JSON input",
      );
      return true;
    },
  );
  await assert.rejects(() => readJson(post("[1]"), "SignupParams"), {
    message:
      "Could not parse request body as JSON: json: cannot unmarshal array into Go value of type api.SignupParams",
  });
  const body = await readJson(post('{"email": 5}'), "SignupParams");
  assert.throws(() => stringField(body, "email", "SignupParams"), {
    message:
      "Could not parse request body as JSON: json: cannot unmarshal number into Go struct field SignupParams.email of type string",
  });
  assert.deepEqual(await readJson(post("null"), "SignupParams"), {});
});

Deno.test("isUuid / canonicalUuid: accept the forms gofrs/uuid accepts", () => {
  assert.equal(isUuid("5C9280C2-F87F-4684-B6C7-8A8D29781156"), true);
  assert.equal(
    canonicalUuid("5C9280C2F87F4684B6C78A8D29781156"),
    "5c9280c2-f87f-4684-b6c7-8a8d29781156",
  );
  assert.equal(isUuid("nope"), false);
});

Deno.test("clientIp: first X-Forwarded-For hop, null when absent or not an address", () => {
  const r = (v?: string) =>
    new Request("http://x", { headers: v ? { "x-forwarded-for": v } : {} });
  assert.equal(clientIp(r("10.0.0.1, 10.0.0.2")), "10.0.0.1");
  assert.equal(clientIp(r("::1")), "::1");
  assert.equal(clientIp(r("evil; drop")), null);
  assert.equal(clientIp(r()), null);
});
