import assert from "node:assert/strict";
import { maskUsername } from "./mask.ts";

Deno.test("maskUsername: an exact-email username shows its local part", () => {
  assert.equal(maskUsername("carla@example.com"), "carla");
  assert.equal(maskUsername("Carla.Ruiz+tag@Example.COM"), "Carla.Ruiz+tag");
});

Deno.test("maskUsername: every address in the text is masked, not only the last", () => {
  assert.equal(
    maskUsername("elena@corp.test;elena.old@gmail.test"),
    "elena;elena.old",
  );
  assert.equal(maskUsername("a@x.io, b@y.io c@z.io"), "a, b c");
});

Deno.test("maskUsername: display names and handles keep their text, addresses inside them go", () => {
  assert.equal(
    maskUsername("Elena Ruiz <elena@corp.test> (@elena)"),
    "Elena Ruiz <elena> (@elena)",
  );
  assert.equal(maskUsername("elena@corp.test / @elena"), "elena / @elena");
  assert.equal(maskUsername("mailto:elena@corp.test"), "mailto:elena");
  assert.equal(maskUsername("[elena@corp.test]"), "[elena]");
});

Deno.test("maskUsername: an address with several @ or a quoted local part leaves no domain", () => {
  assert.equal(maskUsername("o'brien@a@b.io"), "o'brien");
  assert.equal(maskUsername('"elena ruiz"@corp.test'), '"elena ruiz"');
  assert.equal(maskUsername("@example.com"), "");
});

Deno.test("maskUsername: text without an address is unchanged; null stays null", () => {
  for (const name of ["diego", "@diego", "Diego (@diego_r)", "", "a @ b"]) {
    assert.equal(maskUsername(name), name);
  }
  assert.equal(maskUsername(null), null);
});

Deno.test("maskUsername: no masked name still holds an address", () => {
  const address = /[^\s<>()[\]{},;:"/\\|@]+@[^\s<>()[\]{},;:"/\\|@]*\./;
  for (
    const name of [
      "x@y.z;w@v.u",
      "Name <a.b@c.d> (@h) / e@f.g",
      "a@b@c@d.e",
      "«ana@corp.test»",
      "ana@corp.test\tbob@corp.test\nc@d.e",
    ]
  ) {
    assert.doesNotMatch(maskUsername(name)!, address, name);
  }
});
