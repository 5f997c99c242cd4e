/**
 * JWTs as Supabase Auth signs and checks them.
 *
 * Checking follows golang-jwt v5 as Supabase Auth configures it
 * (internal/api/auth.go `parseJWTClaims`): only ES256 and HS256 are valid
 * methods (the algorithms of the configured keys); a `kid` found in the JWKS
 * selects that public key, otherwise an HS256 token falls back to the JWT
 * secret and anything else is "unrecognized"; `exp`/`nbf` are checked with no
 * leeway and `iat` is not. Error texts are golang-jwt's, so that the
 * stand-in's `bad_jwt` messages read like the real ones.
 *
 * @module
 */

/** One entry of the `amr` claim. */
export interface AmrEntry {
  /** e.g. `"password"`. */
  method: string;
  /** Unix seconds when the method was used. */
  timestamp: number;
}

/** Claims of an access token issued by Supabase Auth. */
export interface AccessTokenClaims {
  /** Issuer, e.g. `http://127.0.0.1:54321/auth/v1`. */
  iss?: string;
  /** User id. */
  sub?: string;
  /** `"authenticated"` (a string, not an array). */
  aud?: string | string[];
  /** Expiry, Unix seconds. */
  exp?: number;
  /** Not before, Unix seconds. */
  nbf?: number;
  /** Issued at, Unix seconds. */
  iat?: number;
  /** The user's email (`""` when none). */
  email?: string;
  /** The user's phone (`""` when none). */
  phone?: string;
  /** `raw_app_meta_data`. */
  app_metadata?: Record<string, unknown>;
  /** `raw_user_meta_data`. */
  user_metadata?: Record<string, unknown>;
  /** Postgres role, e.g. `"authenticated"`, `"anon"`, `"service_role"`. */
  role?: string;
  /** Authenticator assurance level, e.g. `"aal1"`. */
  aal?: string;
  /** Authentication methods used, most recent first. */
  amr?: AmrEntry[];
  /** Id of the row in `auth.sessions`. */
  session_id?: string;
  /** Whether the user signed in anonymously. */
  is_anonymous?: boolean;
  /** Any other claim. */
  [claim: string]: unknown;
}

/** A token that does not parse, verify or validate; message as golang-jwt's. */
export class JwtError extends Error {
  /**
   * @param message golang-jwt style text, e.g. `"token has invalid claims:
   * token is expired"`
   */
  constructor(message: string) {
    super(message);
    this.name = "JwtError";
  }
}

/** Options of {@linkcode verifyAccessToken}. */
export interface VerifyOptions {
  /** HS256 secret (the project's JWT secret). */
  jwtSecret: string;
  /** Public keys that may have signed ES256 tokens (the JWKS `keys`). */
  publicJwks: JsonWebKey[];
  /** Clock in ms, for tests. */
  now?: () => number;
}

const _encoder = new TextEncoder();
const _decoder = new TextDecoder();

/** Base64url without padding, as JWTs use. */
export function base64url(data: Uint8Array | string): string {
  const bytes = typeof data === "string" ? _encoder.encode(data) : data;
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(
    /=+$/,
    "",
  );
}

/**
 * Decodes strict unpadded base64url like Go's `base64.RawURLEncoding`,
 * throwing Go's `illegal base64 data at input byte N`.
 */
export function decodeBase64url(text: string): Uint8Array<ArrayBuffer> {
  const bad = text.search(/[^A-Za-z0-9_-]/);
  if (bad >= 0) throw new Error(`illegal base64 data at input byte ${bad}`);
  if (text.length % 4 === 1) {
    throw new Error(`illegal base64 data at input byte ${text.length - 1}`);
  }
  const padded = text.replaceAll("-", "+").replaceAll("_", "/") +
    "=".repeat((4 - text.length % 4) % 4);
  const binary = atob(padded);
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}

/**
 * Signs `claims` with ES256 under `kid`; the header is `{alg, kid, typ}` in
 * the key order Go's encoding/json gives a map.
 */
export async function signEs256(
  claims: Record<string, unknown>,
  privateJwk: JsonWebKey,
  kid: string,
): Promise<string> {
  const key = await _importKey("es-sign", privateJwk);
  const input = `${
    base64url(JSON.stringify({ alg: "ES256", kid, typ: "JWT" }))
  }.${base64url(JSON.stringify(claims))}`;
  const sig = await crypto.subtle.sign(
    { name: "ECDSA", hash: "SHA-256" },
    key,
    _encoder.encode(input),
  );
  return `${input}.${base64url(new Uint8Array(sig))}`;
}

