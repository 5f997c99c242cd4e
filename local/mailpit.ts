/**
 * The local inbox as Mailpit's HTTP API answers it, on `config.toml`
 * `[local_smtp] port` (54324), where `supabase start` runs Mailpit: an app's
 * end-to-end tests that read confirmation and magic-link mails from
 * `http://127.0.0.1:54324/api/v1/…` run unchanged against `npm start`.
 *
 * What is served, with Mailpit's field names and answers (see
 * `server/apiv1` in github.com/axllent/mailpit):
 * - `GET /api/v1/messages` (`start`, `limit`), `DELETE /api/v1/messages`
 *   (`{"IDs": [...]}`, or every message), `PUT /api/v1/messages` (marks
 *   read or unread: `{"Read": true, "IDs": [...]}` or `"Search"`, or all);
 * - `GET /api/v1/search?query=…` and `DELETE /api/v1/search?query=…`, with
 *   the search terms `to:`, `from:`, `subject:`, `addressed:`,
 *   `message-id:`, `is:read`, `is:unread`, free text, `"quoted phrases"`
 *   and `-`/`!` to exclude; other Mailpit terms (dates, tags, sizes) read
 *   as free text;
 * - `GET /api/v1/message/<ID>` (`latest`, with `?query=`, for the newest),
 *   which marks it read, and `GET /api/v1/message/<ID>/headers`;
 * - `GET /view/<ID>.html` and `.txt` (`latest` too): the message's HTML or
 *   text, as Mailpit's rendering endpoints answer them;
 * - `GET /livez`, `GET /readyz`; every other page redirects to the inbox
 *   page on the API port (`/inbox/`, or a message's page for
 *   `/view/<ID>`), which stands in for Mailpit's UI.
 *
 * Written here rather than run: Mailpit is a Go binary, which `npm ci`
 * cannot install; the stand-in's mails never pass through SMTP.
 *
 * @module
 */
import type { Inbox, Mail } from "./auth/mailer.ts";

/** Mailpit's address object (Go's `net/mail.Address`). */
export interface MailpitAddress {
  Name: string;
  Address: string;
}

/** The sender of every mail: `[local_smtp]` `admin_email` and `sender_name`. */
export interface MailpitSender {
  /** `admin_email` (Supabase CLI default `admin@email.com`). */
  address: string;
  /** `sender_name` (Supabase CLI default `Admin`). */
  name: string;
}

/**
 * Builds the handler of the mail port.
 *
 * @param inbox the stack's inbox
 * @param sender the From of every mail
 * @param inboxUrl the inbox page that stands in for Mailpit's UI
 *
 * @example
 * ```ts
 * Deno.serve({ port: 54324 }, mailpitApi(inbox, sender, `${apiUrl}/inbox/`));
 * ```
 */
export function mailpitApi(
  inbox: Inbox,
  sender: MailpitSender,
  inboxUrl: string,
): (req: Request) => Promise<Response> {
  // Mailpit keeps a read flag per message; the inbox page has none.
  const read = new Set<string>();
  const api = { inbox, sender, read };
  return async (req) => {
    const url = new URL(req.url);
    const path = url.pathname;
    const route = `${req.method} ${path.replace(/\/+$/, "")}`;
    if (route === "GET /livez" || route === "GET /readyz") return _text("ok");
    if (route === "GET /api/v1/messages") {
      return _summary(api, inbox.list(), url, "list");
    }
    if (route === "PUT /api/v1/messages") {
      const body = await req.json().catch(() => null);
      if (body === null || typeof body !== "object") {
        return _badRequest("invalid JSON body");
      }
      const ids = Array.isArray(body.IDs) ? body.IDs as string[] : [];
      const search = typeof body.Search === "string" ? body.Search.trim() : "";
      if (ids.length > 0 && search !== "") {
        return _badRequest(
          "You may specify either IDs or a search query, not both",
        );
      }
      const marked = search !== ""
        ? _search(api, search).map((m) => m.id)
        : ids.length > 0
        ? ids
        : inbox.list().map((m) => m.id);
      for (const id of marked) {
        if (body.Read === true) read.add(id);
        else read.delete(id);
      }
      return _text("ok");
    }
    if (route === "DELETE /api/v1/messages") {
      const ids = await _ids(req);
      _delete(api, ids ?? inbox.list().map((m) => m.id));
      return _text("ok");
    }
    if (route === "GET /api/v1/search" || route === "DELETE /api/v1/search") {
      const query = url.searchParams.get("query")?.trim() ?? "";
      if (query === "") return _badRequest("Error: no search query");
      const found = _search(api, query);
      if (req.method === "DELETE") {
        _delete(api, found.map((m) => m.id));
        return _text("ok");
      }
      return _summary(api, found, url, "search");
    }
    const message = /^\/api\/v1\/message\/([^/]+)(\/headers)?\/?$/.exec(path);
    if (message && req.method === "GET") {
      const mail = _find(api, _decoded(message[1]), url);
      if (!mail) return _notFound();
      if (message[2]) return Response.json(_headers(api, mail));
      read.add(mail.id);
      return Response.json(_message(api, mail));
    }
    const view = /^\/view\/([^/]+?)(\.html|\.txt)?$/.exec(path);
    if (view && req.method === "GET") {
      const mail = _find(api, _decoded(view[1]), url);
      if (!view[2]) {
        return Response.redirect(
          mail ? `${inboxUrl}${mail.id}` : inboxUrl,
          302,
        );
      }
      if (!mail) return _text("Message not found", 404);
      return view[2] === ".html"
        ? new Response(mail.html, {
          headers: { "content-type": "text/html; charset=utf-8" },
        })
        : _text(_plainText(mail));
    }
    if (req.method === "GET" && !path.startsWith("/api/")) {
      return Response.redirect(inboxUrl, 302);
    }
    return _notFound();
  };
}

