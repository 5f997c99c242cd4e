/**
 * auth-sync under load and faults: concurrent updates of one row are
 * serialized and none is lost; a provider that fails in the middle of an
 * update leaves the row and the account in agreement, or the answer says
 * `partial_failure` and so does the audit row; odd but valid emails and
 * usernames are taken as they are.
 *
 * @module
 */
import {
  authServerError,
  delayUnlessAborted,
  droppedConnection,
} from "../support/faults.ts";
import { serveFunctions } from "../support/functions.ts";
import { contractProblem, post, sleep, type Tally } from "./_support.ts";
import { signedInUser, type Target, type User } from "./_target.ts";
import { ODD_EMAILS } from "./bad_input.ts";

function _update(
  t: Target,
  admin: User,
  body: Record<string, unknown>,
  apiUrl = t.apiUrl,
) {
  return post(apiUrl, "auth-sync", {
    headers: {
      Authorization: `Bearer ${admin.token}`,
      "Content-Type": "application/json",
    },
    body: JSON.stringify({ action: "update", ...body }),
    signal: AbortSignal.timeout(60_000),
  });
}

async function _account(
  t: Target,
  id: string,
): Promise<{ email: string | null }> {
  const [row] = await t
    .sql`select email from auth.users where id = ${id}::uuid`;
  return { email: row?.email ?? null };
}

async function _row(t: Target, id: number) {
  const [row] = await t.sql`
    select correo, nombre_usuario, auth_user_id::text as auth_user_id, rol
    from public.usuarios where id = ${id}`;
  return row;
}

async function _signsIn(
  t: Target,
  email: string,
  password: string,
): Promise<boolean> {
  const res = await fetch(`${t.apiUrl}/auth/v1/token?grant_type=password`, {
    method: "POST",
    headers: { apikey: t.anonKey, "Content-Type": "application/json" },
    body: JSON.stringify({ email, password }),
  });
  const body = await res.json();
  if (res.ok) t.secrets.add(body.access_token, body.refresh_token);
  return res.ok;
}

/** Options of {@linkcode runAuthSyncConcurrency}. */
export interface AuthSyncConcurrencyOptions {
  /** Concurrent username updates of one row (default 20). */
  readonly sameField: number;
  /** Rounds of concurrent email + password + username updates (default 5). */
  readonly rounds: number;
}

/**
 * Concurrent updates of one row: all succeed (or wait their turn), the
 * audit has one `ok` row per success, and when different fields change at
 * once every one of them is there afterwards, in the row and the account.
 */
