/**
 * The stack a suite runs against, and the users it makes there: signed in
 * through the Auth stand-in like an app, or created in bulk with SQL and
 * given access tokens signed exactly as the stand-in signs them.
 *
 * @module
 */
import postgres from "postgres";
import { signEs256 } from "../../local/auth/jwt.ts";
import type { SigningKey } from "../../local/auth/mod.ts";
import { ADMIN_STAMP } from "../../supabase/functions/_shared/email_proof.ts";
import type { Secrets } from "./_support.ts";

/** A running stack, as the suites see it. */
export interface Target {
  /** Gateway base URL (`/auth/v1`, `/functions/v1/<name>`). */
  readonly apiUrl: string;
  /** The stack's database, with credentials. */
  readonly dbUrl: string;
  readonly anonKey: string;
  readonly serviceRoleKey: string;
  readonly jwtSecret: string;
  /** The ES256 key the Auth stand-in signs access tokens with. */
  readonly signingKey: SigningKey;
  /** The suites' own connection to the stack's database. */
  readonly sql: postgres.Sql;
  /** `ADMIN_EMAILS` the functions were given. */
  readonly adminEmails: readonly string[];
  /** Everything secret the run used, to scan responses and logs for. */
  readonly secrets: Secrets;
}

/** A user with a valid access token. */
export interface User {
  readonly id: string;
  readonly email: string;
  readonly password: string;
  readonly token: string;
  readonly sessionId: string;
  /** Id of its `usuarios` row, or `null`. */
  readonly rowId: number | null;
}

/** Options of {@linkcode signedInUser}. */
export interface SignedInUserOptions {
  /** Default: a unique `v<random>@verify.test`. */
  email?: string;
  /** Confirm the email (default true). Unconfirmed users get a minted token. */
  confirmed?: boolean;
  /** The `usuarios` row to insert; `auth_user_id: true` links it. Default none. */
  row?: Record<string, unknown> | null;
  /**
   * Stamp the address as an operator does for an `ADMIN_EMAILS`
   * administrator (`app_metadata.admin_verified_email`). Default false.
   */
  adminVerified?: boolean;
}

/**
 * Creates an identity through the admin API and signs it in with its
 * password (an unconfirmed one, which cannot sign in, gets a token minted
 * for a fresh session instead), then inserts its `usuarios` row.
 */
export async function signedInUser(
  t: Target,
  options: SignedInUserOptions = {},
): Promise<User> {
  const email = options.email ??
    `v${crypto.randomUUID().slice(0, 12)}@verify.test`;
  const password = `Pw-${crypto.randomUUID()}`;
  t.secrets.add(password);
  const confirmed = options.confirmed ?? true;
  const created = await _authJson(t, "/auth/v1/admin/users", t.serviceRoleKey, {
    email,
    password,
    email_confirm: confirmed,
    ...(options.adminVerified
      ? { app_metadata: { [ADMIN_STAMP]: email } }
      : {}),
  });
  const id = String(created.id);
  let token: string;
  let sessionId: string;
  if (confirmed) {
    const session = await _authJson(
      t,
      "/auth/v1/token?grant_type=password",
      t.anonKey,
      { email, password },
    );
    token = String(session.access_token);
    t.secrets.add(token, String(session.refresh_token));
    sessionId = JSON.parse(
      new TextDecoder().decode(_b64url(token.split(".")[1])),
    ).session_id;
  } else {
    sessionId = crypto.randomUUID();
    await t.sql`
      insert into auth.sessions (id, user_id, created_at, updated_at, aal)
      values (${sessionId}, ${id}, now(), now(), 'aal1')`;
    token = await mintToken(t, {
      id,
      email: created.email ?? email,
      sessionId,
    });
  }
  let rowId: number | null = null;
  if (options.row) {
    const row = { ...options.row };
    if (row.auth_user_id === true) row.auth_user_id = id;
    const [inserted] = await t.sql`
      insert into public.usuarios ${t.sql(row)} returning id`;
    rowId = Number(inserted.id);
  }
  return { id, email, password, token, sessionId, rowId };
}

/**
 * Signs up through the public API with the anon key, as an outsider can
 * (the stack confirms sign-ups at once, as `supabase start` does), and
 * returns the session's user.
 */
export async function signedUpUser(t: Target, email: string): Promise<User> {
  const password = `Pw-${crypto.randomUUID()}`;
  t.secrets.add(password);
  const session = await _authJson(t, "/auth/v1/signup", t.anonKey, {
    email,
    password,
  });
  const token = String(session.access_token);
  t.secrets.add(token, String(session.refresh_token));
  const claims = JSON.parse(
    new TextDecoder().decode(_b64url(token.split(".")[1])),
  );
  return {
    id: String(claims.sub),
    email,
    password,
    token,
    sessionId: claims.session_id,
    rowId: null,
  };
}

