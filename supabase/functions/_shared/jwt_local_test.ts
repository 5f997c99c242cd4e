import assert from "node:assert/strict";
import { exportJWK, generateKeyPair, SignJWT } from "jose";
import { readEnv } from "./env.ts";
import {
  forgetVerifiedTokens,
  JWKS_MAX_AGE_MS,
  verifyAsymmetric,
} from "./jwt_local.ts";

const SUB = "00000000-0000-4000-8000-000000000001";
const SESSION = "00000000-0000-4000-8000-000000000002";

Deno.test("verifyAsymmetric: a signing key withdrawn from the JWKS stops being honoured within JWKS_MAX_AGE_MS, cached tokens included", async () => {
  const { privateKey, publicKey } = await generateKeyPair("ES256", {
    extractable: true,
  });
  const jwk = { ...(await exportJWK(publicKey)), kid: "k1", alg: "ES256" };
  let published = [jwk];
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    () => Response.json({ keys: published }),
  );
  const url = `http://127.0.0.1:${server.addr.port}`;
  const env = readEnv((name) =>
    ({
      SUPABASE_URL: url,
      SUPABASE_ANON_KEY: "anon",
      SUPABASE_SERVICE_ROLE_KEY: "service",
      SUPABASE_DB_URL: "postgresql://unused",
    })[name]
  );
  // The isolate's clock, moved by the test (jose reads Date.now too).
  const realNow = Date.now;
  const t0 = realNow();
  let offset = 0;
  Date.now = () => t0 + offset;
  const token = (jti: string) =>
    new SignJWT({ session_id: SESSION, jti })
      .setProtectedHeader({ alg: "ES256", kid: "k1" })
      .setSubject(SUB)
      .setIssuer(env.tokenIssuer)
      .setAudience("authenticated")
      .setExpirationTime(Math.floor(t0 / 1000) + 3 * 3600)
      .sign(privateKey);
  try {
    const first = await token("first");
    assert.deepEqual(await verifyAsymmetric(first, env), {
      sub: SUB,
      sessionId: SESSION,
    });
    published = []; // the key is withdrawn right after the fetch
    offset = JWKS_MAX_AGE_MS - 60_000;
    const late = await token("late");
    // The copy of the key set in use still has the key: honoured, cached.
    assert.notEqual(await verifyAsymmetric(late, env), null);
    assert.notEqual(await verifyAsymmetric(late, env), null);
    offset = JWKS_MAX_AGE_MS;
    // The copy has expired: the key set is fetched again, the key is gone,
    // and neither token is honoured any longer (Auth decides instead).
    assert.equal(await verifyAsymmetric(late, env), null);
    assert.equal(await verifyAsymmetric(first, env), null);
  } finally {
    Date.now = realNow;
    forgetVerifiedTokens();
    await server.shutdown();
  }
});