export async function runAuthSyncConcurrency(
  t: Target,
  tally: Tally,
  o: AuthSyncConcurrencyOptions,
): Promise<void> {
  const category = "concurrency: auth-sync same row";
  const admin = await signedInUser(t, {
    row: { auth_user_id: true, rol: "admin" },
  });
  const target = await signedInUser(t, { row: { auth_user_id: true } });
  const tag = crypto.randomUUID().slice(0, 6);

  const [{ n: auditBefore }] = await t.sql`
    select count(*)::int as n from public.auth_sync_audit
    where target_id = ${target.rowId} and outcome = 'ok'`;
  const names = Array.from(
    { length: o.sameField },
    (_, i) => `same-${tag}-${i}`,
  );
  const started = performance.now();
  const answers = await Promise.all(
    names.map((nombre_usuario) =>
      _update(t, admin, { id: target.rowId, nombre_usuario })
    ),
  );
  tally.figure(
    "concurrency: auth-sync same-row updates",
    `${names.length} at once in ${(performance.now() - started).toFixed(0)} ms`,
  );
  let ok = 0;
  for (const [i, a] of answers.entries()) {
    tally.count(category);
    if (
      tally.check(
        category,
        a.status === 200 && a.body.user.nombre_usuario === names[i] &&
          contractProblem(a, t.secrets) === null,
        () => `update ${i}: ${a.status} ${a.text.slice(0, 160)}`,
      )
    ) ok++;
  }
  const [{ n: auditAfter }] = await t.sql`
    select count(*)::int as n from public.auth_sync_audit
    where target_id = ${target.rowId} and outcome = 'ok'`;
  const final = await _row(t, target.rowId!);
  tally.count(category);
  tally.check(
    category,
    auditAfter - auditBefore === ok && names.includes(final.nombre_usuario),
    () =>
      `${ok} successes but ${
        auditAfter - auditBefore
      } ok audit rows; final username ${final.nombre_usuario}`,
  );

  // Different fields at once: a lost update would bring one of them back.
  for (let r = 0; r < o.rounds; r++) {
    const email = `mixed-${tag}-${r}@verify.test`;
    const password = `Pw-${crypto.randomUUID()}`;
    t.secrets.add(password);
    const nombre_usuario = `mixed-${tag}-${r}`;
    const results = await Promise.all([
      _update(t, admin, { id: target.rowId, email }),
      _update(t, admin, { id: target.rowId, password }),
      _update(t, admin, { id: target.rowId, nombre_usuario }),
    ]);
    for (const a of results) {
      tally.count(category);
      tally.check(
        category,
        a.status === 200,
        () => `round ${r}: ${a.status} ${a.text.slice(0, 160)}`,
      );
    }
    const row = await _row(t, target.rowId!);
    const account = await _account(t, target.id);
    tally.count(category);
    tally.check(
      category,
      row.correo === email && row.nombre_usuario === nombre_usuario &&
        account.email === email && await _signsIn(t, email, password),
      () =>
        `round ${r}: row ${row.correo}/${row.nombre_usuario}, account ${account.email}, expected ${email}/${nombre_usuario} and sign-in with the new password`,
    );
  }
}

/** How the provider fails during the account change. */
export type MidUpdateFault =
  | "refuses before changing"
  | "changes then answers 500"
  | "changes then drops the connection"
  | "changes then answers after 10 s";

/** All mid-update faults. */
export const MID_UPDATE_FAULTS: readonly MidUpdateFault[] = [
  "refuses before changing",
  "changes then answers 500",
  "changes then drops the connection",
  "changes then answers after 10 s",
];

/**
 * Puts a proxy in front of Auth that fails the admin API's account update
 * (`PUT /auth/v1/admin/users/<id>`) in one of the {@linkcode MidUpdateFault}
 * ways, runs an email update through functions that use the proxy, and
 * checks that afterwards the row's `correo` and the account's email agree,
 * or that the answer is `partial_failure` and the audit row says so.
 */
