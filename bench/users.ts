/**
 * The benchmark's users, made in bulk: identities in `auth.users`,
 * `auth.identities`, `auth.sessions` and `auth.refresh_tokens` as the Auth
 * stand-in writes them, a linked `usuarios` row each, and access tokens
 * minted here from the claims of a token the stand-in issued.
 *
 * Going through the Auth admin API would cost about 70 ms of bcrypt per
 * user; one precomputed hash and a few `generate_series` statements make
 * 1,000 users in well under a second.
 *
 * @module
 */
import { decodeJwt, importJWK, type JWTPayload, SignJWT } from "jose";
import type postgres from "postgres";
import { hashPassword } from "../local/auth/passwords.ts";

/**
 * How user number `n` (1-based) is named: `auth.users.id` (and
 * `usuarios.auth_user_id`), `auth.sessions.id`, email (lower-case; its
 * local part is `usuarios.nombre_usuario`); `sql`: the same as SQL
 * expressions of an integer expression (pgbench's `:n`, `generate_series`).
 */
export const USER_NAMING = {
  id: (n: number) => `b0000000-0000-4000-8000-${String(n).padStart(12, "0")}`,
  sessionId: (n: number) =>
    `b1000000-0000-4000-8000-${String(n).padStart(12, "0")}`,
  email: (n: number) => `bench-${n}@bench.test`,
  sql: {
    id: (n: string) =>
      `('b0000000-0000-4000-8000-' || lpad((${n})::text, 12, '0'))`,
    sessionId: (n: string) =>
      `('b1000000-0000-4000-8000-' || lpad((${n})::text, 12, '0'))`,
    email: (n: string) => `('bench-' || (${n})::text || '@bench.test')`,
  },
};

/** The password every bench user has (one bcrypt hash is reused). */
export const BENCH_PASSWORD = "bench-password";

/** Access tokens of every bench user, index `n - 1`. */
export interface BenchTokens {
  /** ES256 tokens signed with the stack's key, as Auth issues them. */
  readonly es256: string[];
  /** HS256 tokens over the JWT secret, with the same claims. */
  readonly hs256: string[];
}

/**
 * What {@linkcode mintTokens} needs: the `signing_key.json` the stack
 * wrote, the HS256 secret, the claims of a token the stand-in issued
 * (`template`: names, order, `iss` and the rest kept), and `iat` (default:
 * now; ES256 signatures here are deterministic, so another `iat` is what
 * makes other token strings).
 */
export interface MintOptions {
  users: number;
  signingKeyFile: string;
  jwtSecret: string;
  template: JWTPayload;
  iat?: number;
}

/**
 * Inserts `count` users with one session and refresh token each, and their
 * linked `usuarios` rows, in one transaction.
 */
