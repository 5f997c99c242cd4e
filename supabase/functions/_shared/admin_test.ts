import assert from "node:assert/strict";
import { isAdmin, isAdminRole, requireAdmin } from "./admin.ts";
import type { Identity } from "./auth.ts";
import { HttpError } from "./errors.ts";
import type { MatchedRow } from "./match_user.ts";

const ana: Identity = { id: "u1", email: "ana@x.io", emailConfirmed: true };
const row = (rol: string, level: MatchedRow["level"]): MatchedRow => ({
  id: 1,
  rol,
  level,
});
const code = (fn: () => void) => {
  try {
    fn();
    return "ok";
  } catch (e) {
    assert.ok(e instanceof HttpError);
    return e.code;
  }
};

Deno.test("isAdminRole: the four roles, trimmed and case-insensitive", () => {
  for (const r of ["administrador", "ADMIN", " superadmin ", "Super-Admin"]) {
    assert.equal(isAdminRole(r), true, r);
  }
  for (const r of ["usuario", "", null, "admins", "super admin"]) {
    assert.equal(isAdminRole(r), false, String(r));
  }
});

Deno.test("requireAdmin: rol counts only on a row linked by auth_user_id", () => {
  assert.equal(
    code(() => requireAdmin(ana, row("admin", "auth_user_id"), new Set())),
    "ok",
  );
});

Deno.test("requireAdmin: a row matched by correo never grants rights (a sign-up proves no mailbox)", () => {
  assert.equal(
    code(() => requireAdmin(ana, row("admin", "correo"), new Set())),
    "admin_required",
  );
});

Deno.test("requireAdmin: a row reached through nombre_usuario never grants rights", () => {
  assert.equal(
    code(() =>
      requireAdmin(ana, row("admin", "nombre_usuario_local"), new Set())
    ),
    "admin_required",
  );
  assert.equal(
    code(() =>
      requireAdmin(ana, row("admin", "nombre_usuario_email"), new Set())
    ),
    "admin_required",
  );
});

Deno.test("requireAdmin: ADMIN_EMAILS needs a confirmed email and no row", () => {
  const admins = new Set(["ana@x.io"]);
  assert.equal(code(() => requireAdmin(ana, null, admins)), "ok");
  assert.equal(
    code(() => requireAdmin({ ...ana, emailConfirmed: false }, null, admins)),
    "user_not_found",
  );
  assert.equal(
    code(() =>
      requireAdmin(
        { ...ana, emailConfirmed: false },
        row("usuario", "correo"),
        admins,
      )
    ),
    "admin_required",
  );
});

Deno.test("requireAdmin: no row gives 404, a row without rights 403", () => {
  assert.equal(
    code(() => requireAdmin(ana, null, new Set())),
    "user_not_found",
  );
  assert.equal(
    code(() => requireAdmin(ana, row("usuario", "auth_user_id"), new Set())),
    "admin_required",
  );
});

Deno.test("isAdmin: true exactly where requireAdmin passes", () => {
  const boss = new Set(["ana@x.io"]);
  assert.equal(isAdmin(ana, row("admin", "auth_user_id"), new Set()), true);
  assert.equal(isAdmin(ana, row("admin", "correo"), new Set()), false);
  assert.equal(isAdmin(ana, null, boss), true);
  assert.equal(isAdmin(ana, row("usuario", "correo"), new Set()), false);
  assert.equal(
    isAdmin(ana, row("admin", "nombre_usuario_email"), new Set()),
    false,
  );
  assert.equal(isAdmin(ana, null, new Set()), false);
  assert.equal(
    isAdmin({ ...ana, emailConfirmed: false }, null, boss),
    false,
  );
});
