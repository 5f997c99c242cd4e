import assert from "node:assert/strict";
import {
  type AddressClaim,
  ADMIN_STAMP,
  confirmedAfterMail,
  linkableAddress,
  ownsAddress,
  SET_BY_AUTH_SYNC,
  stampedByAdmin,
} from "./email_proof.ts";

// Created confirmed by an operator, who stamped it: never mailed.
const stamped: AddressClaim = {
  email: "boss@x.io",
  emailConfirmed: true,
  confirmedAfterMail: false,
  appMetadata: { provider: "email", [ADMIN_STAMP]: "boss@x.io" },
};
// A stranger's sign-up under autoconfirm: confirmed at once, never mailed,
// never stamped; it stays so when confirmations are turned on.
const signedUp: AddressClaim = {
  email: "boss@x.io",
  emailConfirmed: true,
  confirmedAfterMail: false,
  appMetadata: { provider: "email", providers: ["email"] },
};
// Signed up where Auth confirms by mail, and followed the mailed link.
const mailed: AddressClaim = { ...signedUp, confirmedAfterMail: true };

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

// What Auth holds after a sign-up with ana@x.io confirmed by mail.
const mailedRecord = {
  email: "ana@x.io",
  emailConfirmedAt: "2026-11-24T10:05:00.000Z",
  confirmationSentAt: "2026-11-24T10:00:00.000Z",
  identities: [{ provider: "email", email: "ana@x.io" }],
};

Deno.test("confirmedAfterMail: only a confirmation later than the confirmation mail counts", () => {
  const sent = "2026-11-24T10:00:00.000Z";
  const at = (
    emailConfirmedAt: string | Date | null | undefined,
    confirmationSentAt: string | Date | null | undefined,
  ) =>
    confirmedAfterMail({
      ...mailedRecord,
      emailConfirmedAt,
      confirmationSentAt,
    });
  assert.equal(at("2026-11-24T10:05:00.000Z", sent), true);
  // auth.users as postgres.js reads it: Date objects.
  assert.equal(at(new Date("2026-11-24T10:00:01Z"), new Date(sent)), true);
  // Confirmed at once (autoconfirm, an operator's email_confirm, a claimed
  // account): no mail before it, or the mail came after.
  assert.equal(at("2026-11-24T10:05:00.000Z", null), false);
  assert.equal(at(undefined, undefined), false);
  assert.equal(at("2026-11-24T09:00:00.000Z", sent), false);
  assert.equal(at(sent, sent), false);
  assert.equal(at(null, sent), false);
});