export async function createBenchUsers(
  sql: postgres.Sql,
  count: number,
): Promise<void> {
  const hash = await hashPassword(BENCH_PASSWORD);
  const n = "g.n";
  const id = USER_NAMING.sql.id(n);
  const email = USER_NAMING.sql.email(n);
  await sql.begin(async (tx) => {
    // The columns and values the stand-in's admin "create user" with
    // email_confirm and a later password sign-in leave behind
    // (local/auth/admin.ts, store.ts insertUser, tokens.ts issueSession).
    await tx.unsafe(
      `insert into auth.users (
         instance_id, id, aud, role, email, phone, encrypted_password,
         email_confirmed_at, last_sign_in_at, raw_app_meta_data,
         raw_user_meta_data, created_at, updated_at, confirmation_token,
         recovery_token, email_change_token_new, email_change, is_sso_user,
         is_anonymous)
       select '00000000-0000-0000-0000-000000000000', ${id}::uuid,
         'authenticated', 'authenticated', ${email}, null, $1,
         now(), now(), '{"provider":"email","providers":["email"]}',
         '{"email_verified":true}', now(), now(), '', '', '', '', false, false
       from generate_series(1, $2::int) g(n)`,
      [hash, count],
    );
    await tx.unsafe(
      `insert into auth.identities (
         provider_id, user_id, identity_data, provider, last_sign_in_at,
         created_at, updated_at)
       select ${id}, ${id}::uuid,
         jsonb_build_object('email', ${email}, 'email_verified', false,
           'phone_verified', false, 'sub', ${id}),
         'email', now(), now(), now()
       from generate_series(1, $1::int) g(n)`,
      [count],
    );
    await tx.unsafe(
      `insert into auth.sessions (id, user_id, created_at, updated_at, aal, user_agent, ip)
       select ${USER_NAMING.sql.sessionId(n)}::uuid, ${id}::uuid, now(), now(),
         'aal1', 'bench', '127.0.0.1'
       from generate_series(1, $1::int) g(n)`,
      [count],
    );
    // Legacy 12-character refresh tokens, as the stand-in issues them.
    await tx.unsafe(
      `insert into auth.refresh_tokens (
         instance_id, token, user_id, revoked, created_at, updated_at, parent,
         session_id)
       select '00000000-0000-0000-0000-000000000000',
         substr(md5('bench-refresh-' || g.n), 1, 12), ${id}, false, now(),
         now(), null, ${USER_NAMING.sql.sessionId(n)}::uuid
       from generate_series(1, $1::int) g(n)`,
      [count],
    );
    await tx.unsafe(
      `insert into public.usuarios (correo, nombre_usuario, auth_user_id, rol)
       select ${email}, ('bench-' || g.n), ${id}::uuid, 'usuario'
       from generate_series(1, $1::int) g(n)`,
      [count],
    );
  });
}

/**
 * Mints an ES256 and an HS256 access token per user for the sessions
 * {@linkcode createBenchUsers} made: the template's claims, in its order,
 * with the user's `sub`, `email` and `session_id` and fresh times.
 */
export async function mintTokens(options: MintOptions): Promise<BenchTokens> {
  const stored = JSON.parse(await Deno.readTextFile(options.signingKeyFile));
  const jwk = stored.privateJwk as JsonWebKey;
  const kid = stored.kid as string;
  // Only the key material: jose checks key_ops against the use it makes.
  const es256Key = await importJWK(
    { kty: jwk.kty, crv: jwk.crv, x: jwk.x, y: jwk.y, d: jwk.d },
    "ES256",
  );
  const hs256Key = new TextEncoder().encode(options.jwtSecret);
  const t = options.template;
  const iat = options.iat ?? Math.floor(Date.now() / 1000);
  const es256: string[] = [];
  const hs256: string[] = [];
  for (let n = 1; n <= options.users; n++) {
    const claims = {
      ...t,
      sub: USER_NAMING.id(n),
      exp: iat + (t.exp! - t.iat!),
      iat,
      email: USER_NAMING.email(n),
      amr: [{ method: "password", timestamp: iat }],
      session_id: USER_NAMING.sessionId(n),
    };
    es256.push(
      await new SignJWT(claims)
        .setProtectedHeader({ alg: "ES256", kid, typ: "JWT" })
        .sign(es256Key),
    );
    hs256.push(
      await new SignJWT(claims)
        .setProtectedHeader({ alg: "HS256", typ: "JWT" })
        .sign(hs256Key),
    );
  }
  return { es256, hs256 };
}

/**
 * The claims of a token the stand-in issues: user `n` signs in through
 * its password grant (one bcrypt check), as an app would.
 */
export async function issuedClaims(
  apiUrl: string,
  anonKey: string,
  n: number,
): Promise<JWTPayload> {
  const res = await fetch(`${apiUrl}/auth/v1/token?grant_type=password`, {
    method: "POST",
    headers: { apikey: anonKey, "Content-Type": "application/json" },
    body: JSON.stringify({
      email: USER_NAMING.email(n),
      password: BENCH_PASSWORD,
    }),
  });
  const body = await res.json();
  if (!res.ok) throw new Error(`Password grant failed: ${res.status}`);
  return decodeJwt(body.access_token);
}