interface _Api {
  inbox: Inbox;
  sender: MailpitSender;
  read: Set<string>;
}

// `MessagesSummary`: totals of the whole mailbox, `messages_count` of the
// query, a page of `limit` (default 50) from `start`.
function _summary(
  api: _Api,
  matched: Mail[],
  url: URL,
  from: "list" | "search",
): Response {
  const start = _int(url.searchParams.get("start"), 0, 1);
  const limit = _int(url.searchParams.get("limit"), 50, 0);
  const all = api.inbox.list();
  const unread = (mails: Mail[]) =>
    mails.filter((m) => !api.read.has(m.id)).length;
  // Mailpit's list applies `start` only with a limit, and `limit=0` is
  // every message there; its search slices, so `limit=0` is none.
  const page = limit === 0 && from === "list"
    ? matched
    : matched.slice(start, start + limit);
  return Response.json({
    total: all.length,
    unread: unread(all),
    count: page.length,
    messages_count: matched.length,
    messages_unread: unread(matched),
    start,
    tags: [],
    messages: page.map((m) => _summaryOf(api, m)),
  });
}

// Mailpit's `getStartLimit`: a value that is not a number, or below the
// floor, keeps the default.
function _int(value: string | null, fallback: number, floor: number): number {
  const n = Number(value);
  return value !== null && /^\d+$/.test(value) && n >= floor ? n : fallback;
}

// The fields Mailpit's `MessageSummary` and `Message` share.
function _common(api: _Api, mail: Mail) {
  const from: MailpitAddress = {
    Name: api.sender.name,
    Address: api.sender.address,
  };
  const to: MailpitAddress = { Name: "", Address: mail.to };
  return {
    ID: mail.id,
    MessageID: _messageId(mail),
    From: from,
    To: [to],
    Cc: [],
    Bcc: [],
    ReplyTo: [],
    Subject: mail.subject,
    Username: "",
    Tags: [],
    Size: new TextEncoder().encode(mail.html).length,
  };
}

function _summaryOf(api: _Api, mail: Mail) {
  const text = _plainText(mail);
  return {
    ..._common(api, mail),
    Read: api.read.has(mail.id),
    Created: mail.sentAt,
    Attachments: 0,
    Snippet: text.length > 250 ? `${text.slice(0, 250)}...` : text,
  };
}

function _message(api: _Api, mail: Mail) {
  return {
    ..._common(api, mail),
    ReturnPath: api.sender.address,
    ListUnsubscribe: { Header: "", Links: [], Errors: "", HeaderPost: "" },
    Date: mail.sentAt,
    Text: _plainText(mail),
    HTML: mail.html,
    Inline: [],
    Attachments: [],
  };
}

// Each header as a list of values, as Go's `mail.Header` encodes.
function _headers(api: _Api, mail: Mail): Record<string, string[]> {
  const from = api.sender.name
    ? `"${api.sender.name}" <${api.sender.address}>`
    : api.sender.address;
  return {
    "Content-Type": ["text/html; charset=UTF-8"],
    Date: [new Date(mail.sentAt).toUTCString().replace("GMT", "+0000")],
    From: [from],
    "Message-Id": [`<${_messageId(mail)}>`],
    "Mime-Version": ["1.0"],
    "Return-Path": [`<${api.sender.address}>`],
    Subject: [mail.subject],
    To: [mail.to],
  };
}

