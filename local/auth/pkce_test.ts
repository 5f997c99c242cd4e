import assert from "node:assert/strict";
import {
  freshEmail,
  type Harness,
  json,
  jwtPart,
  withHarness as withSharedHarness,
} from "./_harness.ts";
import type { Mail } from "./mailer.ts";

// supabase-js with `flowType: "pkce"` (what @supabase/ssr uses) against the
// stand-in: each mailed flow ends in `?code=`, which the same client
// exchanges with the verifier it kept.

// Sign-ups wait for their confirmation mail here.
function withHarness(fn: (h: Harness) => Promise<void>): Promise<void> {
  return withSharedHarness(fn, { mailerAutoconfirm: false });
}

const BACK = "http://127.0.0.1:3000/auth/callback";

/** The newest mail of a kind (the inbox lists newest first). */
function last(h: Harness, to: string, type: Mail["type"]): Mail {
  const found = h.inbox.list(to).filter((m) => m.type === type);
  assert.ok(found.length > 0, JSON.stringify(h.inbox.list()));
  return found[0];
}

/** Follows a mail's link as a browser would, without following the redirect. */
async function follow(mail: Mail): Promise<URL> {
  const res = await fetch(mail.link, { redirect: "manual" });
  assert.equal(res.status, 303);
  await res.body?.cancel();
  return new URL(res.headers.get("location")!);
}

function amr(accessToken: string): string[] {
  const claims = jwtPart(accessToken, 1);
  return (claims.amr as { method: string }[]).map((a) => a.method);
}

async function flowStates(h: Harness, email: string): Promise<number> {
  const [row] = await h.sql`
    select count(*)::int as n from auth.flow_state f
    join auth.users u on u.id = f.user_id where u.email = ${email}`;
  return row.n;
}

Deno.test("auth pkce: signUp's confirmation link redirects with ?code=, which the same client exchanges once for a session", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    const client = h.anon("pkce");
    const signUp = await client.auth.signUp({
      email,
      password: "secret123",
      options: { emailRedirectTo: BACK },
    });
    assert.equal(signUp.error, null);
    assert.equal(signUp.data.session, null);
    const mail = last(h, email, "signup");
    assert.match(new URL(mail.link).searchParams.get("token")!, /^pkce_/);

    const back = await follow(mail);
    assert.equal(back.origin + back.pathname, BACK);
    assert.equal(back.hash, "", "no session in the fragment");
    const code = back.searchParams.get("code")!;
    assert.match(code, /^[0-9a-f-]{36}$/);

    const exchanged = await client.auth.exchangeCodeForSession(code);
    assert.equal(exchanged.error, null);
    assert.equal(exchanged.data.user?.email, email);
    assert.ok(exchanged.data.user?.email_confirmed_at);
    assert.deepEqual(amr(exchanged.data.session!.access_token), [
      "email/signup",
    ]);
    assert.equal(await flowStates(h, email), 0, "the flow state is spent");

    const again = await h.fetch("/token?grant_type=pkce", {
      method: "POST",
      body: JSON.stringify({ auth_code: code, code_verifier: "x".repeat(43) }),
    });
    assert.equal(again.status, 404);
    assert.equal((await json(again)).error_code, "flow_state_not_found");
  });
});

