import assert from "node:assert/strict";
import {
  generateSigningKey,
  loadOrCreateSigningKey,
  LOCAL_ANON_KEY,
  LOCAL_JWT_SECRET,
  LOCAL_SERVICE_ROLE_KEY,
} from "./keys.ts";
import { signEs256, verifyAccessToken } from "./jwt.ts";

Deno.test("LOCAL_ANON_KEY / LOCAL_SERVICE_ROLE_KEY: the well-known keys verify with LOCAL_JWT_SECRET", async () => {
  const opts = { jwtSecret: LOCAL_JWT_SECRET, publicJwks: [] };
  assert.deepEqual(await verifyAccessToken(LOCAL_ANON_KEY, opts), {
    iss: "supabase-demo",
    role: "anon",
    exp: 1983812996,
  });
  assert.deepEqual(await verifyAccessToken(LOCAL_SERVICE_ROLE_KEY, opts), {
    iss: "supabase-demo",
    role: "service_role",
    exp: 1983812996,
  });
});

Deno.test("generateSigningKey: ES256 pair whose public JWK is published with kid, alg, use sig, key_ops verify", async () => {
  const key = await generateSigningKey();
  assert.match(key.kid, /^[0-9a-f-]{36}$/);
  assert.equal(key.privateJwk.kty, "EC");
  assert.equal(typeof key.privateJwk.d, "string");
  const pub = key.publicJwk as JsonWebKey & { kid: string; use: string };
  assert.equal(pub.kid, key.kid);
  assert.equal(pub.alg, "ES256");
  assert.equal(pub.use, "sig");
  assert.deepEqual(pub.key_ops, ["verify"]);
  assert.equal(pub.crv, "P-256");
  assert.equal("d" in pub, false);
  const token = await signEs256({ sub: "x" }, key.privateJwk, key.kid);
  const claims = await verifyAccessToken(token, {
    jwtSecret: LOCAL_JWT_SECRET,
    publicJwks: [key.publicJwk],
  });
  assert.equal(claims.sub, "x");
});

Deno.test("loadOrCreateSigningKey: creates the folder and file once, then reads the same key", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const file = `${dir}/nested/deeper/signing_key.json`;
    const first = await loadOrCreateSigningKey(file);
    const second = await loadOrCreateSigningKey(file);
    assert.deepEqual(second, first);
    assert.equal((await Deno.stat(file)).isFile, true);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("loadOrCreateSigningKey: refuses a file that holds no ES256 key", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const file = `${dir}/k.json`;
    await Deno.writeTextFile(file, JSON.stringify({ kid: "x" }));
    await assert.rejects(() => loadOrCreateSigningKey(file), /ES256/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