export async function runProviderMidUpdate(
  t: Target,
  tally: Tally,
  faults: readonly MidUpdateFault[] = MID_UPDATE_FAULTS,
): Promise<void> {
  const category = "fault: provider fails mid-update (auth-sync)";
  const admin = await signedInUser(t, {
    row: { auth_user_id: true, rol: "admin" },
  });
  for (const fault of faults) {
    const target = await signedInUser(t, { row: { auth_user_id: true } });
    await t
      .sql`update public.usuarios set correo = ${target.email} where id = ${target.rowId}`;
    let armed = true;
    const proxy = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen: () => {} },
      async (req) => {
        const url = new URL(req.url);
        const forward = () =>
          fetch(`${t.apiUrl}${url.pathname}${url.search}`, {
            method: req.method,
            headers: req.headers,
            body: req.body,
          });
        const hit = armed && req.method === "PUT" &&
          url.pathname.startsWith("/auth/v1/admin/users/");
        if (!hit) return await forward();
        armed = false;
        if (fault === "refuses before changing") {
          await req.body?.cancel();
          return authServerError();
        }
        const res = await forward();
        await res.body?.cancel();
        if (fault === "changes then answers 500") {
          return authServerError();
        }
        if (fault === "changes then drops the connection") {
          return droppedConnection();
        }
        await delayUnlessAborted(req, 10_000);
        return Response.json({}, { status: 200 });
      },
    );
    const proxyUrl = `http://127.0.0.1:${proxy.addr.port}`;
    const served = serveFunctions({
      apiUrl: proxyUrl,
      dbUrl: t.dbUrl,
      anonKey: t.anonKey,
      serviceRoleKey: t.serviceRoleKey,
    });
    try {
      const newEmail = `moved-${crypto.randomUUID().slice(0, 8)}@verify.test`;
      tally.count(category);
      const a = await _update(
        t,
        admin,
        { id: target.rowId, email: newEmail },
        served.apiUrl,
      );
      // The slow case may still be changing things at the provider.
      await sleep(200);
      const row = await _row(t, target.rowId!);
      const account = await _account(t, target.id);
      const agree = (row.correo ?? "").toLowerCase() ===
        (account.email ?? "").toLowerCase();
      const [audit] = await t.sql`
        select outcome, fields, detail from public.auth_sync_audit
        where target_id = ${target.rowId} order by id desc limit 1`;
      const reported = a.status === 500 && a.body?.code === "partial_failure" &&
        audit?.outcome === "partial_failure";
      tally.check(
        category,
        contractProblem(a, t.secrets) === null && (agree || reported) &&
          a.status !== 401,
        () =>
          `${fault}: answered ${a.status} ${
            a.text.slice(0, 140)
          }; row correo ${row.correo}, account email ${account.email}; audit ${
            JSON.stringify(audit ?? null)
          }`,
      );
      tally.figure(
        `auth-sync ${fault}`,
        `${a.status} ${a.body?.code ?? ""}; row and account ${
          agree ? "agree" : "differ"
        }; audit ${audit?.outcome ?? "none"}`,
      );
    } finally {
      await served.close();
      await proxy.shutdown();
    }
  }
}

/**
 * auth-sync with odd but valid emails and usernames: an administrator sets
 * each on a row; the answer is 200 (or a documented 4xx when the provider
 * or the row's neighbours refuse it), and what 200 says is what is stored.
 */
export async function runOddAuthSync(t: Target, tally: Tally): Promise<void> {
  const category = "bad input auth-sync: odd valid emails and usernames";
  const admin = await signedInUser(t, {
    row: { auth_user_id: true, rol: "admin" },
  });
  const target = await signedInUser(t, { row: { auth_user_id: true } });
  const usernames = [
    "o'brien",
    "José María",
    "名前",
    "user name with spaces",
    "émoji😀",
    "a",
    "x".repeat(255),
    "Robert'); DROP TABLE usuarios;--",
    "  padded  ",
    "UPPER",
    "tab\tinside",
  ];
  for (const raw of usernames) {
    const name = raw === "a" || raw.length > 200
      ? raw
      : `${raw}-${crypto.randomUUID().slice(0, 4)}`;
    tally.count(category);
    const a = await _update(t, admin, {
      id: target.rowId,
      nombre_usuario: name,
    });
    const row = await _row(t, target.rowId!);
    tally.check(
      category,
      contractProblem(a, t.secrets) === null &&
        (a.status === 200
          ? row.nombre_usuario === name.trim()
          : [400, 409].includes(a.status)),
      () =>
        `username ${JSON.stringify(name).slice(0, 60)}: ${a.status} ${
          a.text.slice(0, 140)
        }, stored ${JSON.stringify(row.nombre_usuario).slice(0, 60)}`,
    );
  }
  for (const raw of ODD_EMAILS) {
    const email = raw.replace("@", `.${crypto.randomUUID().slice(0, 4)}@`);
    tally.count(category);
    const a = await _update(t, admin, { id: target.rowId, email });
    const row = await _row(t, target.rowId!);
    const account = await _account(t, target.id);
    tally.check(
      category,
      contractProblem(a, t.secrets) === null &&
        (a.status === 200
          ? row.correo === email.toLowerCase() &&
            account.email === email.toLowerCase()
          : [400, 409, 422].includes(a.status) &&
            (row.correo ?? "").toLowerCase() ===
              (account.email ?? "").toLowerCase()),
      () =>
        `email ${email}: ${a.status} ${
          a.text.slice(0, 160)
        }; row ${row.correo}, account ${account.email}`,
    );
  }
}
