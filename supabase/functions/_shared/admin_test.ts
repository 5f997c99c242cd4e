import assert from "node:assert/strict";
import {
  adminGround,
  type AdminPolicy,
  isAdmin,
  isAdminRole,
  isListedAdminEmail,
  requireAdmin,
} from "./admin.ts";
import type { Identity } from "./auth.ts";
import { HttpError } from "./errors.ts";
import type { MatchedRow } from "./match_user.ts";

// Confirmed, and stamped by an operator (admin API app_metadata).
const ana: Identity = {
  id: "u1",
  email: "ana@x.io",
  emailConfirmed: true,
  confirmedAfterMail: false,
  appMetadata: { provider: "email", admin_verified_email: "ana@x.io" },
};
// Confirmed at once with no stamp: a sign-up under autoconfirm (first, or a
// claim of an unconfirmed account), also after confirmations are turned on.
const claimed: Identity = {
  ...ana,
  appMetadata: { provider: "email", providers: ["email"] },
};
// Confirmed by following the mailed link.
const mailed: Identity = { ...claimed, confirmedAfterMail: true };
const unconfirmed: Identity = { ...ana, emailConfirmed: false };
const row = (rol: string, level: MatchedRow["level"]): MatchedRow => ({
  id: 1,
  rol,
  level,
});
/** A policy; `asked` counts the settings look-ups. */
function policy(
  emails: string[],
  autoconfirm = true,
): AdminPolicy & { asked: number } {
  const p = {
    adminEmails: new Set(emails),
    asked: 0,
    autoconfirm: () => {
      p.asked++;
      return Promise.resolve(autoconfirm);
    },
    rolWritableBy: () => Promise.resolve([] as string[]),
  };
  return p;
}
const none = () => policy([]);
async function code(fn: () => Promise<unknown>): Promise<string> {
  try {
    await fn();
    return "ok";
  } catch (e) {
    assert.ok(e instanceof HttpError);
    return e.code;
  }
}

Deno.test("isAdminRole: the four roles, trimmed and case-insensitive", () => {
  for (const r of ["administrador", "ADMIN", " superadmin ", "Super-Admin"]) {
    assert.equal(isAdminRole(r), true, r);
  }
  for (const r of ["usuario", "", null, "admins", "super admin"]) {
    assert.equal(isAdminRole(r), false, String(r));
  }
});

Deno.test("requireAdmin: rol counts only on a row linked by auth_user_id", async () => {
  assert.equal(
    await code(() => requireAdmin(ana, row("admin", "auth_user_id"), none())),
    "ok",
  );
});

Deno.test("requireAdmin: a row matched by correo never grants rights (a sign-up proves no mailbox)", async () => {
  assert.equal(
    await code(() => requireAdmin(ana, row("admin", "correo"), none())),
    "admin_required",
  );
});

Deno.test("requireAdmin: a row reached through nombre_usuario never grants rights", async () => {
  for (
    const level of ["nombre_usuario_local", "nombre_usuario_email"] as const
  ) {
    assert.equal(
      await code(() => requireAdmin(ana, row("admin", level), none())),
      "admin_required",
    );
  }
});

Deno.test("requireAdmin: ADMIN_EMAILS needs a confirmed email and no row", async () => {
  const admins = policy(["ana@x.io"]);
  assert.equal(await code(() => requireAdmin(ana, null, admins)), "ok");
  assert.equal(
    await code(() => requireAdmin(unconfirmed, null, admins)),
    "user_not_found",
  );
  assert.equal(
    await code(() =>
      requireAdmin(unconfirmed, row("usuario", "correo"), admins)
    ),
    "admin_required",
  );
});

Deno.test("isAdmin: ADMIN_EMAILS trusts an account an operator stamped without asking Auth's settings", async () => {
  const admins = policy(["ana@x.io"], true);
  assert.equal(await isAdmin(ana, null, admins), true);
  assert.equal(admins.asked, 0);
});

Deno.test("isAdmin: ADMIN_EMAILS refuses a confirmed, unstamped account while Auth autoconfirms (a first sign-up or a claim)", async () => {
  const admins = policy(["ana@x.io"], true);
  assert.equal(await isAdmin(claimed, null, admins), false);
  assert.equal(admins.asked, 0); // never mailed: no need to ask
  assert.equal(await isAdmin(mailed, null, admins), false);
  assert.equal(admins.asked, 1);
  assert.equal(
    await code(() => requireAdmin(claimed, row("usuario", "correo"), admins)),
    "admin_required",
  );
});

Deno.test("isAdmin: ADMIN_EMAILS refuses a stamp that names another address (the email changed since)", async () => {
  const moved: Identity = {
    ...ana,
    email: "ana.new@x.io",
  };
  const admins = policy(["ana@x.io", "ana.new@x.io"], true);
  assert.equal(await isAdmin(moved, null, admins), false);
});

Deno.test("isAdmin: ADMIN_EMAILS accepts an unstamped confirmation where Auth confirms by mail (a mail round trip)", async () => {
  assert.equal(await isAdmin(mailed, null, policy(["ana@x.io"], false)), true);
});

