import assert from "node:assert/strict";
import { ApiError, WeakPasswordError } from "./errors.ts";
import {
  checkPasswordStrength,
  comparePassword,
  generateRefreshToken,
  hashPassword,
  isLegacyRefreshToken,
  validateEmail,
  validatePhone,
} from "./passwords.ts";

Deno.test("hashPassword: bcrypt cost 10 with Go's $2a$ prefix, verified by comparePassword", async () => {
  const hash = await hashPassword("secret123");
  assert.match(hash, /^\$2a\$10\$[./A-Za-z0-9]{53}$/);
  assert.equal(await comparePassword("secret123", hash), true);
  assert.equal(await comparePassword("secret124", hash), false);
  assert.equal(await comparePassword("secret123", ""), false);
  assert.equal(await comparePassword("secret123", null), false);
});

Deno.test("checkPasswordStrength: under 6 bytes is weak with reason length, over 72 is validation_failed", () => {
  assert.throws(() => checkPasswordStrength("12345"), (err: unknown) => {
    assert.ok(err instanceof WeakPasswordError);
    assert.equal(err.message, "Password should be at least 6 characters.");
    assert.deepEqual(err.reasons, ["length"]);
    return true;
  });
  assert.throws(() => checkPasswordStrength("x".repeat(73)), (err: unknown) => {
    assert.ok(err instanceof ApiError);
    assert.equal(err.status, 400);
    assert.equal(err.errorCode, "validation_failed");
    assert.equal(err.message, "Password cannot be longer than 72 characters");
    return true;
  });
  checkPasswordStrength("123456");
  // Go counts bytes: three 2-byte characters are long enough.
  checkPasswordStrength("ééé");
});

Deno.test("validateEmail: lower-cases valid addresses and refuses bad ones as Supabase Auth does", () => {
  assert.equal(validateEmail("Alice@Example.COM"), "alice@example.com");
  assert.throws(() => validateEmail("not-an-email"), (err: unknown) => {
    assert.ok(err instanceof ApiError);
    assert.equal(err.errorCode, "validation_failed");
    assert.equal(
      err.message,
      "Unable to validate email address: invalid format",
    );
    return true;
  });
  assert.throws(() => validateEmail(""), /An email address is required/);
});

Deno.test("validatePhone: E.164 digits after dropping + and spaces", () => {
  assert.equal(validatePhone("+1 555 0100"), "15550100");
  assert.throws(() => validatePhone("0123"), /E\.164 required/);
});

Deno.test("generateRefreshToken: 12 lower-case base32 characters, all distinct draws", () => {
  const seen = new Set<string>();
  for (let i = 0; i < 200; i++) {
    const token = generateRefreshToken();
    assert.match(token, /^[a-z2-7]{12}$/);
    assert.equal(isLegacyRefreshToken(token), true);
    seen.add(token);
  }
  assert.equal(seen.size, 200);
  assert.equal(isLegacyRefreshToken("ABCDEFGHIJKL"), false);
});
