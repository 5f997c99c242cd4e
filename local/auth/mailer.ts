/**
 * The local inbox: where the Auth stand-in's mails go instead of an SMTP
 * server, as `supabase start` catches them in its mail catcher. Mails are
 * kept in memory (the newest {@linkcode INBOX_LIMIT}) and shown at
 * `/inbox/` by `local/inbox.ts`.
 *
 * The subjects and bodies are Supabase Auth's default templates
 * (internal/mailer/templatemailer), with its `{{ .ConfirmationURL }}` and
 * `{{ .Token }}` filled in, or a project's own ({@linkcode MailTemplate},
 * from config.toml `[auth.email.template.*]`).
 *
 * @module
 */

/** What a mail is for: the `type` its link carries to `/verify`. */
export type MailType =
  | "signup"
  | "invite"
  | "recovery"
  | "magiclink"
  | "email_change";

/** A caught mail. */
export interface Mail {
  /** Id, for the inbox page. */
  readonly id: string;
  /** ISO time it was sent. */
  readonly sentAt: string;
  readonly to: string;
  readonly subject: string;
  readonly type: MailType;
  /** The body, HTML as Supabase Auth's default template renders it. */
  readonly html: string;
  /** The link to follow (`{{ .ConfirmationURL }}`). */
  readonly link: string;
  /** The code to type instead (`{{ .Token }}`), for `verifyOtp`. */
  readonly otp: string;
}

/**
 * A project's own template of a kind of mail (config.toml
 * `[auth.email.template.<kind>]` `subject` and the file at
 * `content_path`). Its fields are Supabase Auth's: `{{ .ConfirmationURL }}`,
 * `{{ .Token }}`, `{{ .TokenHash }}`, `{{ .SiteURL }}`, `{{ .RedirectTo }}`,
 * `{{ .Email }}`, `{{ .NewEmail }}` ({@linkcode TEMPLATE_FIELDS}).
 */
export interface MailTemplate {
  subject?: string;
  html?: string;
}

/** The template fields the inbox fills in. */
export const TEMPLATE_FIELDS = [
  "ConfirmationURL",
  "Token",
  "TokenHash",
  "SiteURL",
  "RedirectTo",
  "Email",
  "NewEmail",
] as const;

type _Field = (typeof TEMPLATE_FIELDS)[number];

// A `{{ … }}` action of Go's templates; a field reference is `.Name`.
const _ACTION = /\{\{(.*?)\}\}/gs;

/**
 * The first action of `text` the inbox would not fill in (`if .Data.x`,
 * `.Data.name`, an unknown field), as written between the braces; `null`
 * when it fills in every one. A template with one is refused at start.
 */
export function unfilledAction(text: string): string | null {
  for (const [, inner] of text.matchAll(_ACTION)) {
    const field = /^\s*\.(\w+)\s*$/.exec(inner)?.[1];
    if (!field || !(TEMPLATE_FIELDS as readonly string[]).includes(field)) {
      return inner.trim();
    }
  }
  return null;
}

/** How many mails the inbox keeps (the oldest go first). */
export const INBOX_LIMIT = 500;

/**
 * The stack's inbox. `send` is what the Auth stand-in calls; the inbox
 * page and tests read with `list`.
 *
 * @example
 * ```ts
 * const inbox = new Inbox();
 * inbox.send({ to: "a@b.c", type: "recovery", link, otp: "123456" });
 * inbox.list("a@b.c")[0].subject; // "Reset your password"
 * ```
 */
export class Inbox {
  readonly #mails: Mail[] = [];
  readonly #onSend: (mail: Mail) => void;
  readonly #own: Partial<Record<MailType, MailTemplate>>;
  readonly #siteUrl: string;

  /**
   * @param onSend told of every mail (the stack logs it)
   * @param own the project's templates, by kind of mail, and the
   * `site_url` their `{{ .SiteURL }}` stands for
   */
  constructor(
    onSend: (mail: Mail) => void = () => {},
    own: {
      templates?: Partial<Record<MailType, MailTemplate>>;
      siteUrl?: string;
    } = {},
  ) {
    this.#onSend = onSend;
    this.#own = own.templates ?? {};
    this.#siteUrl = own.siteUrl ?? "";
  }