Deno.test("auth pkce: resetPasswordForEmail, signInWithOtp (known and unknown address) and resend each end in a code for their own flow", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    const client = h.anon("pkce");
    await client.auth.signUp({ email, password: "secret123" });
    const confirm = await client.auth.exchangeCodeForSession(
      (await follow(last(h, email, "signup"))).searchParams.get("code")!,
    );
    assert.equal(confirm.error, null);

    // Recovery: the exchange says so, and the new session sets a password.
    const reset = h.anon("pkce");
    h.advance(2_000); // max_frequency between two mails of a kind
    assert.deepEqual(
      await reset.auth.resetPasswordForEmail(email, { redirectTo: BACK }),
      { data: {}, error: null },
    );
    const events: string[] = [];
    reset.auth.onAuthStateChange((event) => {
      events.push(event);
    });
    const recovery = await reset.auth.exchangeCodeForSession(
      (await follow(last(h, email, "recovery"))).searchParams.get("code")!,
    );
    assert.equal(recovery.error, null);
    assert.ok(events.includes("PASSWORD_RECOVERY"), events.join());
    assert.deepEqual(amr(recovery.data.session!.access_token), ["recovery"]);
    assert.equal(
      (await reset.auth.updateUser({ password: "new-secret" })).error,
      null,
    );
    const signIn = await h.anon().auth.signInWithPassword({
      email,
      password: "new-secret",
    });
    assert.equal(signIn.error, null);

    // A magic link for the confirmed account.
    const magic = h.anon("pkce");
    h.advance(2_000);
    assert.equal(
      (await magic.auth.signInWithOtp({
        email,
        options: { emailRedirectTo: BACK },
      })).error,
      null,
    );
    const link = await magic.auth.exchangeCodeForSession(
      (await follow(last(h, email, "magiclink"))).searchParams.get("code")!,
    );
    assert.equal(link.error, null);
    assert.deepEqual(amr(link.data.session!.access_token), ["magiclink"]);

    // A magic link for an unknown address signs it up: its confirmation.
    const stranger = freshEmail("otp");
    const first = h.anon("pkce");
    assert.equal(
      (await first.auth.signInWithOtp({ email: stranger })).error,
      null,
    );
    const joined = await first.auth.exchangeCodeForSession(
      (await follow(last(h, stranger, "signup"))).searchParams.get("code")!,
    );
    assert.equal(joined.error, null);
    assert.deepEqual(amr(joined.data.session!.access_token), ["email/signup"]);

    // An unconfirmed sign-up's confirmation mailed again.
    const other = freshEmail();
    const late = h.anon("pkce");
    await late.auth.signUp({ email: other, password: "secret123" });
    h.advance(2_000);
    assert.equal(
      (await late.auth.resend({ type: "signup", email: other })).error,
      null,
    );
    const resent = await late.auth.exchangeCodeForSession(
      (await follow(last(h, other, "signup"))).searchParams.get("code")!,
    );
    assert.equal(resent.error, null);
    assert.equal(resent.data.user?.email, other);
  });
});

Deno.test("auth pkce: an email change's first link answers with its message in the query and the fragment, the second with a code", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    const client = h.anon("pkce");
    await client.auth.signUp({ email, password: "secret123" });
    await client.auth.exchangeCodeForSession(
      (await follow(last(h, email, "signup"))).searchParams.get("code")!,
    );
    const next = freshEmail("next");
    const changed = await client.auth.updateUser({ email: next }, {
      emailRedirectTo: BACK,
    });
    assert.equal(changed.error, null);
    const toOld = last(h, email, "email_change");
    const toNew = last(h, next, "email_change");
    for (const mail of [toOld, toNew]) {
      assert.match(new URL(mail.link).searchParams.get("token")!, /^pkce_/);
    }

    const first = await follow(toOld);
    const message =
      "Confirmation link accepted. Please proceed to confirm link sent to the other email";
    assert.equal(first.searchParams.get("message"), message);
    assert.equal(
      new URLSearchParams(first.hash.slice(1)).get("message"),
      message,
    );

    const second = await follow(toNew);
    const done = await client.auth.exchangeCodeForSession(
      second.searchParams.get("code")!,
    );
    assert.equal(done.error, null);
    assert.equal(done.data.user?.email, next);
    assert.deepEqual(amr(done.data.session!.access_token), ["email_change"]);
  });
});

Deno.test("auth pkce: verifyOtp with a PKCE mail's token_hash or code signs in directly, as an app's own confirm route does", async () => {
  await withHarness(async (h) => {
    const byHash = freshEmail();
    await h.anon("pkce").auth.signUp({ email: byHash, password: "secret123" });
    const hash = new URL(last(h, byHash, "signup").link).searchParams.get(
      "token",
    )!;
    const server = h.anon(); // a server route: no verifier needed
    const verified = await server.auth.verifyOtp({
      token_hash: hash,
      type: "email",
    });
    assert.equal(verified.error, null);
    assert.equal(verified.data.user?.email, byHash);
    assert.ok(verified.data.session?.access_token);

    const byCode = freshEmail();
    await h.anon("pkce").auth.signUp({ email: byCode, password: "secret123" });
    const withCode = await h.anon().auth.verifyOtp({
      email: byCode,
      token: last(h, byCode, "signup").otp,
      type: "signup",
    });
    assert.equal(withCode.error, null);
    assert.equal(withCode.data.user?.email, byCode);
  });
});

