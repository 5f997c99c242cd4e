import assert from "node:assert/strict";
import { MATCH_LEVELS } from "./match_user.ts";

Deno.test("MATCH_LEVELS: the spec's precedence, auth_user_id first and the local part last", () => {
  assert.deepEqual(MATCH_LEVELS, [
    "auth_user_id",
    "correo",
    "nombre_usuario_email",
    "nombre_usuario_local",
  ]);
});
