/**
 * Attacks: forged, tampered, expired and revoked tokens, keys used as
 * tokens, identities that borrow an administrator's name, an unconfirmed
 * administrator email, one claimed by signing up first, one without an
 * account taken by the first sign-up, a flood of
 * refused calls against the audit, addresses hidden in usernames, SQL and
 * JSON injection in every field, and CORS preflights that try to send
 * credentials. None may get through, and the
 * `usuarios` table must be intact afterwards.
 *
 * @module
 */
import { exportJWK, generateKeyPair, SignJWT } from "jose";
import {
  contractProblem,
  maxUsuarioId,
  post,
  type Tally,
  usuariosFingerprint,
} from "./_support.ts";
import {
  mintToken,
  signedInUser,
  signedUpUser,
  type Target,
  type User,
} from "./_target.ts";
import type { FunctionName } from "./bad_input.ts";

const _enc = new TextEncoder();

function _b64(data: string | Uint8Array): string {
  const bytes = typeof data === "string" ? _enc.encode(data) : data;
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

function _claimsOf(token: string): Record<string, unknown> {
  const part = token.split(".")[1].replaceAll("-", "+").replaceAll("_", "/");
  return JSON.parse(atob(part + "=".repeat((4 - part.length % 4) % 4)));
}

async function _hs256(
  claims: Record<string, unknown>,
  secret: string,
  header: Record<string, unknown> = { alg: "HS256", typ: "JWT" },
): Promise<string> {
  const key = await crypto.subtle.importKey(
    "raw",
    _enc.encode(secret),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  const input = `${_b64(JSON.stringify(header))}.${
    _b64(JSON.stringify(claims))
  }`;
  const sig = await crypto.subtle.sign("HMAC", key, _enc.encode(input));
  return `${input}.${_b64(new Uint8Array(sig))}`;
}

/** A named forged token and who it pretends to be. */
interface _Forged {
  readonly name: string;
  readonly token: string;
}

/**
 * Every token attack against an administrator `admin`, whose real token is
 * the template: unsigned, wrongly keyed, tampered, expired, keys as tokens.
 */
async function _forgedTokens(t: Target, admin: User): Promise<_Forged[]> {
  const claims = _claimsOf(admin.token);
  const now = Math.floor(Date.now() / 1000);
  const [h, , s] = admin.token.split(".");
  const foreignEc = await generateKeyPair("ES256", { extractable: true });
  const foreignRsa = await generateKeyPair("RS256", { extractable: true });
  const forged: _Forged[] = [
    {
      name: "alg none",
      token: `${_b64('{"alg":"none","typ":"JWT"}')}.${
        _b64(JSON.stringify(claims))
      }.`,
    },
    {
      name: "alg none with the real kid",
      token: `${
        _b64(JSON.stringify({ alg: "none", kid: t.signingKey.kid, typ: "JWT" }))
      }.${_b64(JSON.stringify(claims))}.${s}`,
    },
    {
      name: "HS256 signed with the anon key",
      token: await _hs256(claims, t.anonKey),
    },
    {
      name: "HS256 signed with the service_role key",
      token: await _hs256(claims, t.serviceRoleKey),
    },
    {
      name: "HS256 signed with a wrong secret",
      token: await _hs256(claims, "not-the-project-secret-but-long-enough-123"),
    },
    {
      name: "HS256 keyed with the public JWK (key confusion)",
      token: await _hs256(
        claims,
        JSON.stringify(t.signingKey.publicJwk),
        { alg: "HS256", kid: t.signingKey.kid, typ: "JWT" },
      ),
    },
    {
      name: "ES256 foreign key under the real kid",
      token: await new SignJWT(claims)
        .setProtectedHeader({ alg: "ES256", kid: t.signingKey.kid, typ: "JWT" })
        .sign(foreignEc.privateKey),
    },
    {
      name: "ES256 foreign key, unpublished kid",
      token: await new SignJWT(claims)
        .setProtectedHeader({
          alg: "ES256",
          kid: crypto.randomUUID(),
          typ: "JWT",
        })
        .sign(foreignEc.privateKey),
    },
    {
      name: "ES256 foreign key with jku and embedded jwk",
      token: await new SignJWT(claims)
        .setProtectedHeader({
          alg: "ES256",
          typ: "JWT",
          jku: "http://127.0.0.1:9/jwks.json",
          jwk: await exportJWK(foreignEc.publicKey),
        })
        .sign(foreignEc.privateKey),
    },
    {
      name: "RS256 foreign key under the real kid",
      token: await new SignJWT(claims)
        .setProtectedHeader({ alg: "RS256", kid: t.signingKey.kid, typ: "JWT" })
        .sign(foreignRsa.privateKey),
    },
    {
      name: "tampered payload (role service_role)",
      token: `${h}.${
        _b64(JSON.stringify({ ...claims, role: "service_role" }))
      }.${s}`,
    },
    {
      name: "tampered payload (exp extended)",
      token: `${h}.${
        _b64(JSON.stringify({ ...claims, exp: now + 86400 * 365 }))
      }.${s}`,
    },
    {
      name: "tampered signature",
      token: `${h}.${admin.token.split(".")[1]}.${s.slice(0, -4)}AAAA`,
    },
    {
      name: "expired (real key)",
      token: await mintToken(t, {
        id: admin.id,
        email: admin.email,
        sessionId: admin.sessionId,
      }, { iat: now - 7200, exp: now - 3600 }),
    },
    {
      name: "expired by one second (real key)",
      token: await mintToken(t, {
        id: admin.id,
        email: admin.email,
        sessionId: admin.sessionId,
      }, { iat: now - 3601, exp: now - 1 }),
    },
    {
      name: "not valid yet (nbf in an hour, real key)",
      token: await mintToken(t, {
        id: admin.id,
        email: admin.email,
        sessionId: admin.sessionId,
      }, { nbf: now + 3600 }),
    },
    {
      name: "expired HS256 (project secret)",
      token: await _hs256(
        { ...claims, iat: now - 7200, exp: now - 3600 },
        t.jwtSecret,
      ),
    },
    {
      name: "session of another user (real key)",
      token: await mintToken(t, {
        id: admin.id,
        email: admin.email,
        sessionId: crypto.randomUUID(),
      }),
    },
    { name: "service_role key as a user token", token: t.serviceRoleKey },
    { name: "anon key as a user token", token: t.anonKey },
  ];
  for (const f of forged) t.secrets.add(f.token);
  return forged;
}

/** What a forged request asks each function to do. */
function _request(fn: FunctionName, victimRowId: number): unknown {
  if (fn === "presence") return { ids: [victimRowId] };
  return fn === "presence-ping"
    ? { state: "offline" }
    : { action: "update", id: victimRowId, nombre_usuario: "pwned" };
}

async function _expectRejected(
  t: Target,
  tally: Tally,
  category: string,
  fn: FunctionName,
  name: string,
  token: string,
  body: unknown,
  allowed: readonly number[] = [401],
): Promise<void> {
  tally.count(category);
  const a = await post(t.apiUrl, fn, {
    headers: {
      Authorization: `Bearer ${token}`,
      "Content-Type": "application/json",
    },
    body: JSON.stringify(body),
  });
  const problem = contractProblem(a, t.secrets);
  tally.check(
    category,
    problem === null && allowed.includes(a.status),
    () =>
      `${fn} ${name}: expected ${allowed.join("/")}, got ${a.status} ${
        problem ?? a.text.slice(0, 160)
      }`,
  );
  if (a.status === 401) {
    tally.check(
      category,
      a.headers.get("www-authenticate") === "Bearer" &&
        ["invalid_token", "missing_bearer"].includes(a.body?.code),
      () =>
        `${fn} ${name}: 401 without WWW-Authenticate or with code ${a.body?.code}`,
    );
  }
}

/** Options of {@linkcode runAttacks}. */
export interface AttackOptions {
  /** Functions to attack (auth-sync only once it exists). */
  readonly functions: readonly FunctionName[];
}

/**
 * Runs every attack against each function and checks that nothing got
 * through: the victims' rows are unchanged and the table's fingerprint too.
 */
export async function runAttacks(
  t: Target,
  tally: Tally,
  o: AttackOptions,
): Promise<void> {
  const tag = crypto.randomUUID().slice(0, 6);
  const admin = await signedInUser(t, {
    email: `atk-admin-${tag}@verify.test`,
    row: {
      auth_user_id: true,
      correo: `atk-admin-${tag}@verify.test`,
      rol: "admin",
    },
  });
  const victim = await signedInUser(t, {
    row: { auth_user_id: true, nombre_usuario: `victim-${tag}` },
  });
  // The row auth-sync injection legitimately rewrites; everything else that
  // exists now must come out unchanged.
  const injectionTarget = await signedInUser(t, {
    row: { auth_user_id: true, nombre_usuario: `inj-${tag}` },
  });
  const upTo = await maxUsuarioId(t.sql);
  const before = await usuariosFingerprint(t.sql, upTo, [
    injectionTarget.rowId!,
  ]);
  const adminBefore = await _presence(t, admin.rowId!);

  // Positive controls: the same requests with the real tokens succeed, so
  // a rejection below is the attack's doing, not a broken setup.
  const control = await post(t.apiUrl, "presence-ping", {
    headers: { Authorization: `Bearer ${victim.token}` },
  });
  tally.count("attack: positive control");
  tally.check(
    "attack: positive control",
    control.status === 200,
    () => `valid token got ${control.status} ${control.text.slice(0, 120)}`,
  );

  for (const f of await _forgedTokens(t, admin)) {
    for (const fn of o.functions) {
      // The project's service role key is auth-sync's trusted server
      // caller (docs/api.md "auth-sync"), not an attack there.
      if (fn === "auth-sync" && f.token === t.serviceRoleKey) continue;
      await _expectRejected(
        t,
        tally,
        "attack: forged or stolen token",
        fn,
        f.name,
        f.token,
        _request(fn, victim.rowId!),
      );
    }
  }

  // Revoked: deleted, banned, signed out. Each needs its own fresh user.
  for (const kind of ["deleted", "banned", "signed out"] as const) {
    for (const fn of o.functions) {
      const u = await signedInUser(t, {
        row: { auth_user_id: true, rol: "admin" },
      });
      const path = kind === "signed out"
        ? "/auth/v1/logout?scope=local"
        : `/auth/v1/admin/users/${u.id}`;
      const res = await fetch(`${t.apiUrl}${path}`, {
        method: kind === "deleted"
          ? "DELETE"
          : kind === "banned"
          ? "PUT"
          : "POST",
        headers: {
          apikey: t.anonKey,
          Authorization: `Bearer ${
            kind === "signed out" ? u.token : t.serviceRoleKey
          }`,
          "Content-Type": "application/json",
        },
        body: kind === "banned"
          ? JSON.stringify({ ban_duration: "24h" })
          : undefined,
      });
      await res.body?.cancel();
      if (!res.ok) {
        throw new Error(`could not make a ${kind} user: ${res.status}`);
      }
      await _expectRejected(
        t,
        tally,
        "attack: revoked token",
        fn,
        `${kind} user`,
        u.token,
        _request(fn, victim.rowId!),
      );
      const row = await _presence(t, u.rowId!);
      tally.check(
        "attack: revoked token",
        row.ultimo_acceso === null,
        () => `${fn} ${kind}: row ${u.rowId} was written`,
      );
    }
  }

  if (o.functions.includes("auth-sync")) {
    await _adminImpostors(t, tally, tag, victim);
    await _auditFlood(t, tally);
  }

  await _injection(t, tally, o, victim, injectionTarget);
  if (o.functions.includes("presence")) {
    await _presenceReads(t, tally, victim, admin);
  }
  await _cors(t, tally, o, victim);

  const adminAfter = await _presence(t, admin.rowId!);
  tally.count("attack: table intact");
  tally.check(
    "attack: table intact",
    adminAfter.ultimo_acceso === adminBefore.ultimo_acceso,
    () => `the impersonated administrator's row was written`,
  );
  const after = await usuariosFingerprint(t.sql, upTo, [
    injectionTarget.rowId!,
  ]);
  tally.check(
    "attack: table intact",
    after === before,
    () => `usuarios changed: ${before} -> ${after}`,
  );
}

async function _presence(
  t: Target,
  id: number,
): Promise<
  {
    ultimo_acceso: string | null;
    presence_state: string;
    nombre_usuario: string | null;
    rol: string | null;
  }
> {
  const [r] = await t.sql`
    select ultimo_acceso::text, presence_state, nombre_usuario, rol
    from public.usuarios where id = ${id}`;
  return r as never;
}

/**
 * A username equal to an administrator's must not borrow its rights; an
 * unconfirmed email listed in ADMIN_EMAILS gives none.
 */
async function _adminImpostors(
  t: Target,
  tally: Tally,
  tag: string,
  victim: User,
): Promise<void> {
  const category = "attack: administrator impostor";
  const adminName = `boss${tag}`;
  // The real administrator: linked by auth_user_id, known by username.
  const realAdmin = await signedInUser(t, {
    email: `${adminName}@verify.test`,
    row: {
      correo: `${adminName}@verify.test`,
      nombre_usuario: adminName,
      rol: "administrador",
      auth_user_id: true,
    },
  });
  const body = { action: "update", id: victim.rowId, nombre_usuario: "pwned" };
  tally.count(category);
  const ok = await post(t.apiUrl, "auth-sync", {
    headers: { Authorization: `Bearer ${realAdmin.token}` },
    body: JSON.stringify({
      action: "sync",
      ids: [victim.rowId],
      dry_run: true,
    }),
  });
  tally.check(
    category,
    ok.status === 200,
    () =>
      `positive control: real administrator got ${ok.status} ${
        ok.text.slice(0, 160)
      }`,
  );

  const squatter = await signedInUser(t, {
    email: `${adminName}@elsewhere.test`,
  });
  await _expectRejected(
    t,
    tally,
    category,
    "auth-sync",
    "admin username as local part",
    squatter.token,
    body,
    [403, 404],
  );
  const upper = await signedInUser(t, {
    email: `${adminName.toUpperCase()}@evil.test`,
  });
  await _expectRejected(
    t,
    tally,
    category,
    "auth-sync",
    "admin username upper-cased",
    upper.token,
    body,
    [403, 404],
  );

  const listed = t.adminEmails.find((e) => e.startsWith("unconfirmed"));
  if (listed) {
    const unconfirmed = await signedInUser(t, {
      email: listed,
      confirmed: false,
    });
    await _expectRejected(
      t,
      tally,
      category,
      "auth-sync",
      "unconfirmed email in ADMIN_EMAILS",
      unconfirmed.token,
      body,
      [403, 404],
    );
  } else {
    tally.fail(category, "no unconfirmed address in ADMIN_EMAILS to test with");
  }
  await _claimedAdminAddress(t, tally, victim);
  await _firstSignUpOfAdminAddress(t, tally, victim);
  await _signUpFirst(t, tally, tag, victim, realAdmin);
  const v = await _presence(t, victim.rowId!);
  tally.check(
    category,
    v.nombre_usuario !== "pwned",
    () => "victim's username was changed",
  );
}

/**
 * An `ADMIN_EMAILS` address whose account an administrator created
 * unconfirmed: with confirmations off, Auth hands that account, confirmed,
 * to whoever signs up with the address first. The stranger gets no rights:
 * no write, no read of emails.
 */
async function _claimedAdminAddress(
  t: Target,
  tally: Tally,
  victim: User,
): Promise<void> {
  const category = "attack: claimed administrator address";
  const listed = t.adminEmails.find((e) => e.startsWith("claimed"));
  if (!listed) {
    tally.fail(category, "no claimable address in ADMIN_EMAILS to test with");
    return;
  }
  await signedInUser(t, { email: listed, confirmed: false });
  const stranger = await signedUpUser(t, listed);
  await _expectRejected(
    t,
    tally,
    category,
    "auth-sync",
    "sign-up that claimed a listed address",
    stranger.token,
    { action: "update", id: victim.rowId, password: "Pwned-by-claim-1" },
    [404],
  );
  await _expectRejected(
    t,
    tally,
    category,
    "presence",
    "sign-up that claimed a listed address",
    stranger.token,
    { ids: [victim.rowId] },
    [404],
  );
}

/**
 * An `ADMIN_EMAILS` address that has no account yet: with confirmations
 * off, a stranger who signs up with it first is confirmed at once, as an
 * account an administrator creates confirmed would be. Without the
 * operator's stamp (`app_metadata.admin_verified_email`) it gets no rights:
 * no write, no read of emails. Positive control: a listed account the
 * operator stamped is an administrator.
 */
async function _firstSignUpOfAdminAddress(
  t: Target,
  tally: Tally,
  victim: User,
): Promise<void> {
  const category = "attack: first sign-up with an administrator address";
  const fresh = t.adminEmails.find((e) => e.startsWith("fresh"));
  const stamped = t.adminEmails.find((e) => e.startsWith("stamped"));
  if (!fresh || !stamped) {
    tally.fail(category, "no fresh and stamped addresses in ADMIN_EMAILS");
    return;
  }
  const operatorsOwn = await signedInUser(t, {
    email: stamped,
    adminVerified: true,
  });
  tally.count(category);
  const control = await post(t.apiUrl, "presence", {
    headers: { Authorization: `Bearer ${operatorsOwn.token}` },
    body: JSON.stringify({ ids: [victim.rowId] }),
  });
  tally.check(
    category,
    control.status === 200 && "correo" in (control.body?.users?.[0] ?? {}),
    () =>
      `positive control: stamped listed account got ${control.status} ${
        control.text.slice(0, 160)
      }`,
  );

  const stranger = await signedUpUser(t, fresh);
  await _expectRejected(
    t,
    tally,
    category,
    "auth-sync",
    "first sign-up with a listed address",
    stranger.token,
    { action: "update", id: victim.rowId, password: "Pwned-by-first-1" },
    [404],
  );
  await _expectRejected(
    t,
    tally,
    category,
    "auth-sync",
    "first sign-up with a listed address",
    stranger.token,
    { action: "sync", dry_run: true },
    [404],
  );
  await _expectRejected(
    t,
    tally,
    category,
    "presence",
    "first sign-up with a listed address",
    stranger.token,
    { ids: [victim.rowId] },
    [404],
  );
  tally.count(category);
  const signIn = await fetch(`${t.apiUrl}/auth/v1/token?grant_type=password`, {
    method: "POST",
    headers: { apikey: t.anonKey, "Content-Type": "application/json" },
    body: JSON.stringify({ email: victim.email, password: "Pwned-by-first-1" }),
  });
  await signIn.body?.cancel();
  tally.check(
    category,
    signIn.status === 400,
    () =>
      `the stranger's password opens the victim's account (${signIn.status})`,
  );
}

/**
 * A standard user's refused auth-sync calls, many and each naming another
 * row: every attempt is counted, and the audit grows by a handful of rows a
 * minute at most, not a row a call.
 */
async function _auditFlood(t: Target, tally: Tally): Promise<void> {
  const category = "attack: audit flood";
  const pest = await signedInUser(t, { row: { auth_user_id: true } });
  const calls = 40;
  for (let i = 0; i < calls; i++) {
    await _expectRejected(
      t,
      tally,
      category,
      "auth-sync",
      "refused update",
      pest.token,
      { action: "update", id: 1_000_000 + i, nombre_usuario: "flood" },
      [403],
    );
  }
  const rows = await t.sql<{ minute: string; n: number; attempts: number }[]>`
    select refused_minute::text as minute, count(*)::int as n,
           sum(attempts)::int as attempts
    from public.auth_sync_audit
    where actor_auth_user_id = ${pest.id}
    group by refused_minute`;
  tally.count(category);
  tally.check(
    category,
    rows.every((r) => r.minute !== null && r.n <= 6) &&
      rows.reduce((sum, r) => sum + r.attempts, 0) === calls,
    () => `audit rows of ${calls} refusals: ${JSON.stringify(rows)}`,
  );
}

/**
 * Signing up first, with confirmations off: with the email of an
 * administrator row that has no account yet (no rights), with the email of
 * a row no account owns (sync must not link it), and as
 * `<username>@anywhere` (no row borrowed by presence-ping).
 */
async function _signUpFirst(
  t: Target,
  tally: Tally,
  tag: string,
  victim: User,
  realAdmin: User,
): Promise<void> {
  const category = "attack: sign-up first";
  const adminEmail = `unlinked-admin${tag}@verify.test`;
  await t.sql`insert into public.usuarios (correo, nombre_usuario, rol)
              values (${adminEmail}, ${`unlinked-admin${tag}`}, 'admin')`;
  const claimant = await signedUpUser(t, adminEmail);
  await _expectRejected(
    t,
    tally,
    category,
    "auth-sync",
    "sign-up with an unlinked administrator row's email",
    claimant.token,
    { action: "update", id: victim.rowId, password: "Pwned-by-signup-1" },
    [403],
  );

  const ownerless = `ownerless${tag}@verify.test`;
  const [row] = await t.sql`insert into public.usuarios (correo)
                            values (${ownerless}) returning id`;
  await signedUpUser(t, ownerless);
  tally.count(category);
  const sync = await post(t.apiUrl, "auth-sync", {
    headers: { Authorization: `Bearer ${realAdmin.token}` },
    body: JSON.stringify({ action: "sync", ids: [Number(row.id)] }),
  });
  const [after] = await t.sql`select auth_user_id from public.usuarios
                              where id = ${row.id}`;
  tally.check(
    category,
    sync.status === 200 && sync.body?.results?.[0]?.status === "unverified" &&
      after.auth_user_id === null,
    () => `sync of a squatted row: ${sync.status} ${sync.text.slice(0, 160)}`,
  );

  const username = `borrowed${tag}`;
  const [named] = await t.sql`insert into public.usuarios (nombre_usuario)
                              values (${username}) returning id`;
  const borrower = await signedUpUser(t, `${username}@anywhere.test`);
  await _expectRejected(
    t,
    tally,
    category,
    "presence-ping",
    "sign-up as <username>@anywhere",
    borrower.token,
    { state: "online" },
    [404],
  );
  const borrowed = await _presence(t, Number(named.id));
  tally.check(
    category,
    borrowed.ultimo_acceso === null,
    () => `row "${username}" was written by an outsider`,
  );
}

// Header values cannot carry control characters (the raw bad-input suite
// sends those); they are dropped here.
function _printable(text: string): string {
  return [...text].filter((c) => c.charCodeAt(0) >= 0x20).join("");
}

/** SQL and JSON injection strings, each a plain value to the database. */
export const INJECTIONS: readonly string[] = [
  "' or '1'='1",
  "'; drop table public.usuarios; --",
  "offline'; update public.usuarios set rol='admin'; --",
  '"; drop table usuarios; --',
  "1; select pg_sleep(5)",
  "$$; drop table usuarios; $$",
  "\\x00\u0000",
  "offline\u0000' --",
  "%' and 1=1 --",
  '","rol":"admin',
  '{"$ne":null}',
  "') union select id, 'online', now() from public.usuarios --",
  "${7*7}",
  "<script>alert(1)</script>",
];

async function _injection(
  t: Target,
  tally: Tally,
  o: AttackOptions,
  victim: User,
  target: User,
): Promise<void> {
  const category = "attack: injection";
  for (const inj of INJECTIONS) {
    // presence-ping: state in body and query, token header, request id.
    for (
      const [where, init] of [
        ["body state", { body: JSON.stringify({ state: inj }) }],
        ["query state", { query: `?state=${encodeURIComponent(inj)}` }],
        ["body key", {
          body: JSON.stringify({ [inj]: "offline", state: inj }),
        }],
        ["request id", {
          headers: { "X-Request-Id": _printable(inj) },
        }],
      ] as const
    ) {
      tally.count(category);
      const init2 = init as {
        body?: string;
        query?: string;
        headers?: Record<string, string>;
      };
      const a = await post(t.apiUrl, "presence-ping", {
        query: init2.query,
        body: init2.body,
        headers: {
          Authorization: `Bearer ${victim.token}`,
          ...(init2.headers ?? {}),
        },
      });
      tally.check(
        category,
        a.status === 200 && a.body?.user?.presence_state === "online" &&
          a.body.user.id === victim.rowId,
        () =>
          `presence-ping ${where} ${JSON.stringify(inj)}: ${a.status} ${
            a.text.slice(0, 160)
          }`,
      );
    }
    tally.count(category);
    const a = await post(t.apiUrl, "presence-ping", {
      headers: {
        Authorization: `Bearer ${_printable(inj)}`,
      },
    });
    tally.check(
      category,
      a.status === 401,
      () => `presence-ping token ${JSON.stringify(inj)}: ${a.status}`,
    );
  }
  if (!o.functions.includes("auth-sync")) return;

  // auth-sync: an administrator writes injection strings into one target
  // row; each must be stored literally and nothing else may change.
  const admin = await signedInUser(t, {
    row: { auth_user_id: true, rol: "superadmin" },
  });
  const send = (body: unknown) =>
    post(t.apiUrl, "auth-sync", {
      headers: {
        Authorization: `Bearer ${admin.token}`,
        "Content-Type": "application/json",
      },
      body: typeof body === "string" ? body : JSON.stringify(body),
    });
  for (const inj of INJECTIONS) {
    const name = `${inj}-${crypto.randomUUID().slice(0, 4)}`;
    tally.count(category);
    const a = await send({
      action: "update",
      id: target.rowId,
      nombre_usuario: name,
    });
    const stored = await _presence(t, target.rowId!);
    tally.check(
      category,
      a.status === 400 ||
        (a.status === 200 && stored.nombre_usuario === name &&
          stored.rol !== "admin"),
      () =>
        `auth-sync nombre_usuario ${JSON.stringify(inj)}: ${a.status} stored ${
          JSON.stringify(stored.nombre_usuario)
        }`,
    );
    for (
      const body of [
        { action: "update", id: target.rowId, email: `${inj}@example.com` },
        {
          action: "update",
          id: target.rowId,
          password: `${inj}-Long-Enough-1`,
        },
        { action: "update", id: inj, nombre_usuario: "x" },
        { action: inj, id: target.rowId, nombre_usuario: "x" },
        { action: "sync", ids: [inj], dry_run: true },
        { action: "sync", after_id: inj, dry_run: true },
        {
          action: "update",
          id: target.rowId,
          nombre_usuario: "ok-name",
          rol: "admin",
        },
        JSON.parse(
          `{"action":"update","id":${target.rowId},"__proto__":{"rol":"admin"},"nombre_usuario":"proto-${
            crypto.randomUUID().slice(0, 4)
          }"}`,
        ),
      ]
    ) {
      tally.count(category);
      const r = await send(body);
      tally.check(
        category,
        r.status < 500 && contractProblem(r, t.secrets) === null,
        () =>
          `auth-sync ${JSON.stringify(body).slice(0, 100)}: ${r.status} ${
            r.text.slice(0, 160)
          }`,
      );
    }
    const row = await _presence(t, target.rowId!);
    tally.check(
      category,
      row.rol !== "admin",
      () => `injection made row ${target.rowId} an admin`,
    );
  }
}

/**
 * The presence read: a standard user's answers hold no email, no
 * `auth_user_id` and no role, whatever is asked; forged cursors and
 * injection strings in every member are refused with 400, never a 5xx.
 */
async function _presenceReads(
  t: Target,
  tally: Tally,
  victim: User,
  admin: User,
): Promise<void> {
  const read = (token: string, body: unknown) =>
    post(t.apiUrl, "presence", {
      headers: {
        Authorization: `Bearer ${token}`,
        "Content-Type": "application/json",
      },
      body: JSON.stringify(body),
    });
  const privacy = "attack: presence read privacy";
  // Addresses hidden inside usernames, not only a whole-email username.
  const tag = crypto.randomUUID().slice(0, 6);
  await t.sql`insert into public.usuarios (nombre_usuario) values
    (${`ana${tag}@corp.test;ana.old${tag}@mail.test`}),
    (${`Ana Ruiz <ana.r${tag}@corp.test>`}),
    (${`ana.r${tag}@corp.test / ana-${tag}`})`;
  const linked = new Set(
    (await t.sql<{ v: string }[]>`
      select correo as v from public.usuarios where correo is not null
      union all select auth_user_id::text from public.usuarios
      where auth_user_id is not null`).map((r) => r.v),
  );
  let after: number | null = 0;
  while (after !== null) {
    tally.count(privacy);
    const a = await read(victim.token, { after_id: after, limit: 500 });
    after = a.status === 200 ? a.body.next_after_id : null;
    const leaked = a.text.includes("@") || a.text.includes('"rol"') ||
      [...linked].some((v) => a.text.includes(v));
    tally.check(
      privacy,
      a.status === 200 && !leaked,
      () => `standard user's page: ${a.status} ${a.text.slice(0, 120)}`,
    );
  }
  tally.count(privacy);
  const control = await read(admin.token, { ids: [victim.rowId] });
  tally.check(
    privacy,
    control.status === 200 && "correo" in (control.body.users?.[0] ?? {}),
    () =>
      `administrator control: ${control.status} ${control.text.slice(0, 120)}`,
  );

  const forged = "attack: presence forged cursor";
  const good = (await read(victim.token, {})).body?.cursor as string;
  const [payload, mac] = (good ?? ".").split(".");
  const b64 = (x: string) =>
    btoa(x).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
  const cursors = [
    `${
      b64(JSON.stringify({ v: 1, t: "0", h: "0", s: "1:1:", a: 300, o: 900 }))
    }.${mac}`,
    `${payload}.${b64("x".repeat(32))}`,
    `${payload}`,
    `${payload}.${mac}.${mac}`,
    ...INJECTIONS.map((inj) => `${b64(inj)}.${mac}`),
    ...INJECTIONS,
  ];
  for (const cursor of cursors) {
    tally.count(forged);
    const a = await read(victim.token, { cursor });
    tally.check(
      forged,
      a.status === 400 && a.body?.code === "validation_failed" &&
        contractProblem(a, t.secrets) === null,
      () =>
        `cursor ${JSON.stringify(cursor.slice(0, 40))}: ${a.status} ${
          a.text.slice(0, 120)
        }`,
    );
  }
  for (const inj of INJECTIONS) {
    for (const body of [{ status: [inj] }, { ids: [inj] }, { after_id: inj }]) {
      tally.count(forged);
      const a = await read(victim.token, body);
      tally.check(
        forged,
        a.status === 400 && a.body?.code === "validation_failed" &&
          !a.text.includes(inj.slice(0, 12)),
        () =>
          `${JSON.stringify(body).slice(0, 60)}: ${a.status} ${
            a.text.slice(0, 120)
          }`,
      );
    }
  }
}

async function _cors(
  t: Target,
  tally: Tally,
  o: AttackOptions,
  victim: User,
): Promise<void> {
  const category = "attack: CORS with credentials";
  for (const fn of o.functions) {
    for (
      const origin of [
        "https://evil.example",
        "null",
        "http://localhost:3000",
        "https://app.example.com.evil.test",
      ]
    ) {
      tally.count(category);
      const pre = await fetch(`${t.apiUrl}/functions/v1/${fn}`, {
        method: "OPTIONS",
        headers: {
          Origin: origin,
          "Access-Control-Request-Method": "POST",
          "Access-Control-Request-Headers":
            "authorization, content-type, cookie",
          "Access-Control-Request-Private-Network": "true",
        },
      });
      await pre.body?.cancel();
      const acao = pre.headers.get("access-control-allow-origin");
      tally.check(
        category,
        pre.status === 204 &&
          pre.headers.get("access-control-allow-credentials") === null &&
          acao === "*",
        () =>
          `${fn} preflight from ${origin}: ${pre.status} ACAO=${acao} ACAC=${
            pre.headers.get("access-control-allow-credentials")
          }`,
      );
      tally.count(category);
      const withCookie = await fetch(`${t.apiUrl}/functions/v1/${fn}`, {
        method: "POST",
        headers: { Origin: origin, Cookie: `sb-access-token=${victim.token}` },
        credentials: "include",
      });
      const text = await withCookie.text();
      tally.check(
        category,
        withCookie.status === 401 &&
          withCookie.headers.get("access-control-allow-credentials") === null &&
          withCookie.headers.get("access-control-allow-origin") === "*",
        () =>
          `${fn} cookie-only POST from ${origin}: ${withCookie.status} ${
            text.slice(0, 100)
          }`,
      );
    }
  }
}
