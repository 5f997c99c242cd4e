import assert from "node:assert/strict";
import {
  base64url,
  decodeBase64url,
  JwtError,
  signEs256,
  signHs256,
  verifyAccessToken,
} from "./jwt.ts";
import { generateSigningKey, LOCAL_JWT_SECRET } from "./keys.ts";

const key = await generateSigningKey();
const opts = { jwtSecret: LOCAL_JWT_SECRET, publicJwks: [key.publicJwk] };
const future = Math.floor(Date.now() / 1000) + 3600;

async function rejectsWith(token: string, message: string, now?: () => number) {
  await assert.rejects(
    () => verifyAccessToken(token, { ...opts, now }),
    (err: unknown) => {
      assert.ok(err instanceof JwtError);
      assert.equal(err.message, message);
      return true;
    },
  );
}

Deno.test("signEs256: header is {alg, kid, typ} and the token verifies against the JWKS", async () => {
  const token = await signEs256(
    { sub: "u", exp: future },
    key.privateJwk,
    key.kid,
  );
  const header = JSON.parse(
    new TextDecoder().decode(decodeBase64url(token.split(".")[0])),
  );
  assert.deepEqual(header, { alg: "ES256", kid: key.kid, typ: "JWT" });
  assert.deepEqual(await verifyAccessToken(token, opts), {
    sub: "u",
    exp: future,
  });
});

Deno.test("verifyAccessToken: HS256 signed with the JWT secret is accepted, with or without an unknown kid", async () => {
  const plain = await signHs256({ sub: "u", exp: future }, LOCAL_JWT_SECRET);
  assert.equal((await verifyAccessToken(plain, opts)).sub, "u");
  const withKid = await signHs256({ sub: "u" }, LOCAL_JWT_SECRET, {
    alg: "HS256",
    kid: "nope",
    typ: "JWT",
  });
  assert.equal((await verifyAccessToken(withKid, opts)).sub, "u");
});

Deno.test("verifyAccessToken: expired token fails with golang-jwt's 'token is expired'", async () => {
  const token = await signEs256(
    { sub: "u", exp: 1000 },
    key.privateJwk,
    key.kid,
  );
  await rejectsWith(token, "token has invalid claims: token is expired");
  const soon = await signEs256(
    { sub: "u", exp: future },
    key.privateJwk,
    key.kid,
  );
  await rejectsWith(
    soon,
    "token has invalid claims: token is expired",
    () => (future + 1) * 1000,
  );
});

Deno.test("verifyAccessToken: nbf in the future is 'token is not valid yet'", async () => {
  const token = await signEs256(
    { sub: "u", nbf: future },
    key.privateJwk,
    key.kid,
  );
  await rejectsWith(token, "token has invalid claims: token is not valid yet");
});

Deno.test("verifyAccessToken: bad signatures are refused per algorithm", async () => {
  const hs = await signHs256(
    { sub: "u" },
    "another-secret-another-secret-another",
  );
  await rejectsWith(hs, "token signature is invalid: signature is invalid");
  const other = await generateSigningKey();
  const es = await signEs256({ sub: "u" }, other.privateJwk, key.kid);
  await rejectsWith(
    es,
    "token signature is invalid: crypto/ecdsa: verification error",
  );
});

Deno.test("verifyAccessToken: alg none and algorithms other than ES256/HS256 are refused", async () => {
  const none = `${base64url(JSON.stringify({ alg: "none", typ: "JWT" }))}.${
    base64url(JSON.stringify({ sub: "u" }))
  }.`;
  await rejectsWith(
    none,
    "token signature is invalid: signing method none is invalid",
  );
  const rs = `${base64url(JSON.stringify({ alg: "RS256", typ: "JWT" }))}.${
    base64url(JSON.stringify({ sub: "u" }))
  }.abc`;
  await rejectsWith(
    rs,
    "token signature is invalid: signing method RS256 is invalid",
  );
  const odd = `${base64url(JSON.stringify({ alg: "XX1", typ: "JWT" }))}.${
    base64url(JSON.stringify({ sub: "u" }))
  }.abc`;
  await rejectsWith(
    odd,
    "token is unverifiable: signing method (alg) is unavailable",
  );
});

Deno.test("verifyAccessToken: ES256 with an unknown or missing kid is unrecognized", async () => {
  const unknown = await signEs256({ sub: "u" }, key.privateJwk, "not-a-kid");
  await rejectsWith(
    unknown,
    "token is unverifiable: error while executing keyfunc: unrecognized JWT kid not-a-kid for algorithm ES256",
  );
  const parts = unknown.split(".");
  const noKid = `${base64url(JSON.stringify({ alg: "ES256", typ: "JWT" }))}.${
    parts[1]
  }.${parts[2]}`;
  await rejectsWith(
    noKid,
    "token is unverifiable: error while executing keyfunc: unrecognized JWT kid <nil> for algorithm ES256",
  );
});

Deno.test("verifyAccessToken: malformed tokens", async () => {
  await rejectsWith(
    "abc",
    "token is malformed: token contains an invalid number of segments",
  );
  await rejectsWith(
    "a*b.c.d",
    "token is malformed: could not base64 decode header: illegal base64 data at input byte 1",
  );
  const badClaim = `${base64url(JSON.stringify({ alg: "HS256" }))}.${
    base64url(JSON.stringify({ sub: 5 }))
  }.x`;
  await rejectsWith(
    badClaim,
    "token is malformed: could not JSON decode claim: json: cannot unmarshal number into Go struct field AccessTokenClaims.sub of type string",
  );
});

Deno.test("decodeBase64url: round-trips and refuses padding", () => {
  const bytes = new Uint8Array([0, 1, 2, 250, 251, 252, 253]);
  assert.deepEqual(decodeBase64url(base64url(bytes)), bytes);
  assert.throws(
    () => decodeBase64url("AA=="),
    /illegal base64 data at input byte 2/,
  );
});