Deno.test("isAdmin: ADMIN_EMAILS refuses an account claimed while confirmations were off, after they are turned on", async () => {
  assert.equal(
    await isAdmin(claimed, null, policy(["ana@x.io"], false)),
    false,
  );
});

Deno.test("isAdmin: a linked administrator row needs no ADMIN_EMAILS proof and no settings look-up", async () => {
  const p = policy([], true);
  assert.equal(await isAdmin(claimed, row("admin", "auth_user_id"), p), true);
  assert.equal(p.asked, 0);
});

Deno.test("isAdmin: an unlisted or absent email never asks Auth's settings", async () => {
  const p = policy(["boss@x.io"], true);
  assert.equal(await isAdmin(claimed, null, p), false);
  assert.equal(await isAdmin({ ...claimed, email: null }, null, p), false);
  assert.equal(p.asked, 0);
});

Deno.test("requireAdmin: no row gives 404, a row without rights 403", async () => {
  assert.equal(
    await code(() => requireAdmin(ana, null, none())),
    "user_not_found",
  );
  assert.equal(
    await code(() => requireAdmin(ana, row("usuario", "auth_user_id"), none())),
    "admin_required",
  );
});

Deno.test("isListedAdminEmail: only a listed address, never a missing one", () => {
  const listed = new Set(["jefa@example.com"]);
  assert.equal(isListedAdminEmail("jefa@example.com", listed), true);
  assert.equal(isListedAdminEmail("ana@example.com", listed), false);
  assert.equal(isListedAdminEmail(null, listed), false);
});

Deno.test("isAdmin: rol grants nothing while a Data API role could write it (rolWritableBy), and is asked only for a linked administrator rol; ADMIN_EMAILS still counts", async () => {
  let asked = 0;
  const writable = (roles: string[]) => ({
    ...policy(["ana@x.io"]),
    rolWritableBy: () => {
      asked++;
      return Promise.resolve(roles);
    },
  });
  const adminRow = row("admin", "auth_user_id");
  assert.equal(await isAdmin(claimed, adminRow, writable([])), true);
  assert.equal(
    await isAdmin(claimed, adminRow, writable(["authenticated"])),
    false,
  );
  // Listed and stamped: an administrator by ADMIN_EMAILS whatever rol says.
  assert.equal(await isAdmin(ana, adminRow, writable(["anon"])), true);
  asked = 0;
  await isAdmin(claimed, row("usuario", "auth_user_id"), writable(["anon"]));
  await isAdmin(claimed, row("admin", "correo"), writable(["anon"]));
  assert.equal(asked, 0);
});

Deno.test("isAdmin: when who may write rol cannot be looked up, ADMIN_EMAILS still decides; a rol administrator gets the failure, never a 403", async () => {
  const down = new Error("database unreachable");
  const failing = {
    ...policy(["ana@x.io"]),
    rolWritableBy: () => Promise.reject(down),
  };
  const adminRow = row("admin", "auth_user_id");
  // Listed and stamped: an administrator by ADMIN_EMAILS.
  assert.equal(await isAdmin(ana, adminRow, failing), true);
  // Not provable by ADMIN_EMAILS: the failure, to be answered as one.
  await assert.rejects(() => isAdmin(claimed, adminRow, failing), down);
  await assert.rejects(
    () => isAdmin({ ...claimed, email: "otro@x.io" }, adminRow, failing),
    down,
  );
  // rol not an administrator's: never asked, so never failed.
  assert.equal(
    await isAdmin(claimed, row("usuario", "auth_user_id"), failing),
    false,
  );
});

Deno.test("adminGround: listed where ADMIN_EMAILS proves the caller, whatever rol says; rol where only rol does; null for neither", async () => {
  const adminRow = row("admin", "auth_user_id");
  const p = policy(["ana@x.io"], false);
  assert.equal(await adminGround(ana, adminRow, p), "listed");
  assert.equal(await adminGround(ana, null, p), "listed");
  assert.equal(await adminGround(mailed, adminRow, p), "listed");
  assert.equal(await adminGround(claimed, adminRow, p), "rol");
  assert.equal(await adminGround(claimed, adminRow, none()), "rol");
  assert.equal(
    await adminGround(claimed, row("usuario", "auth_user_id"), p),
    null,
  );
  assert.equal(await requireAdmin(ana, adminRow, p), "listed");
  assert.equal(await requireAdmin(claimed, adminRow, p), "rol");
});

Deno.test("adminGround: a listed rol administrator whose ADMIN_EMAILS proof cannot be checked (Auth's settings down) is rol, not refused and not listed; without the rol, the failure", async () => {
  const down = new Error("settings unreachable");
  const failing = {
    ...policy(["ana@x.io"]),
    autoconfirm: () => Promise.reject(down),
  };
  assert.equal(
    await adminGround(mailed, row("admin", "auth_user_id"), failing),
    "rol",
  );
  await assert.rejects(() => adminGround(mailed, null, failing), down);
});