/**
 * Signs `claims` with HS256 over `secret`; `header` lets tests add a `kid`
 * or change `alg` to forge tokens.
 */
export async function signHs256(
  claims: Record<string, unknown>,
  secret: string,
  header: Record<string, unknown> = { alg: "HS256", typ: "JWT" },
): Promise<string> {
  const key = await _importKey("hmac", secret);
  const input = `${base64url(JSON.stringify(header))}.${
    base64url(JSON.stringify(claims))
  }`;
  const sig = await crypto.subtle.sign("HMAC", key, _encoder.encode(input));
  return `${input}.${base64url(new Uint8Array(sig))}`;
}

/**
 * Verifies an access token the way Supabase Auth's middleware does and
 * returns its claims. Used by the stand-in itself and by the gateway for
 * functions with `verify_jwt`.
 *
 * @throws {JwtError} on a malformed, badly signed, wrongly keyed, expired or
 * not-yet-valid token; the message is golang-jwt's.
 *
 * @example
 * ```ts
 * const claims = await verifyAccessToken(token, {
 *   jwtSecret: LOCAL_JWT_SECRET,
 *   publicJwks: [signingKey.publicJwk],
 * });
 * ```
 */
export async function verifyAccessToken(
  token: string,
  opts: VerifyOptions,
): Promise<AccessTokenClaims> {
  const parts = token.split(".");
  if (parts.length !== 3) {
    throw new JwtError(
      "token is malformed: token contains an invalid number of segments",
    );
  }
  const header = _decodeJson(parts[0], "header", "map[string]interface {}");
  const claims = _decodeJson(parts[1], "claim", "tokens.AccessTokenClaims");
  _checkClaimTypes(claims);

  const alg = header.alg;
  if (typeof alg !== "string") {
    throw new JwtError(
      "token is unverifiable: signing method (alg) is unspecified",
    );
  }
  if (!_KNOWN_ALGS.has(alg)) {
    throw new JwtError(
      "token is unverifiable: signing method (alg) is unavailable",
    );
  }
  if (alg !== "ES256" && alg !== "HS256") {
    throw new JwtError(
      `token signature is invalid: signing method ${alg} is invalid`,
    );
  }
  let signature: Uint8Array<ArrayBuffer>;
  try {
    signature = decodeBase64url(parts[2]);
  } catch (err) {
    throw new JwtError(
      `token is malformed: could not base64 decode signature: ${
        (err as Error).message
      }`,
    );
  }

  const kid = header.kid;
  const jwk = typeof kid === "string"
    ? opts.publicJwks.find((k) => (k as { kid?: string }).kid === kid)
    : undefined;
  const signed = _encoder.encode(`${parts[0]}.${parts[1]}`);
  if (jwk) {
    if (alg !== "ES256") {
      throw new JwtError(
        "token signature is invalid: key is of invalid type: HMAC verify expects []byte",
      );
    }
    const key = await _importKey("es-verify", jwk);
    const ok = signature.length === 64 &&
      await crypto.subtle.verify(
        { name: "ECDSA", hash: "SHA-256" },
        key,
        signature,
        signed,
      );
    if (!ok) {
      throw new JwtError(
        "token signature is invalid: crypto/ecdsa: verification error",
      );
    }
  } else if (alg === "HS256") {
    const key = await _importKey("hmac", opts.jwtSecret);
    if (!await crypto.subtle.verify("HMAC", key, signature, signed)) {
      throw new JwtError("token signature is invalid: signature is invalid");
    }
  } else {
    throw new JwtError(
      `token is unverifiable: error while executing keyfunc: unrecognized JWT kid ${
        _goValue(kid)
      } for algorithm ${alg}`,
    );
  }

  const nowMs = (opts.now ?? Date.now)();
  const problems: string[] = [];
  if (typeof claims.exp === "number" && nowMs > claims.exp * 1000) {
    problems.push("token is expired");
  }
  if (typeof claims.nbf === "number" && nowMs < claims.nbf * 1000) {
    problems.push("token is not valid yet");
  }
  if (problems.length > 0) {
    throw new JwtError(`token has invalid claims: ${problems.join(", ")}`);
  }
  return claims as AccessTokenClaims;
}

const _KNOWN_ALGS = new Set([
  "HS256",
  "HS384",
  "HS512",
  "RS256",
  "RS384",
  "RS512",
  "ES256",
  "ES384",
  "ES512",
  "PS256",
  "PS384",
  "PS512",
  "EdDSA",
  "none",
]);