Deno.test("auth pkce: a wrong verifier is 400 bad_code_verifier and spends nothing; a code older than 5 minutes is 422 flow_state_expired", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    const client = h.anon("pkce");
    await client.auth.signUp({ email, password: "secret123" });
    const code = (await follow(last(h, email, "signup"))).searchParams.get(
      "code",
    )!;
    const wrong = await h.fetch("/token?grant_type=pkce", {
      method: "POST",
      body: JSON.stringify({ auth_code: code, code_verifier: "y".repeat(43) }),
    });
    assert.equal(wrong.status, 400);
    assert.deepEqual(
      { ...(await json(wrong)) },
      {
        code: 400,
        error_code: "bad_code_verifier",
        msg: "code challenge does not match previously saved code verifier",
      },
    );
    assert.equal(await flowStates(h, email), 1);

    const missing = await h.fetch("/token?grant_type=pkce", {
      method: "POST",
      body: JSON.stringify({ auth_code: code }),
    });
    assert.equal(missing.status, 400);
    assert.equal(
      (await json(missing)).msg,
      "invalid request: both auth code and code verifier should be non-empty",
    );

    h.advance(301_000);
    const expired = await client.auth.exchangeCodeForSession(code);
    assert.equal(expired.error?.status, 422);
    assert.equal(expired.error?.code, "flow_state_expired");
  });
});

Deno.test("auth pkce: PKCE parameters are checked as Supabase Auth checks them, before anything is mailed", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    const challenge = "a".repeat(43);
    const cases: [Record<string, string>, number, string][] = [
      [
        { code_challenge: challenge },
        400,
        "PKCE flow requires code_challenge_method and code_challenge",
      ],
      [
        { code_challenge: "short", code_challenge_method: "s256" },
        400,
        "code challenge has to be between 43 and 128 characters",
      ],
      [
        { code_challenge: "a".repeat(42) + "!", code_challenge_method: "s256" },
        400,
        "code challenge can only contain alphanumeric characters, hyphens, periods, underscores and tildes",
      ],
      [
        { code_challenge: challenge, code_challenge_method: "md5" },
        500,
        "Unexpected failure, please check server logs for more information",
      ],
    ];
    for (const [pkce, status, msg] of cases) {
      const res = await h.fetch("/signup", {
        method: "POST",
        body: JSON.stringify({ email, password: "secret123", ...pkce }),
      });
      assert.equal(res.status, status, JSON.stringify(pkce));
      assert.equal((await json(res)).msg, msg);
    }
    assert.deepEqual(h.inbox.list(email), []);
    const [row] = await h.sql`
      select count(*)::int as n from auth.users where email = ${email}`;
    assert.equal(row.n, 0, "the failed sign-up left no account");
  });
});

Deno.test("auth pkce: a link whose flow state is gone redirects with the error in the query and the fragment, and stays unspent", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    await h.anon("pkce").auth.signUp({ email, password: "secret123" });
    const mail = last(h, email, "signup");
    await h.sql`delete from auth.flow_state`;
    const back = await follow(mail);
    const fragment = new URLSearchParams(back.hash.slice(1));
    for (const params of [back.searchParams, fragment]) {
      assert.equal(params.get("error"), "invalid_request");
      assert.equal(params.get("error_code"), "flow_state_not_found");
      assert.equal(
        params.get("error_description"),
        "No associated flow state found. 422: No valid flow state found for user.",
      );
    }
    const [row] = await h.sql`
      select confirmation_token, email_confirmed_at from auth.users
      where email = ${email}`;
    assert.match(row.confirmation_token, /^pkce_/);
    assert.equal(row.email_confirmed_at, null);
  });
});

Deno.test("auth pkce: two exchanges of one code at the same moment (two tabs) give one session", async () => {
  await withHarness(async (h) => {
    const email = freshEmail();
    const verifier = "v".repeat(43);
    const challenge = await crypto.subtle.digest(
      "SHA-256",
      new TextEncoder().encode(verifier),
    ).then((d) =>
      btoa(String.fromCharCode(...new Uint8Array(d))).replaceAll("+", "-")
        .replaceAll("/", "_").replace(/=+$/, "")
    );
    const signUp = await h.fetch("/signup", {
      method: "POST",
      body: JSON.stringify({
        email,
        password: "secret123",
        code_challenge: challenge,
        code_challenge_method: "s256",
      }),
    });
    assert.equal(signUp.status, 200);
    await signUp.body?.cancel();
    const code = (await follow(last(h, email, "signup"))).searchParams.get(
      "code",
    )!;
    const exchange = () =>
      h.fetch("/token?grant_type=pkce", {
        method: "POST",
        body: JSON.stringify({ auth_code: code, code_verifier: verifier }),
      }).then(async (res) => {
        await res.body?.cancel();
        return res.status;
      });
    const statuses = await Promise.all([exchange(), exchange(), exchange()]);
    assert.deepEqual(statuses.sort(), [200, 404, 404]);
    const [row] = await h.sql`
      select count(*)::int as n from auth.sessions s
      join auth.users u on u.id = s.user_id where u.email = ${email}`;
    assert.equal(row.n, 1);
  });
});