Deno.test("confirmedAfterMail: the mail proves only the address of the account's email identity", () => {
  assert.equal(confirmedAfterMail(mailedRecord), true);
  // Case: Auth's identities.email column and the account's are lower-cased
  // alike; identity_data may hold the address as typed.
  assert.equal(
    confirmedAfterMail({
      ...mailedRecord,
      email: "Ana@X.io",
      identities: [{ provider: "email", email: "ANA@x.io" }],
    }),
    true,
  );
  // Identity unlink (models/user.go UpdateUserEmailFromIdentities): the
  // email identity is deleted and an OAuth identity's verified email becomes
  // the account's; both times are kept. That address was never mailed.
  assert.equal(
    confirmedAfterMail({
      ...mailedRecord,
      email: "boss@x.io",
      identities: [{ provider: "github", email: "boss@x.io" }],
    }),
    false,
  );
  // The email identity still names the old address: the account's email was
  // changed by something that is not Auth's mail or admin path.
  assert.equal(
    confirmedAfterMail({ ...mailedRecord, email: "boss@x.io" }),
    false,
  );
  // Identity gone, whatever the account's email.
  assert.equal(confirmedAfterMail({ ...mailedRecord, identities: [] }), false);
  // A phone-only account that got an SMS sign-up code (phone.go writes
  // confirmation_sent_at): no email, or no email identity for it.
  assert.equal(
    confirmedAfterMail({
      ...mailedRecord,
      email: null,
      identities: [{ provider: "phone", email: undefined }],
    }),
    false,
  );
  assert.equal(
    confirmedAfterMail({
      ...mailedRecord,
      identities: [{ provider: "phone", email: "ana@x.io" }],
    }),
    false,
  );
  // identity_data as stored: anything.
  assert.equal(
    confirmedAfterMail({
      ...mailedRecord,
      identities: [{ provider: "email", email: 42 }, {
        provider: "email",
        email: null,
      }],
    }),
    false,
  );
  assert.equal(
    confirmedAfterMail({
      ...mailedRecord,
      email: "",
      identities: [{ provider: "email", email: "" }],
    }),
    false,
  );
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

Deno.test("ownsAddress: under autoconfirm a confirmed sign-up without the stamp proves nothing, even one mailed before", async () => {
  const s = settings(true);
  assert.equal(await ownsAddress(signedUp, s.autoconfirm), false);
  assert.equal(await ownsAddress(mailed, s.autoconfirm), false);
  assert.equal(s.asked, 1);
});

Deno.test("ownsAddress: a stamped, confirmed account proves its address in every configuration without asking Auth's settings", async () => {
  for (const autoconfirm of [true, false]) {
    const s = settings(autoconfirm);
    assert.equal(await ownsAddress(stamped, s.autoconfirm), true);
    assert.equal(s.asked, 0);
  }
});

Deno.test("ownsAddress: where Auth confirms by mail, an account confirmed after its confirmation mail proves its address", async () => {
  assert.equal(await ownsAddress(mailed, settings(false).autoconfirm), true);
});

Deno.test("ownsAddress: an account confirmed while Auth confirmed at once proves nothing after confirmations are turned on, and Auth's settings are not asked", async () => {
  const s = settings(false);
  assert.equal(await ownsAddress(signedUp, s.autoconfirm), false);
  assert.equal(s.asked, 0);
});

Deno.test("ownsAddress: an unconfirmed or email-less account proves nothing, stamp or not, and Auth's settings are not asked", async () => {
  const s = settings(false);
  assert.equal(
    await ownsAddress(
      { ...stamped, emailConfirmed: false },
      s.autoconfirm,
    ),
    false,
  );
  assert.equal(
    await ownsAddress({ ...stamped, email: null }, s.autoconfirm),
    false,
  );
  assert.equal(s.asked, 0);
});

Deno.test("ownsAddress: a stamp for another address does not stand in for a confirmation by mail", async () => {
  const moved = { ...stamped, email: "moved@x.io", confirmedAfterMail: true };
  assert.equal(
    await ownsAddress(moved, settings(true).autoconfirm),
    false,
  );
  assert.equal(
    await ownsAddress(moved, settings(false).autoconfirm),
    true,
  );
});

Deno.test("ownsAddress: a failed settings look-up is passed on, never read as an answer", async () => {
  await assert.rejects(
    ownsAddress(mailed, () => Promise.reject(new Error("down"))),
    /down/,
  );
});

// Created (or re-addressed) by auth-sync: confirmed at once, never mailed.
const madeByAuthSync: AddressClaim = {
  ...signedUp,
  email: "row@x.io",
  appMetadata: { provider: "email", [SET_BY_AUTH_SYNC]: " Row@X.io " },
};

Deno.test("linkableAddress: an address auth-sync set on the account links its row, in every configuration; ownsAddress (rights) does not take it", async () => {
  for (const autoconfirm of [true, false]) {
    const s = settings(autoconfirm);
    assert.equal(await linkableAddress(madeByAuthSync, s.autoconfirm), true);
    assert.equal(s.asked, 0);
    assert.equal(await ownsAddress(madeByAuthSync, s.autoconfirm), false);
  }
});

Deno.test("linkableAddress: an address changed since auth-sync set it, or unconfirmed, links nothing; otherwise ownsAddress decides", async () => {
  const s = settings(true);
  assert.equal(
    await linkableAddress(
      { ...madeByAuthSync, email: "taken@x.io" },
      s.autoconfirm,
    ),
    false,
  );
  assert.equal(
    await linkableAddress(
      { ...madeByAuthSync, emailConfirmed: false },
      s.autoconfirm,
    ),
    false,
  );
  assert.equal(await linkableAddress(signedUp, s.autoconfirm), false);
  assert.equal(await linkableAddress(stamped, s.autoconfirm), true);
  assert.equal(
    await linkableAddress(mailed, settings(false).autoconfirm),
    true,
  );
});

Deno.test("ownsAddress: an address auth-sync set does not carry the account's mail proof over (an administrator by rol may have set it: authsync2 M1); a stamp for it still proves it", async () => {
  // Confirmed by mail at its first address, then moved by auth-sync:
  // Auth rewrote its email identity, so the mail proof would carry over.
  const moved: AddressClaim = { ...madeByAuthSync, confirmedAfterMail: true };
  const s = settings(false);
  assert.equal(await ownsAddress(moved, s.autoconfirm), false);
  assert.equal(
    await ownsAddress(
      {
        ...moved,
        appMetadata: { ...moved.appMetadata, [ADMIN_STAMP]: "row@x.io" },
      },
      s.autoconfirm,
    ),
    true,
  );
  // Changed since by a mail link (the record names the earlier address):
  // the mail proves the new one.
  assert.equal(
    await ownsAddress({ ...moved, email: "later@x.io" }, s.autoconfirm),
    true,
  );
});