/**
 * An access token for `user` with exactly the claims the Auth stand-in puts
 * in one, signed with its ES256 key; `claims` override them.
 */
export async function mintToken(
  t: Target,
  user: { id: string; email: string; sessionId: string },
  claims: Record<string, unknown> = {},
): Promise<string> {
  const iat = Math.floor(Date.now() / 1000);
  const token = await signEs256(
    {
      iss: `${t.apiUrl}/auth/v1`,
      sub: user.id,
      aud: "authenticated",
      exp: iat + 3600,
      iat,
      email: user.email,
      phone: "",
      app_metadata: { provider: "email", providers: ["email"] },
      user_metadata: {},
      role: "authenticated",
      aal: "aal1",
      amr: [{ method: "password", timestamp: iat }],
      session_id: user.sessionId,
      is_anonymous: false,
      ...claims,
    },
    t.signingKey.privateJwk,
    t.signingKey.kid,
  );
  t.secrets.add(token);
  return token;
}

/**
 * Creates `count` confirmed identities with one session each and a linked
 * `usuarios` row, in a few SQL statements (the admin API would take
 * minutes for thousands), and mints their access tokens.
 */
export async function bulkUsers(
  t: Target,
  count: number,
  prefix: string,
): Promise<User[]> {
  const ids = Array.from({ length: count }, () => crypto.randomUUID());
  const sessions = Array.from({ length: count }, () => crypto.randomUUID());
  const emails = ids.map((_, i) => `${prefix}${i}@bulk.verify.test`);
  for (let i = 0; i < count; i += 500) {
    const slice = (a: string[]) => a.slice(i, i + 500);
    await t.sql`
      insert into auth.users (
        instance_id, id, aud, role, email, encrypted_password,
        email_confirmed_at, raw_app_meta_data, raw_user_meta_data,
        created_at, updated_at, confirmation_token, recovery_token,
        email_change_token_new, email_change, is_sso_user, is_anonymous)
      select '00000000-0000-0000-0000-000000000000', u.id, 'authenticated',
        'authenticated', u.email, '', now(),
        '{"provider":"email","providers":["email"]}'::jsonb, '{}'::jsonb,
        now(), now(), '', '', '', '', false, false
      from unnest(${slice(ids)}::uuid[], ${slice(emails)}::text[])
        as u(id, email)`;
    await t.sql`
      insert into auth.sessions (id, user_id, created_at, updated_at, aal)
      select s.id, s.user_id, now(), now(), 'aal1'
      from unnest(${slice(sessions)}::uuid[], ${slice(ids)}::uuid[])
        as s(id, user_id)`;
  }
  const rows = await t.sql`
    insert into public.usuarios (correo, nombre_usuario, auth_user_id)
    select e, split_part(e, '@', 1), id
    from unnest(${emails}::text[], ${ids}::uuid[]) as r(e, id)
    returning id, auth_user_id::text as auth_user_id`;
  const rowOf = new Map(rows.map((r) => [r.auth_user_id, Number(r.id)]));
  const users: User[] = [];
  for (let i = 0; i < count; i++) {
    const token = await mintToken(t, {
      id: ids[i],
      email: emails[i],
      sessionId: sessions[i],
    });
    users.push({
      id: ids[i],
      email: emails[i],
      password: "",
      token,
      sessionId: sessions[i],
      rowId: rowOf.get(ids[i]) ?? null,
    });
  }
  return users;
}

// The Auth API's JSON, whose shape depends on the route.
// deno-lint-ignore no-explicit-any
type _Json = any;

async function _authJson(
  t: Target,
  path: string,
  key: string,
  body: unknown,
): Promise<_Json> {
  const res = await fetch(`${t.apiUrl}${path}`, {
    method: "POST",
    headers: {
      apikey: key,
      Authorization: `Bearer ${key}`,
      "Content-Type": "application/json",
    },
    body: JSON.stringify(body),
  });
  const json = await res.json();
  if (!res.ok) {
    throw new Error(
      `Auth "${path}" answered ${res.status}: ${
        json.msg ?? json.message ?? json.error_description ?? res.statusText
      }`,
    );
  }
  return json;
}

function _b64url(text: string): Uint8Array {
  const b64 = text.replaceAll("-", "+").replaceAll("_", "/") +
    "=".repeat((4 - text.length % 4) % 4);
  return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
}

/** Opens the suites' own small pool on a database. */
export function openSql(url: string): postgres.Sql {
  return postgres(url, { max: 4, prepare: false, onnotice: () => {} });
}
