/**
 * The local inbox of the stack (`/inbox/`), as a developer meets it with
 * `enable_confirmations = true`: a confirmation mail and a recovery mail
 * arrive, and their links work through supabase-js.
 */
import assert from "node:assert/strict";
import { authConfig } from "../../local/stack.ts";
import { StartError } from "../../local/start_error.ts";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { follow, mails as inboxMails } from "../support/inbox.ts";
import { startTestStack, type TestStack } from "../support/stack.ts";

const stack: TestStack = await startTestStack({ emailConfirmations: true });

const mails = (to: string) => inboxMails(stack.apiUrl, to);

e2eTest(
  "inbox: a sign-up's confirmation mail arrives at /inbox/ and its link confirms the account, which then signs in",
  async () => {
    const email = `inbox-${crypto.randomUUID().slice(0, 8)}@test.local`;
    const client = stack.anon();
    const signUp = await client.auth.signUp({ email, password: "secret123" });
    assert.equal(signUp.error, null);
    assert.equal(signUp.data.session, null);

    const [mail] = await mails(email);
    assert.equal(mail.subject, "Confirm your email address");
    assert.ok(mail.link.startsWith(`${stack.apiUrl}/auth/v1/verify?`));
    const page = await (await fetch(`${stack.apiUrl}/inbox/`)).text();
    assert.ok(page.includes(email));
    assert.ok(page.includes(`/inbox/${mail.id}`));
    const shown = await (await fetch(`${stack.apiUrl}/inbox/${mail.id}`))
      .text();
    assert.ok(shown.includes("Confirm email address"));

    const back = await follow(mail.link);
    assert.equal(back.get("type"), "signup");
    const signIn = await stack.anon().auth.signInWithPassword({
      email,
      password: "secret123",
    });
    assert.equal(signIn.error, null);
  },
);

e2eTest(
  "inbox: resetPasswordForEmail → the mailed link → updateUser sets a password that signs in",
  async () => {
    const user = await stack.createUser();
    const client = stack.anon();
    const sent = await client.auth.resetPasswordForEmail(user.email);
    assert.equal(sent.error, null);
    const [mail] = await mails(user.email);
    assert.equal(mail.subject, "Reset your password");

    const back = await follow(mail.link);
    assert.equal(back.get("type"), "recovery");
    const session = await client.auth.setSession({
      access_token: back.get("access_token")!,
      refresh_token: back.get("refresh_token")!,
    });
    assert.equal(session.error, null);
    const updated = await client.auth.updateUser({ password: "brand-new-pw" });
    assert.equal(updated.error, null);
    const signIn = await stack.anon().auth.signInWithPassword({
      email: user.email,
      password: "brand-new-pw",
    });
    assert.equal(signIn.error, null);
  },
);

e2eTest(
  "authConfig: settings the Auth stand-in cannot honour are refused at start with a line naming them",
  () => {
    for (
      const [toml, named] of [
        [
          "[auth]\nenable_anonymous_sign_ins = true\n",
          "enable_anonymous_sign_ins",
        ],
        [
          '[auth]\npassword_requirements = "letters_digits"\n',
          "password_requirements",
        ],
        ["[auth.email]\nenable_signup = false\n", "[auth.email] enable_signup"],
      ]
    ) {
      assert.throws(() => authConfig(toml), (error: unknown) => {
        assert.ok(error instanceof StartError);
        assert.ok(error.line().includes(named), error.line());
        assert.match(error.line(), /does not support/);
        return true;
      });
    }
    const honoured = authConfig(
      "[auth]\nenable_signup = false\nminimum_password_length = 12\n",
    );
    assert.equal(honoured.signupEnabled, false);
    assert.equal(honoured.minPasswordLength, 12);
    return Promise.resolve();
  },
);

closeStackAfterAll("inbox", stack);
