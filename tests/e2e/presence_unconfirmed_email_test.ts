/**
 * Matching by email (`presence.match_usuario` strategies 2 to 4: `correo`,
 * `nombre_usuario` = the email, `nombre_usuario` = its local part) uses only
 * an email Auth has confirmed, on both paths (the local token check, and
 * `PRESENCE_VERIFY=auth`) of presence-ping and of the `presence` read. The
 * unconfirmed state is the one Supabase Auth's identity unlink leaves with
 * confirmations on (an IdP's unverified email promoted to the account's,
 * `email_confirmed_at` nulled, the session kept), written here directly into
 * `auth.users`. PGlite, or PostgreSQL with `TEST_DATABASE_URL`.
 */
import assert from "node:assert/strict";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { call } from "../support/invoke.ts";
import {
  servedBehindCountingProxy,
  startTestStack,
  type TestStack,
} from "../support/stack.ts";

// The fourth strategy on for every domain.
const MATCH = { USERNAME_MATCH_DOMAINS: "*" };
const stack: TestStack = await startTestStack({ emailConfirmations: true });
// The local token check, behind a proxy that counts Auth's /user calls (it
// must make none); and the path that asks Auth every time.
const local = await servedBehindCountingProxy(stack, MATCH);
const viaAuth = await stack.withFunctionEnv({
  ...MATCH,
  PRESENCE_VERIFY: "auth",
});

/** The status and row id each path answers for `token`. */
async function everyPath(token: string) {
  const headers = { Authorization: `Bearer ${token}` };
  const answer = async (apiUrl: string, fn: string) => {
    const res = await call(apiUrl, fn, { headers, body: "{}" });
    return fn === "presence-ping" && res.status === 200
      ? [res.status, res.body.user.id]
      : [res.status, res.body?.code ?? null];
  };
  return {
    pingLocal: await answer(local.served.apiUrl, "presence-ping"),
    pingAuth: await answer(viaAuth.apiUrl, "presence-ping"),
    readLocal: await answer(local.served.apiUrl, "presence"),
    readAuth: await answer(viaAuth.apiUrl, "presence"),
  };
}

const strategies: [string, (email: string) => Record<string, unknown>][] = [
  ["correo", (email) => ({ correo: email.toUpperCase() })],
  ["nombre_usuario = the email", (email) => ({ nombre_usuario: email })],
  ["nombre_usuario = the local part", (email) => ({
    nombre_usuario: email.split("@")[0],
  })],
];

for (const [strategy, rowFor] of strategies) {
  e2eTest(
    `presence matching: an unconfirmed email reaches no row by ${strategy} (ping and read, local check and Auth); once confirmed it does`,
    async () => {
      const victim = `victim-${crypto.randomUUID().slice(0, 8)}@corp.test`;
      const [row] = await stack.sql`
        insert into public.usuarios ${stack.sql(rowFor(victim))} returning id`;
      const id = Number(row.id);
      const pest = await stack.createUser();
      await stack.sql`update auth.users
                      set email = ${victim}, email_confirmed_at = null
                      where id = ${pest.id}::uuid`;
      const before = local.calls.get("/auth/v1/user") ?? 0;

      assert.deepEqual(await everyPath(pest.token), {
        pingLocal: [404, "user_not_found"],
        pingAuth: [404, "user_not_found"],
        readLocal: [404, "user_not_found"],
        readAuth: [404, "user_not_found"],
      });
      const [untouched] = await stack.sql`
        select ultimo_acceso, presence_state from public.usuarios
        where id = ${id}`;
      assert.equal(untouched.ultimo_acceso, null);

      await stack.sql`update auth.users set email_confirmed_at = now()
                      where id = ${pest.id}::uuid`;
      assert.deepEqual(await everyPath(pest.token), {
        pingLocal: [200, id],
        pingAuth: [200, id],
        readLocal: [200, null],
        readAuth: [200, null],
      });
      assert.equal(local.calls.get("/auth/v1/user") ?? 0, before);
    },
  );
}

e2eTest(
  "presence matching: the earlier match_usuario signature, which functions deployed before 20261125010000 call until they are deployed again, still matches a confirmed email and not an unconfirmed one",
  async () => {
    const victim = `old-${crypto.randomUUID().slice(0, 8)}@corp.test`;
    const [row] = await stack.sql`
      insert into public.usuarios (correo) values (${victim}) returning id`;
    const pest = await stack.createUser();
    const oldCall = async () =>
      (await stack.sql`
        select id, level from presence.match_usuario(
          ${pest.id}::uuid, ${victim}::text, '{}'::text[])`)[0];
    await stack.sql`update auth.users
                    set email = ${victim}, email_confirmed_at = null
                    where id = ${pest.id}::uuid`;
    assert.deepEqual({ ...await oldCall() }, { id: null, level: null });
    await stack.sql`update auth.users set email_confirmed_at = now()
                    where id = ${pest.id}::uuid`;
    assert.deepEqual({ ...await oldCall() }, { id: row.id, level: 2 });
    // Another account's confirmed email proves nothing for this one.
    const other = await stack.createUser();
    assert.deepEqual(
      {
        ...(await stack.sql`
          select id from presence.match_usuario(
            ${other.id}::uuid, ${victim}::text, '{}'::text[])`)[0],
      },
      { id: null },
    );
  },
);

e2eTest("presence matching: the counting proxy shuts down", async () => {
  await local.served.close();
  await local.proxy.shutdown();
  await viaAuth.close();
});

closeStackAfterAll("presence matching", stack);