  /**
   * Renders and keeps a mail. `extra.email` is `{{ .Email }}`, the account's
   * current address (both email-change mails name it, as Supabase Auth's
   * do), the recipient when not given; `extra.newEmail` `{{ .NewEmail }}`.
   */
  send(
    input: { to: string; type: MailType; link: string; otp: string },
    extra: { newEmail?: string; email?: string } = {},
  ): Mail {
    const own = this.#own[input.type];
    const link = new URL(input.link);
    const fields: Record<_Field, string> = {
      ConfirmationURL: input.link,
      Token: input.otp,
      TokenHash: link.searchParams.get("token") ?? "",
      SiteURL: this.#siteUrl,
      RedirectTo: link.searchParams.get("redirect_to") ?? "",
      Email: extra.email ?? input.to,
      NewEmail: extra.newEmail ?? input.to,
    };
    const fill = (text: string, escape: (s: string) => string) =>
      text.replace(_ACTION, (all, inner: string) => {
        const name = /^\s*\.(\w+)\s*$/.exec(inner)?.[1];
        return name && name in fields ? escape(fields[name as _Field]) : all;
      });
    const mail: Mail = {
      id: crypto.randomUUID(),
      sentAt: new Date().toISOString(),
      to: input.to,
      subject: fill(own?.subject ?? _TEMPLATES[input.type].subject, (v) => v),
      type: input.type,
      html: fill(own?.html ?? _TEMPLATES[input.type].html, _escape),
      link: input.link,
      otp: input.otp,
    };
    this.#mails.push(mail);
    if (this.#mails.length > INBOX_LIMIT) this.#mails.shift();
    this.#onSend(mail);
    return mail;
  }

  /** Mails, newest first; only those to `to` (case-insensitive) when given. */
  list(to?: string): Mail[] {
    const wanted = to?.toLowerCase();
    return this.#mails.filter((m) => !wanted || m.to.toLowerCase() === wanted)
      .reverse();
  }

  /** One mail by id. */
  get(id: string): Mail | undefined {
    return this.#mails.find((m) => m.id === id);
  }

  /** Removes the mails with these ids. */
  delete(ids: Iterable<string>): void {
    const gone = new Set(ids);
    const kept = this.#mails.filter((m) => !gone.has(m.id));
    this.#mails.splice(0, this.#mails.length, ...kept);
  }

  /** Empties the inbox. */
  clear(): void {
    this.#mails.length = 0;
  }
}

// Supabase Auth's default subjects and templates; the code is added the
// way the hosted templates show it.
const _TEMPLATES: Record<MailType, { subject: string; html: string }> = {
  signup: {
    subject: "Confirm your email address",
    html: `<h2>Confirm your email address</h2>

<p>Follow the link below to confirm this email address and finish signing up.</p>
<p><a href="{{ .ConfirmationURL }}">Confirm email address</a></p>
`,
  },
  invite: {
    subject: "You've been invited",
    html: `<h2>You've been invited</h2>

<p>You've been invited to create an account. Follow the link below to accept.</p>
<p><a href="{{ .ConfirmationURL }}">Accept invitation</a></p>`,
  },
  recovery: {
    subject: "Reset your password",
    html: `<h2>Reset your password</h2>

<p>We received a request to reset your password. Follow the link below to choose a new one.</p>
<p><a href="{{ .ConfirmationURL }}">Reset password</a></p>
<p>If you didn't request this, you can safely ignore this email.</p>`,
  },
  magiclink: {
    subject: "Your sign-in link",
    html: `<h2>Your sign-in link</h2>

<p>Follow the link below to sign in. This link expires shortly and can only be used once.</p>
<p><a href="{{ .ConfirmationURL }}">Sign in</a></p>`,
  },
  email_change: {
    subject: "Confirm your new email address",
    html: `<h2>Confirm your new email address</h2>

<p>Follow the link below to confirm {{ .NewEmail }} as your new email address.</p>
<p><a href="{{ .ConfirmationURL }}">Confirm new email address</a></p>
<p>If you didn't request this change, you can safely ignore this email.</p>`,
  },
};

function _escape(text: string): string {
  return text.replaceAll("&", "&amp;").replaceAll("<", "&lt;")
    .replaceAll(">", "&gt;").replaceAll('"', "&quot;");
}
