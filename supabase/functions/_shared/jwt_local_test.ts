import assert from "node:assert/strict";
import { exportJWK, generateKeyPair, SignJWT } from "jose";
import { readEnv } from "./env.ts";
import { HttpError } from "./errors.ts";
import { JWKS_MAX_AGE_MS, KeySets } from "./jwt_local.ts";

const SUB = "00000000-0000-4000-8000-000000000001";
const SESSION = "00000000-0000-4000-8000-000000000002";

// A loopback JWKS endpoint publishing `keys()`, counting its fetches.
async function jwksServer() {
  const { privateKey, publicKey } = await generateKeyPair("ES256", {
    extractable: true,
  });
  const jwk = { ...(await exportJWK(publicKey)), kid: "k1", alg: "ES256" };
  const state = { published: [jwk] as unknown[], fetches: 0 };
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    () => {
      state.fetches++;
      return Response.json({ keys: state.published });
    },
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
  const token = (jti: string, exp: number | null) => {
    const jwt = new SignJWT({ session_id: SESSION, jti })
      .setProtectedHeader({ alg: "ES256", kid: "k1" })
      .setSubject(SUB)
      .setIssuer(env.tokenIssuer)
      .setAudience("authenticated");
    return (exp === null ? jwt : jwt.setExpirationTime(exp)).sign(privateKey);
  };
  return { env, state, token, close: () => server.shutdown() };
}

Deno.test("KeySets.verify: a signing key withdrawn from the JWKS stops being honoured within JWKS_MAX_AGE_MS of the injected clock, cached tokens included", async () => {
  const jwks = await jwksServer();
  // The key set's clock, moved by the test; the system clock stays put.
  const t0 = Date.now();
  let offset = 0;
  const keys = new KeySets(() => t0 + offset);
  const exp = Math.floor(t0 / 1000) + 3 * 3600;
  try {
    const first = await jwks.token("first", exp);
    assert.deepEqual(await keys.verify(first, jwks.env), {
      sub: SUB,
      sessionId: SESSION,
    });
    jwks.state.published = []; // the key is withdrawn right after the fetch
    offset = JWKS_MAX_AGE_MS - 60_000;
    const late = await jwks.token("late", exp);
    // The copy of the key set in use still has the key: honoured, cached.
    assert.notEqual(await keys.verify(late, jwks.env), null);
    assert.notEqual(await keys.verify(late, jwks.env), null);
    assert.equal(jwks.state.fetches, 1);
    offset = JWKS_MAX_AGE_MS;
    // The copy has expired: the key set is fetched again, the key is gone,
    // and neither token is honoured any longer (Auth decides instead).
    assert.equal(await keys.verify(late, jwks.env), null);
    assert.equal(await keys.verify(first, jwks.env), null);
    assert.equal(jwks.state.fetches, 2);
  } finally {
    await jwks.close();
  }
});

Deno.test("KeySets.verify: the platform's SUPABASE_JWKS copy is used for JWKS_MAX_AGE_MS from its first use, then the endpoint's: an isolate that outlives a key's withdrawal stops honouring it", async () => {
  const jwks = await jwksServer();
  const t0 = Date.now();
  let offset = 0;
  const keys = new KeySets(() => t0 + offset);
  const exp = Math.floor(t0 / 1000) + 3 * 3600;
  // The copy the platform injected at start, with the key in it.
  const injected = readEnv((name) =>
    ({
      SUPABASE_URL: jwks.env.supabaseUrl,
      SUPABASE_ANON_KEY: "anon",
      SUPABASE_SERVICE_ROLE_KEY: "service",
      SUPABASE_DB_URL: "postgresql://unused",
      SUPABASE_JWKS: JSON.stringify({ keys: jwks.state.published }),
    })[name]
  );
  try {
    jwks.state.published = []; // withdrawn; the injected copy still has it
    const first = await jwks.token("first", exp);
    assert.notEqual(await keys.verify(first, injected), null);
    offset = JWKS_MAX_AGE_MS - 60_000;
    assert.notEqual(
      await keys.verify(await jwks.token("b", exp), injected),
      null,
    );
    assert.equal(jwks.state.fetches, 0);
    offset = JWKS_MAX_AGE_MS;
    assert.equal(await keys.verify(await jwks.token("c", exp), injected), null);
    assert.equal(await keys.verify(first, injected), null);
    assert.equal(jwks.state.fetches, 1);
  } finally {
    await jwks.close();
  }
});

Deno.test("KeySets.verify: a token past its exp by the injected clock is left to Auth, though the system clock still takes it", async () => {
  const jwks = await jwksServer();
  const t0 = Date.now();
  let offset = 0;
  const keys = new KeySets(() => t0 + offset);
  try {
    const token = await jwks.token("soon", Math.floor(t0 / 1000) + 120);
    assert.notEqual(await keys.verify(token, jwks.env), null);
    offset = 120_000;
    assert.equal(await keys.verify(token, jwks.env), null);
  } finally {
    await jwks.close();
  }
});

Deno.test("KeySets.verify: a token without exp, though signed by a published key, is left to Auth", async () => {
  const jwks = await jwksServer();
  try {
    const keys = new KeySets(() => Date.now());
    const forever = await jwks.token("forever", null);
    assert.equal(await keys.verify(forever, jwks.env), null);
    const expiring = await jwks.token(
      "expiring",
      Math.floor(Date.now() / 1000) + 600,
    );
    assert.notEqual(await keys.verify(expiring, jwks.env), null);
  } finally {
    await jwks.close();
  }
});

Deno.test("KeySets: two instances share neither key sets nor verified tokens", async () => {
  const jwks = await jwksServer();
  try {
    const token = await jwks.token(
      "shared",
      Math.floor(Date.now() / 1000) + 600,
    );
    const a = new KeySets(() => Date.now());
    const b = new KeySets(() => Date.now());
    assert.notEqual(await a.verify(token, jwks.env), null);
    assert.equal(jwks.state.fetches, 1);
    // `a` withdraws nothing from `b`: b fetches its own copy, which no
    // longer has the key, and does not answer from a's verified tokens.
    jwks.state.published = [];
    assert.equal(await b.verify(token, jwks.env), null);
    assert.equal(jwks.state.fetches, 2);
    assert.notEqual(await a.verify(token, jwks.env), null);
  } finally {
    await jwks.close();
  }
});

Deno.test("KeySets.verify: Auth's key set out of reach is 503 idp_unavailable whose cause names what was fetched from where (not fetch's bare 'fetch failed')", async () => {
  const jwks = await jwksServer();
  const token = await jwks.token("any", Math.floor(Date.now() / 1000) + 60);
  await jwks.close();
  const keys = new KeySets(Date.now);
  const refused = await keys.verify(token, jwks.env).then(
    () => assert.fail("verified without a key set"),
    (e) => e,
  );
  assert.ok(refused instanceof HttpError);
  assert.equal(refused.code, "idp_unavailable");
  assert.match(
    (refused.cause as Error).message,
    new RegExp(
      `^key set not fetched from ${jwks.env.supabaseUrl}/auth/v1/\\.well-known/jwks\\.json: `,
    ),
  );
});
