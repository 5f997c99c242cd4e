import assert from "node:assert/strict";
import { goTime, identityJson, sortedKeys, userJson } from "./present.ts";
import type { UserRow } from "./store.ts";

Deno.test("goTime: Go's RFC 3339 UTC form with the fraction's trailing zeros dropped", () => {
  assert.equal(
    goTime("2024-05-01T10:00:00.123450+00:00"),
    "2024-05-01T10:00:00.12345Z",
  );
  assert.equal(goTime("2024-05-01T10:00:00+00:00"), "2024-05-01T10:00:00Z");
  assert.equal(goTime("2024-05-01T10:00:00.000+02:00"), "2024-05-01T08:00:00Z");
  assert.equal(goTime("2024-05-01T10:00:00.5"), "2024-05-01T10:00:00.5Z");
});

Deno.test("sortedKeys: maps are sorted at every depth, arrays keep their order", () => {
  assert.equal(
    JSON.stringify(sortedKeys({ b: 1, a: { d: [3, { z: 1, y: 2 }], c: 2 } })),
    '{"a":{"c":2,"d":[3,{"y":2,"z":1}]},"b":1}',
  );
});

const user: UserRow = {
  id: "u1",
  aud: "authenticated",
  role: "authenticated",
  email: "a@example.com",
  encrypted_password: "x",
  email_confirmed_at: "2024-05-01T10:00:00+00:00",
  invited_at: null,
  phone: null,
  phone_confirmed_at: null,
  confirmation_sent_at: null,
  confirmed_at: "2024-05-01T10:00:00+00:00",
  recovery_sent_at: null,
  email_change: "",
  email_change_sent_at: null,
  phone_change: "",
  phone_change_sent_at: null,
  reauthentication_sent_at: null,
  last_sign_in_at: null,
  raw_app_meta_data: { providers: ["email"], provider: "email" },
  raw_user_meta_data: {},
  created_at: "2024-05-01T10:00:00+00:00",
  updated_at: "2024-05-01T10:00:00+00:00",
  banned_until: null,
  deleted_at: null,
  is_anonymous: false,
  is_sso_user: false,
  identities: null,
};

Deno.test("userJson: Go field order, omitempty fields left out, null phone as empty string", () => {
  const json = userJson(user);
  assert.deepEqual(Object.keys(json), [
    "id",
    "aud",
    "role",
    "email",
    "email_confirmed_at",
    "phone",
    "confirmed_at",
    "app_metadata",
    "user_metadata",
    "identities",
    "created_at",
    "updated_at",
    "is_anonymous",
  ]);
  assert.equal(json.phone, "");
  assert.equal(json.identities, null);
  assert.deepEqual(Object.keys(json.app_metadata as object), [
    "provider",
    "providers",
  ]);
});

Deno.test("identityJson: identity_id/id swap and empty identity_data omitted", () => {
  const json = identityJson({
    id: "i1",
    provider_id: "u1",
    user_id: "u1",
    identity_data: {},
    provider: "email",
    last_sign_in_at: null,
    created_at: "2024-05-01T10:00:00+00:00",
    updated_at: "2024-05-01T10:00:00+00:00",
    email: null,
  });
  assert.deepEqual(json, {
    identity_id: "i1",
    id: "u1",
    user_id: "u1",
    provider: "email",
    created_at: "2024-05-01T10:00:00Z",
    updated_at: "2024-05-01T10:00:00Z",
  });
});
