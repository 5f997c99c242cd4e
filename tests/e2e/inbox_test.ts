/**
 * The local inbox of the stack (`/inbox/`), as a developer meets it with
 * `enable_confirmations = true`: a confirmation mail and a recovery mail
 * arrive, and their links work through supabase-js.
 */
import assert from "node:assert/strict";
import { Inbox } from "../../local/auth/mailer.ts";
import { supabaseCli } from "../../local/migrate.ts";
import { authConfig, startStack } from "../../local/stack.ts";
import { createClient } from "@supabase/supabase-js";
import { StartError } from "../../local/start_error.ts";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { follow, mails as inboxMails } from "../support/inbox.ts";
import { startTestStack, type TestStack } from "../support/stack.ts";

const stack: TestStack = await startTestStack({
  emailConfirmations: true,
  mailPort: 0,
});

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
  "Mailpit API: an app's end-to-end test reads the confirmation mail as from supabase start's Mailpit (search to:, the message's HTML link), and the link confirms the account",
  async () => {
    const mailpit = stack.mailUrl!;
    const email = `mailpit-${crypto.randomUUID().slice(0, 8)}@test.local`;
    const signUp = await stack.anon().auth.signUp({
      email,
      password: "secret123",
    });
    assert.equal(signUp.error, null);

    const query = encodeURIComponent(`to:${email}`);
    const found = await (await fetch(
      `${mailpit}/api/v1/search?query=${query}`,
    )).json();
    assert.equal(found.messages_count, 1);
    assert.ok(found.total >= 1);
    const [summary] = found.messages;
    assert.equal(summary.Subject, "Confirm your email address");
    assert.deepEqual(summary.To, [{ Name: "", Address: email }]);
    assert.deepEqual(summary.From, {
      Name: "Admin",
      Address: "admin@email.com",
    });
    assert.equal(summary.Read, false);

    const message = await (await fetch(
      `${mailpit}/api/v1/message/${summary.ID}`,
    )).json();
    assert.equal(message.ID, summary.ID);
    // As such tests do: the first link of the HTML part, entities decoded.
    const href = /href="([^"]+)"/.exec(message.HTML)![1].replaceAll(
      "&amp;",
      "&",
    );
    assert.ok(href.startsWith(`${stack.apiUrl}/auth/v1/verify?`));
    assert.ok(message.Text.includes(href));
    const latest = await (await fetch(
      `${mailpit}/api/v1/message/latest?query=${query}`,
    )).json();
    assert.equal(latest.ID, summary.ID);
    assert.equal(
      (await (await fetch(`${mailpit}/api/v1/search?query=${query}`)).json())
        .messages[0].Read,
      true,
    );

    assert.equal((await follow(href)).get("type"), "signup");
    const signIn = await stack.anon().auth.signInWithPassword({
      email,
      password: "secret123",
    });
    assert.equal(signIn.error, null);

    const deleted = await fetch(`${mailpit}/api/v1/search?query=${query}`, {
      method: "DELETE",
    });
    assert.equal(await deleted.text(), "ok");
    assert.deepEqual(await mails(email), []);
    const home = await fetch(`${mailpit}/`, { redirect: "manual" });
    await home.body?.cancel();
    assert.equal(home.status, 302);
    assert.equal(home.headers.get("location"), `${stack.apiUrl}/inbox/`);
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
  "authConfig: settings the Auth stand-in cannot honour (hooks, other rotation, mail or session settings than it hard-wires) are refused at start with a line naming them; supabase init's defaults are not",
  async () => {
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
        [
          '[auth.hook.custom_access_token]\nenabled = true\nuri = "pg-functions://postgres/public/hook"\n',
          "[auth.hook.custom_access_token] enabled = true",
        ],
        [
          "[auth]\nenable_refresh_token_rotation = false\n",
          "enable_refresh_token_rotation = false",
        ],
        [
          "[auth]\nrefresh_token_reuse_interval = 0\n",
          "refresh_token_reuse_interval = 0",
        ],
        ['[auth]\njwt_secret = "env(MY_SECRET)"\n', "jwt_secret"],
        [
          "[auth.email]\ndouble_confirm_changes = false\n",
          "[auth.email] double_confirm_changes = false",
        ],
        [
          "[auth.email]\nsecure_password_change = true\n",
          "secure_password_change = true",
        ],
        ['[auth.email]\nmax_frequency = "60s"\n', 'max_frequency = "60s"'],
        ["[auth.email]\notp_length = 8\n", "otp_length = 8"],
        [
          '[auth.sessions]\ntimebox = "24h"\n',
          '[auth.sessions] timebox = "24h"',
        ],
        [
          '[auth.sessions]\ninactivity_timeout = "8h"\n',
          "inactivity_timeout",
        ],
      ]
    ) {
      assert.throws(() => authConfig(toml), (error: unknown) => {
        assert.ok(error instanceof StartError);
        assert.ok(error.line().includes(named), error.line());
        assert.match(error.line(), /does not support/);
        return true;
      });
    }
    // The Supabase CLI's own defaults, as `supabase init` writes them (CLI
    // 3: `[auth.email] enabled`, `[auth.sms] enabled`), are what the
    // stand-in does: nothing refused, nothing said not served.
    const dir = await Deno.makeTempDir({ prefix: "supabase-init-" });
    try {
      const init = await new Deno.Command(supabaseCli(), {
        args: ["init"],
        cwd: dir,
        stdin: "null",
        stdout: "null",
        stderr: "piped",
      }).output();
      assert.equal(init.code, 0, new TextDecoder().decode(init.stderr));
      const text = await Deno.readTextFile(`${dir}/supabase/config.toml`);
      assert.match(text, /\[auth\.email\]\n(?:#.*\n)*enabled = true/);
      const said: string[] = [];
      authConfig(
        text,
        (setting) => said.push(`refused ${setting}`),
        (setting) => said.push(`not served ${setting}`),
      );
      assert.deepEqual(said, []);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
    const honoured = authConfig(
      "[auth]\nenable_signup = false\nminimum_password_length = 12\n",
    );
    assert.equal(honoured.signupEnabled, false);
    assert.equal(honoured.minPasswordLength, 12);
  },
);

e2eTest(
  "the stack's log names a mail's kind, recipient and inbox link, never its subject, where a project's template may put the code ({{ .Token }})",
  async () => {
    const lines: string[] = [];
    const own = await startStack({
      apiPort: 0,
      dataDir: null,
      seed: false,
      authConfig: authConfig(
        `[auth.email.template.magic_link]\nsubject = "Your code is {{ .Token }}"\n`,
      ),
      log: (line) => lines.push(line),
    });
    try {
      const email = `code-${crypto.randomUUID().slice(0, 8)}@test.local`;
      const client = createClient(own.apiUrl, own.anonKey, {
        auth: { persistSession: false, autoRefreshToken: false },
      });
      assert.equal(
        (await client.auth.signUp({ email, password: "secret123" })).error,
        null,
      );
      const otp = await client.auth.signInWithOtp({ email });
      assert.equal(otp.error, null);
      const [mail] = own.inbox.list().filter((m) =>
        m.to === email &&
        m.type === "magiclink"
      );
      assert.ok(mail, "the magic link was mailed");
      assert.equal(mail.subject, `Your code is ${mail.otp}`);
      const logged = lines.filter((l) => l.includes(email));
      assert.deepEqual(logged, [
        `Mail (magiclink) to ${email}: open ${own.apiUrl}/inbox/${mail.id}`,
      ]);
      assert.ok(!lines.join("\n").includes(mail.otp));
    } finally {
      await own.close();
    }
  },
);

e2eTest(
  "config.toml [auth.email.template.*]: a project's own subject and HTML are mailed, with Supabase Auth's fields filled in (the @supabase/ssr confirm link with {{ .TokenHash }}); a file using more of Go's templates, or missing, is refused at start",
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "templates-" });
    try {
      const confirm = `${dir}/confirm.html`;
      await Deno.writeTextFile(
        confirm,
        `<a href="{{ .SiteURL }}/auth/confirm?token_hash={{.TokenHash}}&type=email&next={{ .RedirectTo }}">Confirm {{ .Email }}</a> or type {{ .Token }}`,
      );
      const fancy = `${dir}/fancy.html`;
      await Deno.writeTextFile(
        fancy,
        `{{ if .Data.name }}Hi {{ .Data.name }}{{ end }} {{ .ConfirmationURL }}`,
      );
      const config = authConfig(
        `[auth]\nsite_url = "http://localhost:3000"\n` +
          `[auth.email.template.confirmation]\nsubject = "Welcome to {{ .SiteURL }}"\ncontent_path = "${confirm}"\n` +
          `[auth.email.template.reauthentication]\ncontent_path = "${dir}/none.html"\n`,
      );
      const inbox = new Inbox(() => {}, {
        templates: config.emailTemplates,
        siteUrl: config.siteUrl,
      });
      const mail = inbox.send({
        to: "ana@x.test",
        type: "signup",
        link:
          "http://127.0.0.1:54321/auth/v1/verify?token=pkce_abc&type=signup&redirect_to=http%3A%2F%2Flocalhost%3A3000%2Fhome",
        otp: "123456",
      });
      assert.equal(mail.subject, "Welcome to http://localhost:3000");
      assert.equal(
        mail.html,
        `<a href="http://localhost:3000/auth/confirm?token_hash=pkce_abc&type=email&next=http://localhost:3000/home">Confirm ana@x.test</a> or type 123456`,
      );
      // Other kinds keep Supabase Auth's default template.
      assert.equal(
        inbox.send({
          to: "ana@x.test",
          type: "recovery",
          link: "http://x/v?token=t",
          otp: "1",
        }).subject,
        "Reset your password",
      );
      for (
        const [toml, named] of [
          [
            `content_path = "${fancy}"`,
            "{{ if .Data.name }} is not filled in locally",
          ],
          [`content_path = "${dir}/missing.html"`, "no such file"],
          [
            'subject = "Hi {{ .Data.name }}"',
            "{{ .Data.name }} is not filled in locally",
          ],
        ]
      ) {
        const refused: string[] = [];
        authConfig(
          `[auth.email.template.invite]\n${toml}\n`,
          (setting, what) => refused.push(`${setting}: ${what}`),
        );
        assert.equal(refused.length, 1);
        assert.ok(refused[0].includes(named), refused[0]);
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
);

closeStackAfterAll("inbox", stack);
