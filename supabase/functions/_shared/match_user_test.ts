import assert from "node:assert/strict";
import { MATCH_LEVELS, matchableEmail } from "./match_user.ts";

Deno.test("MATCH_LEVELS: the spec's precedence, auth_user_id first and the local part last", () => {
  assert.deepEqual(MATCH_LEVELS, [
    "auth_user_id",
    "correo",
    "nombre_usuario_email",
    "nombre_usuario_local",
  ]);
});

Deno.test("matchableEmail: only an email Auth has confirmed is matched by", () => {
  assert.equal(
    matchableEmail({ email: "ana@x.io", emailConfirmed: true }),
    "ana@x.io",
  );
  assert.equal(
    matchableEmail({ email: "ana@x.io", emailConfirmed: false }),
    null,
  );
  assert.equal(matchableEmail({ email: null, emailConfirmed: true }), null);
});
