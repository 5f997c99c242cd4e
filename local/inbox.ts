/**
 * The local inbox page at `/inbox/` on the API port, standing in for the
 * mail catcher of `supabase start`: every mail the Auth stand-in sent
 * (confirmation, recovery, magic link, email change), newest first, each
 * with its link and code. `/inbox/api/messages` gives the same as JSON
 * (`?to=<address>` filters; `DELETE` empties the inbox).
 *
 * @module
 */
import type { Inbox, Mail } from "./auth/mailer.ts";

/**
 * Builds the handler of `/inbox/*`.
 *
 * @example
 * ```ts
 * createGateway({ auth, functions, isValidJwt, inbox: inboxPage(inbox) });
 * ```
 */
export function inboxPage(
  inbox: Inbox,
): (req: Request) => Promise<Response> {
  return (req) => Promise.resolve(_answer(inbox, req));
}

function _answer(inbox: Inbox, req: Request): Response {
  const url = new URL(req.url);
  const path = url.pathname.replace(/\/$/, "");
  if (path === "/inbox/api/messages") {
    if (req.method === "DELETE") {
      inbox.clear();
      return new Response(null, { status: 204 });
    }
    if (req.method !== "GET") return _notFound();
    const to = url.searchParams.get("to") ?? undefined;
    return Response.json({ messages: inbox.list(to) });
  }
  if (req.method !== "GET") return _notFound();
  if (path === "/inbox") return _html("Local inbox", _list(inbox.list()));
  const match = /^\/inbox\/([0-9a-f-]{36})$/.exec(path);
  const mail = match && inbox.get(match[1]);
  if (!mail) return _notFound();
  return _html(mail.subject, _message(mail));
}

function _list(mails: Mail[]): string {
  if (mails.length === 0) {
    return `<p>No mail yet. Sign-up confirmations (with <code>enable_confirmations = true</code>), password recovery, magic links and email changes arrive here.</p>`;
  }
  const rows = mails.map((m) =>
    `<tr><td>${_esc(m.sentAt.slice(11, 19))}</td><td>${_esc(m.to)}</td>` +
    `<td><a href="/inbox/${m.id}">${_esc(m.subject)}</a></td>` +
    `<td><code>${_esc(m.otp)}</code></td></tr>`
  ).join("\n");
  return `<table><tr><th>Time (UTC)</th><th>To</th><th>Subject</th><th>Code</th></tr>
${rows}</table>`;
}

function _message(mail: Mail): string {
  // The body is the Auth template rendered by the stand-in itself, with
  // every value escaped there: shown as the mail client would.
  return `<p><a href="/inbox/">&larr; Inbox</a></p>
<p><b>To:</b> ${_esc(mail.to)}<br><b>Sent:</b> ${_esc(mail.sentAt)}<br>
<b>Code:</b> <code>${_esc(mail.otp)}</code></p>
<hr>${mail.html}`;
}

function _html(title: string, body: string): Response {
  return new Response(
    `<!doctype html><html><head><meta charset="utf-8"><title>${
      _esc(title)
    }</title>
<style>body{font-family:system-ui,sans-serif;margin:2rem;max-width:60rem}
td,th{padding:.3rem .8rem;text-align:left;border-bottom:1px solid #ddd}</style>
</head><body><h1>${_esc(title)}</h1>
${body}</body></html>`,
    {
      headers: {
        "content-type": "text/html; charset=utf-8",
        // The page shows links that sign in: keep it out of other origins.
        "x-frame-options": "DENY",
        "cache-control": "no-store",
      },
    },
  );
}

function _notFound(): Response {
  return Response.json({ message: "Not found" }, { status: 404 });
}

function _esc(text: string): string {
  return text.replaceAll("&", "&amp;").replaceAll("<", "&lt;")
    .replaceAll(">", "&gt;").replaceAll('"', "&quot;");
}