// A message id from the path; a bad escape (`%zz`) is an id no message
// has (Mailpit answers 404), not an error.
function _decoded(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return "";
  }
}

function _find(api: _Api, id: string, url: URL): Mail | undefined {
  if (id !== "latest") return api.inbox.get(id);
  const query = url.searchParams.get("query")?.trim() ?? "";
  return (query === "" ? api.inbox.list() : _search(api, query))[0];
}

function _delete(api: _Api, ids: string[]): void {
  api.inbox.delete(ids);
  for (const id of ids) api.read.delete(id);
}

// `{"IDs": [...]}`; no body, or no IDs, means every message (Mailpit's
// `DeleteMessages`).
async function _ids(req: Request): Promise<string[] | null> {
  try {
    const body = await req.json();
    const ids = Array.isArray(body?.IDs)
      ? body.IDs.filter((id: unknown) => typeof id === "string")
      : [];
    return ids.length > 0 ? ids : null;
  } catch {
    return null;
  }
}

// Mailpit's search (`internal/storage/search.go`), over the fields this
// inbox has: every term must match; `-` or `!` before a term excludes.
function _search(api: _Api, query: string): Mail[] {
  const terms = _terms(query);
  return api.inbox.list().filter((mail) =>
    terms.every(({ exclude, test }) => test(api, mail) !== exclude)
  );
}

type _Term = { exclude: boolean; test: (api: _Api, mail: Mail) => boolean };

function _terms(query: string): _Term[] {
  const terms: _Term[] = [];
  // Words, with "quoted phrases" as one word and their quotes removed.
  for (const match of query.matchAll(/(?:[^\s"]+|"[^"]*")+/g)) {
    let word = match[0].replaceAll('"', "");
    if (_clean(word) === "") continue;
    let exclude = false;
    if (word.length > 1 && /^[-!]/.test(word)) {
      exclude = true;
      word = word.slice(1);
    }
    terms.push({ exclude, test: _termTest(word) });
  }
  return terms;
}

function _termTest(word: string): _Term["test"] {
  const lower = word.toLowerCase();
  const field = /^(to|from|subject|addressed|message-id):(.*)$/.exec(lower);
  if (field) {
    const value = field[1] === "subject"
      ? lower.slice("subject:".length)
      : _clean(field[2]);
    const has = (s: string) => s.toLowerCase().includes(value);
    switch (field[1]) {
      case "to":
        return (_, m) => has(m.to);
      case "from":
        return (api) => has(_senderText(api));
      case "subject":
        return (_, m) => has(m.subject);
      case "addressed":
        return (api, m) => has(m.to) || has(_senderText(api));
      default:
        return (_, m) => has(_messageId(m));
    }
  }
  if (lower === "is:read") return (api, m) => api.read.has(m.id);
  if (lower === "is:unread") return (api, m) => !api.read.has(m.id);
  const text = _clean(lower);
  return (api, m) =>
    _clean(
      [m.subject, m.to, _senderText(api), _plainText(m)].join(" "),
    ).includes(text);
}

// Mailpit's `cleanString`: separators to spaces, one space, lower case.
function _clean(s: string): string {
  return s.replace(/\r?\n|\t|>|<|"|,|;|\(|\)/g, " ").split(/\s+/)
    .filter(Boolean).join(" ").toLowerCase();
}

// The plain text a mail client shows for the HTML body (the stand-in sends
// HTML only, as Supabase Auth's templates are): tags dropped, the link
// kept after its text, entities decoded.
function _plainText(mail: Mail): string {
  return mail.html
    .replace(/<a\s[^>]*href="([^"]*)"[^>]*>([^<]*)<\/a>/g, "$2 ($1)")
    .replace(/<[^>]+>/g, " ")
    .replaceAll("&quot;", '"').replaceAll("&#39;", "'")
    .replaceAll("&lt;", "<").replaceAll("&gt;", ">").replaceAll("&amp;", "&")
    .split(/\s+/).filter(Boolean).join(" ");
}

function _messageId(mail: Mail): string {
  return `${mail.id}@localhost`;
}

function _senderText(api: _Api): string {
  return `${api.sender.name} ${api.sender.address}`;
}

function _text(body: string, status = 200): Response {
  return new Response(body, {
    status,
    headers: { "content-type": "text/plain" },
  });
}

// Mailpit's `httpError`: 400, the message as plain text.
function _badRequest(message: string): Response {
  return _text(message, 400);
}

function _notFound(): Response {
  return _text("404 page not found", 404);
}
