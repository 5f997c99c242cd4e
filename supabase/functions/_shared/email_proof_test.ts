import assert from "node:assert/strict";
import {
  AT_CREATION_MS,
  confirmedAtCreation,
  confirmedByMail,
} from "./email_proof.ts";

const at = (ms: number) => new Date(Date.UTC(2026, 10, 20) + ms).toISOString();

Deno.test("confirmedAtCreation: confirmed in the creating transaction counts, a later confirmation does not", () => {
  assert.equal(
    confirmedAtCreation({ createdAt: at(0), emailConfirmedAt: at(0) }),
    true,
  );
  assert.equal(
    confirmedAtCreation({
      createdAt: at(0),
      emailConfirmedAt: at(AT_CREATION_MS),
    }),
    true,
  );
  assert.equal(
    confirmedAtCreation({
      createdAt: at(0),
      emailConfirmedAt: at(AT_CREATION_MS + 1),
    }),
    false,
  );
  assert.equal(
    confirmedAtCreation({ createdAt: at(0), emailConfirmedAt: at(3_600_000) }),
    false,
  );
});

Deno.test("confirmedAtCreation: unconfirmed, unknown or unparsable times prove nothing", () => {
  assert.equal(
    confirmedAtCreation({ createdAt: at(0), emailConfirmedAt: null }),
    false,
  );
  assert.equal(
    confirmedAtCreation({ createdAt: null, emailConfirmedAt: at(0) }),
    false,
  );
  assert.equal(
    confirmedAtCreation({ createdAt: "soon", emailConfirmedAt: at(0) }),
    false,
  );
});

Deno.test("confirmedByMail: a confirmation proves the mailbox only where Auth confirms by mail", () => {
  assert.equal(confirmedByMail(true, false), true);
  assert.equal(confirmedByMail(true, true), false);
  assert.equal(confirmedByMail(false, false), false);
});
