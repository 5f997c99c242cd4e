/**
 * Keys of the local stack: the well-known HS256 secret with the anon and
 * service_role keys `supabase start` prints, the publishable and secret API
 * keys it prints beside them, and the ES256 key the stand-in signs access
 * tokens with (Supabase Auth's asymmetric signing keys).
 *
 * @module
 */

/** An ES256 key pair as JWKs; `kid` names it in token headers and the JWKS. */
export interface SigningKey {
  /** Key id, put in the `kid` header of every token signed with it. */
  kid: string;
  /** Private JWK (`kty: "EC"`, `crv: "P-256"`, with `d`). */
  privateJwk: JsonWebKey;
  /** Public JWK as published at `/.well-known/jwks.json`. */
  publicJwk: JsonWebKey;
}

/** The JWT secret of every local Supabase stack (config.toml default). */
export const LOCAL_JWT_SECRET =
  "super-secret-jwt-token-with-at-least-32-characters-long";

/**
 * The anon key `supabase start` prints: HS256 over {@linkcode
 * LOCAL_JWT_SECRET}, claims `{iss: "supabase-demo", role: "anon", exp:
 * 1983812996}`.
 */
export const LOCAL_ANON_KEY =
  "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJpc3MiOiJzdXBhYmFzZS1kZW1vIiwicm9sZSI6ImFub24iLCJleHAiOjE5ODM4MTI5OTZ9.CRXP1A7WOeoJeXxjNni43kdQwgnWNReilDMblYTn_I0";

/**
 * The service_role key `supabase start` prints: HS256 over {@linkcode
 * LOCAL_JWT_SECRET}, claims `{iss: "supabase-demo", role: "service_role",
 * exp: 1983812996}`.
 */
export const LOCAL_SERVICE_ROLE_KEY =
  "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJpc3MiOiJzdXBhYmFzZS1kZW1vIiwicm9sZSI6InNlcnZpY2Vfcm9sZSIsImV4cCI6MTk4MzgxMjk5Nn0.EGIM96RAZx35lJzdJsyH-qQwv8Hdp7fsn3W0YpN81IU";

/**
 * The publishable key `supabase start` prints (the CLI's fixed local
 * default). Not a JWT: the gateway stands it in for {@linkcode
 * LOCAL_ANON_KEY} on the way to Auth, as the CLI's Kong does.
 */
export const LOCAL_PUBLISHABLE_KEY =
  "sb_publishable_ACJWlzQHlZjBrEguHvfOxg_3BJgxAaH";

/**
 * The secret key `supabase start` prints (the CLI's fixed local default).
 * Not a JWT: the gateway stands it in for {@linkcode LOCAL_SERVICE_ROLE_KEY}
 * on the way to Auth, as the CLI's Kong does.
 */
export const LOCAL_SECRET_KEY = "sb_secret_N7UND0UgjKTVK-Uodkm0Hg_xSvEMPvz";

/**
 * The opaque API keys of the local stack, each with the legacy JWT it stands
 * for downstream: the secret key acts as `service_role`, the publishable key
 * as `anon`.
 */
export const LOCAL_OPAQUE_KEYS: Readonly<Record<string, string>> = {
  [LOCAL_PUBLISHABLE_KEY]: LOCAL_ANON_KEY,
  [LOCAL_SECRET_KEY]: LOCAL_SERVICE_ROLE_KEY,
};

/**
 * Generates a fresh ES256 signing key with a random UUID as `kid`.
 *
 * @example
 * ```ts
 * const key = await generateSigningKey();
 * console.log(key.publicJwk.kid === key.kid); // true
 * ```
 */
export async function generateSigningKey(): Promise<SigningKey> {
  const pair = await crypto.subtle.generateKey(
    { name: "ECDSA", namedCurve: "P-256" },
    true,
    ["sign", "verify"],
  ) as CryptoKeyPair;
  const kid = crypto.randomUUID();
  const priv = await crypto.subtle.exportKey("jwk", pair.privateKey);
  const pub = await crypto.subtle.exportKey("jwk", pair.publicKey);
  return {
    kid,
    privateJwk: {
      kty: "EC",
      crv: "P-256",
      x: priv.x,
      y: priv.y,
      d: priv.d,
      kid,
      alg: "ES256",
      key_ops: ["sign", "verify"],
      ext: true,
    } as JsonWebKey,
    publicJwk: publicJwkOf({ ...pub, kid } as JsonWebKey),
  };
}

/**
 * The public JWK exactly as Supabase Auth publishes it: the public EC
 * parameters with `kid`, `alg`, `use: "sig"` and `key_ops: ["verify"]`
 * (internal/conf/jwk.go forces the last two on every published key).
 */
export function publicJwkOf(jwk: JsonWebKey): JsonWebKey {
  const kid = (jwk as { kid?: string }).kid;
  return {
    alg: "ES256",
    crv: jwk.crv,
    ext: true,
    key_ops: ["verify"],
    kid,
    kty: "EC",
    use: "sig",
    x: jwk.x,
    y: jwk.y,
  } as JsonWebKey;
}

/**
 * Reads the signing key persisted in `file`, or generates one and writes it
 * there (creating the folder), so that tokens survive restarts of the stack.
 *
 * @example
 * ```ts
 * const key = await loadOrCreateSigningKey(".local/auth/signing_key.json");
 * ```
 */
export async function loadOrCreateSigningKey(
  file: string,
): Promise<SigningKey> {
  try {
    const parsed = JSON.parse(await Deno.readTextFile(file));
    return _checkedSigningKey(parsed, file);
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
  const key = await generateSigningKey();
  const slash = Math.max(file.lastIndexOf("/"), file.lastIndexOf("\\"));
  if (slash > 0) await Deno.mkdir(file.slice(0, slash), { recursive: true });
  // The private key must not be readable by other local users.
  await Deno.writeTextFile(file, JSON.stringify(key, null, 2) + "\n", {
    mode: 0o600,
  });
  return key;
}

function _checkedSigningKey(value: unknown, file: string): SigningKey {
  const v = value as Partial<SigningKey> | null;
  if (
    !v || typeof v.kid !== "string" || typeof v.privateJwk !== "object" ||
    typeof v.publicJwk !== "object" || v.privateJwk?.kty !== "EC" ||
    v.privateJwk?.crv !== "P-256" || typeof v.privateJwk?.d !== "string"
  ) {
    throw new Error(`${file} does not hold an ES256 signing key`);
  }
  return {
    kid: v.kid,
    privateJwk: v.privateJwk,
    publicJwk: publicJwkOf({ ...v.publicJwk, kid: v.kid } as JsonWebKey),
  };
}
