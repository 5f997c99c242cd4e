import assert from "node:assert/strict";
import {
  type AddressClaim,
  ADMIN_STAMP,
  confirmedByMail,
  ownsListedAddress,
  stampedByAdmin,
} from "./email_proof.ts";

const stamped: AddressClaim = {
  email: "boss@x.io",
  emailConfirmed: true,
  appMetadata: { provider: "email", [ADMIN_STAMP]: "boss@x.io" },
};
// A stranger's sign-up under autoconfirm: confirmed at once, never stamped.
const signedUp: AddressClaim = {
  email: "boss@x.io",
  emailConfirmed: true,
  appMetadata: { provider: "email", providers: ["email"] },
};

/** A settings look-up that counts how often it is asked. */
function settings(autoconfirm: boolean) {
  const s = {
    asked: 0,
    autoconfirm: () => {
      s.asked++;
      return Promise.resolve(autoconfirm);
    },
  };
  return s;
}

Deno.test("confirmedByMail: a confirmation proves the mailbox only where Auth confirms by mail", () => {
  assert.equal(confirmedByMail(true, false), true);
  assert.equal(confirmedByMail(true, true), false);
  assert.equal(confirmedByMail(false, false), false);
});

Deno.test("stampedByAdmin: the stamp must name the account's current email, trimmed and case-insensitive", () => {
  assert.equal(
    stampedByAdmin("boss@x.io", { [ADMIN_STAMP]: "boss@x.io" }),
    true,
  );
  assert.equal(
    stampedByAdmin("boss@x.io", { [ADMIN_STAMP]: "  BOSS@X.io " }),
    true,
  );
  // The user changed the email after the stamp: it no longer vouches.
  assert.equal(
    stampedByAdmin("elsewhere@x.io", { [ADMIN_STAMP]: "boss@x.io" }),
    false,
  );
});

Deno.test("stampedByAdmin: no stamp, a stamp that is not a string, an empty one or no email prove nothing", () => {
  assert.equal(stampedByAdmin("boss@x.io", {}), false);
  assert.equal(stampedByAdmin("boss@x.io", { [ADMIN_STAMP]: true }), false);
  assert.equal(
    stampedByAdmin("boss@x.io", { [ADMIN_STAMP]: ["boss@x.io"] }),
    false,
  );
  assert.equal(stampedByAdmin(" ", { [ADMIN_STAMP]: " " }), false);
  assert.equal(stampedByAdmin(null, { [ADMIN_STAMP]: "boss@x.io" }), false);
});

Deno.test("ownsListedAddress: under autoconfirm a confirmed sign-up without the stamp proves nothing", async () => {
  const s = settings(true);
  assert.equal(await ownsListedAddress(signedUp, s.autoconfirm), false);
  assert.equal(s.asked, 1);
});

Deno.test("ownsListedAddress: a stamped, confirmed account proves its address in every configuration without asking Auth's settings", async () => {
  for (const autoconfirm of [true, false]) {
    const s = settings(autoconfirm);
    assert.equal(await ownsListedAddress(stamped, s.autoconfirm), true);
    assert.equal(s.asked, 0);
  }
});

Deno.test("ownsListedAddress: where Auth confirms by mail a confirmed account proves its address", async () => {
  assert.equal(
    await ownsListedAddress(signedUp, settings(false).autoconfirm),
    true,
  );
});

Deno.test("ownsListedAddress: an unconfirmed or email-less account proves nothing, stamp or not, and Auth's settings are not asked", async () => {
  const s = settings(false);
  assert.equal(
    await ownsListedAddress(
      { ...stamped, emailConfirmed: false },
      s.autoconfirm,
    ),
    false,
  );
  assert.equal(
    await ownsListedAddress({ ...stamped, email: null }, s.autoconfirm),
    false,
  );
  assert.equal(s.asked, 0);
});

Deno.test("ownsListedAddress: a stamp for another address does not stand in for a confirmation by mail", async () => {
  const moved = { ...stamped, email: "moved@x.io" };
  assert.equal(
    await ownsListedAddress(moved, settings(true).autoconfirm),
    false,
  );
  assert.equal(
    await ownsListedAddress(moved, settings(false).autoconfirm),
    true,
  );
});

Deno.test("ownsListedAddress: a failed settings look-up is passed on, never read as an answer", async () => {
  await assert.rejects(
    ownsListedAddress(signedUp, () => Promise.reject(new Error("down"))),
    /down/,
  );
});