function _decodeJson(
  segment: string,
  what: "header" | "claim",
  goType: string,
): Record<string, unknown> {
  let bytes: Uint8Array;
  try {
    bytes = decodeBase64url(segment);
  } catch (err) {
    throw new JwtError(
      `token is malformed: could not base64 decode ${what}: ${
        (err as Error).message
      }`,
    );
  }
  let value: unknown;
  try {
    value = JSON.parse(_decoder.decode(bytes));
  } catch {
    throw new JwtError(
      `token is malformed: could not JSON decode ${what}: invalid character in JSON`,
    );
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new JwtError(
      `token is malformed: could not JSON decode ${what}: json: cannot unmarshal ${
        _jsonKind(value)
      } into Go value of type ${goType}`,
    );
  }
  return value as Record<string, unknown>;
}

// Go decodes the payload into a typed struct, so a claim of the wrong JSON
// type makes the whole token malformed.
const _CLAIM_TYPES: Record<string, [string, (v: unknown) => boolean]> = {
  iss: ["string", (v) => typeof v === "string"],
  sub: ["string", (v) => typeof v === "string"],
  aud: [
    "jwt.ClaimStrings",
    (v) =>
      typeof v === "string" ||
      (Array.isArray(v) && v.every((a) => typeof a === "string")),
  ],
  exp: ["jwt.NumericDate", (v) => typeof v === "number"],
  nbf: ["jwt.NumericDate", (v) => typeof v === "number"],
  iat: ["jwt.NumericDate", (v) => typeof v === "number"],
  jti: ["string", (v) => typeof v === "string"],
  email: ["string", (v) => typeof v === "string"],
  phone: ["string", (v) => typeof v === "string"],
  app_metadata: ["map[string]interface {}", _isObject],
  user_metadata: ["map[string]interface {}", _isObject],
  role: ["string", (v) => typeof v === "string"],
  aal: ["string", (v) => typeof v === "string"],
  amr: ["tokens.AMRClaim", Array.isArray],
  session_id: ["string", (v) => typeof v === "string"],
  is_anonymous: ["bool", (v) => typeof v === "boolean"],
};

function _isObject(v: unknown): boolean {
  return typeof v === "object" && !Array.isArray(v);
}

function _checkClaimTypes(claims: Record<string, unknown>): void {
  for (const [name, [goType, ok]] of Object.entries(_CLAIM_TYPES)) {
    const value = claims[name];
    if (value === undefined || value === null || ok(value)) continue;
    throw new JwtError(
      `token is malformed: could not JSON decode claim: json: cannot unmarshal ${
        _jsonKind(value)
      } into Go struct field AccessTokenClaims.${name} of type ${goType}`,
    );
  }
}

function _jsonKind(value: unknown): string {
  if (Array.isArray(value)) return "array";
  if (value === null) return "null";
  return typeof value === "object" ? "object" : typeof value;
}

// Mirrors Go's `%v` for a header value, which prints a missing kid as <nil>.
function _goValue(value: unknown): string {
  if (value === undefined || value === null) return "<nil>";
  if (typeof value === "string" || typeof value === "number") {
    return String(value);
  }
  return JSON.stringify(value);
}

const _keyCache = new Map<string, Promise<CryptoKey>>();

function _importKey(
  use: "hmac" | "es-sign" | "es-verify",
  material: string | JsonWebKey,
): Promise<CryptoKey> {
  const cacheKey = `${use}:${
    typeof material === "string" ? material : JSON.stringify(material)
  }`;
  let key = _keyCache.get(cacheKey);
  if (!key) {
    if (use === "hmac") {
      key = crypto.subtle.importKey(
        "raw",
        _encoder.encode(material as string),
        { name: "HMAC", hash: "SHA-256" },
        false,
        ["sign", "verify"],
      );
    } else {
      const jwk = material as JsonWebKey;
      const bare: JsonWebKey = { kty: "EC", crv: jwk.crv, x: jwk.x, y: jwk.y };
      if (use === "es-sign") bare.d = jwk.d;
      key = crypto.subtle.importKey(
        "jwk",
        bare,
        { name: "ECDSA", namedCurve: "P-256" },
        false,
        [use === "es-sign" ? "sign" : "verify"],
      );
    }
    // A bad key must not poison the cache for a corrected retry.
    key.catch(() => _keyCache.delete(cacheKey));
    _keyCache.set(cacheKey, key);
  }
  return key;
}
