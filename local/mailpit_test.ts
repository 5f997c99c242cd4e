import assert from "node:assert/strict";
import { Inbox } from "./auth/mailer.ts";
import { mailpitApi } from "./mailpit.ts";
import { configPorts, mailSender } from "./stack.ts";

function setup() {
  const inbox = new Inbox();
  const api = mailpitApi(
    inbox,
    { address: "admin@email.com", name: "Admin" },
    "http://127.0.0.1:54321/inbox/",
  );
  const call = (path: string, init?: RequestInit) =>
    api(new Request(`http://127.0.0.1:54324${path}`, init));
  const json = async (path: string) => {
    const res = await call(path);
    assert.equal(res.status, 200, path);
    return await res.json();
  };
  const send = (to: string, type: "signup" | "recovery" | "magiclink") =>
    inbox.send({
      to,
      type,
      link: `http://127.0.0.1:54321/auth/v1/verify?token=t&type=${type}`,
      otp: "123456",
    });
  return { inbox, call, json, send };
}

Deno.test("mailpitApi: GET /api/v1/messages lists newest first with Mailpit's totals, and pages by start and limit", async () => {
  const { json, send } = setup();
  const a = send("ana@example.com", "signup");
  const b = send("ben@example.com", "recovery");
  const c = send("ana@example.com", "magiclink");
  const all = await json("/api/v1/messages");
  assert.deepEqual(all.messages.map((m: { ID: string }) => m.ID), [
    c.id,
    b.id,
    a.id,
  ]);
  assert.equal(all.total, 3);
  assert.equal(all.unread, 3);
  assert.equal(all.messages_count, 3);
  assert.equal(all.start, 0);
  assert.equal(all.messages[2].Subject, "Confirm your email address");
  assert.ok(all.messages[2].Snippet.includes("Confirm email address"));
  const page = await json("/api/v1/messages?start=1&limit=1");
  assert.deepEqual(page.messages.map((m: { ID: string }) => m.ID), [b.id]);
  assert.equal(page.start, 1);
  assert.equal(page.messages_count, 3);
  // Mailpit applies start only with a limit: limit=0 is every message.
  assert.equal((await json("/api/v1/messages?start=2&limit=0")).count, 3);
  // Its search slices the results: limit=0 there is none.
  assert.equal((await json("/api/v1/search?query=example&limit=0")).count, 0);
  assert.equal((await json("/api/v1/messages?limit=x")).count, 3);
});

Deno.test("mailpitApi: search takes to:, subject: with a quoted phrase, free text and exclusion; no query is 400 as in Mailpit", async () => {
  const { call, json, send } = setup();
  const a = send("ana@example.com", "signup");
  const b = send("ben@example.com", "recovery");
  const c = send("Ana@Example.com", "magiclink");
  const ids = async (query: string) =>
    (await json(`/api/v1/search?query=${encodeURIComponent(query)}`))
      .messages.map((m: { ID: string }) => m.ID);
  assert.deepEqual(await ids("to:ana@example.com"), [c.id, a.id]);
  assert.deepEqual(await ids('subject:"reset your"'), [b.id]);
  assert.deepEqual(await ids("to:ana@example.com -subject:sign-in"), [a.id]);
  assert.deepEqual(await ids("!to:ana@example.com"), [b.id]);
  assert.deepEqual(await ids("password"), [b.id]);
  assert.deepEqual(await ids("from:admin@email.com"), [c.id, b.id, a.id]);
  assert.deepEqual(await ids(`message-id:${a.id}`), [a.id]);
  assert.deepEqual(await ids("to:nobody@example.com"), []);
  const found = await json("/api/v1/search?query=to%3Aben%40example.com");
  assert.equal(found.messages_count, 1);
  assert.equal(found.total, 3);
  const none = await call("/api/v1/search?query=%20");
  assert.equal(none.status, 400);
  assert.equal(await none.text(), "Error: no search query");
});

Deno.test("mailpitApi: a message by ID or latest (of a query) marks it read; headers as Go's mail.Header; an unknown ID is 404", async () => {
  const { call, json, send } = setup();
  const a = send("ana@example.com", "signup");
  const b = send("ben@example.com", "recovery");
  const latest = await json("/api/v1/message/latest");
  assert.equal(latest.ID, b.id);
  const mine = await json(
    "/api/v1/message/latest?query=to%3Aana%40example.com",
  );
  assert.equal(mine.ID, a.id);
  assert.deepEqual(mine.To, [{ Name: "", Address: "ana@example.com" }]);
  assert.equal(mine.ReturnPath, "admin@email.com");
  assert.ok(mine.HTML.includes('href="http://127.0.0.1:54321/auth/v1/verify?'));
  assert.ok(
    mine.Text.includes(
      "(http://127.0.0.1:54321/auth/v1/verify?token=t&type=signup)",
    ),
  );
  const listed = await json("/api/v1/messages");
  assert.equal(listed.unread, 0);
  assert.ok(listed.messages.every((m: { Read: boolean }) => m.Read));
  const headers = await json(`/api/v1/message/${a.id}/headers`);
  assert.deepEqual(headers.To, ["ana@example.com"]);
  assert.deepEqual(headers.From, ['"Admin" <admin@email.com>']);
  assert.deepEqual(headers.Subject, ["Confirm your email address"]);
  const unknown = await call(`/api/v1/message/${crypto.randomUUID()}`);
  assert.equal(unknown.status, 404);
  assert.equal(await unknown.text(), "404 page not found");
  const empty = await call("/api/v1/message/latest?query=to%3Anobody");
  assert.equal(empty.status, 404);
  await empty.body?.cancel();
  // A bad escape is an id no message has, as in Mailpit: 404, not a 500.
  const garbled = await call("/api/v1/message/%zz");
  assert.equal(garbled.status, 404);
  await garbled.body?.cancel();
});

Deno.test("mailpitApi: PUT /api/v1/messages marks the IDs given, a search's matches, or every message read or unread", async () => {
  const { call, json, send } = setup();
  const a = send("ana@example.com", "signup");
  send("ben@example.com", "recovery");
  const put = (body: unknown) =>
    call("/api/v1/messages", { method: "PUT", body: JSON.stringify(body) });
  assert.equal(await (await put({ Read: true, IDs: [a.id] })).text(), "ok");
  assert.equal((await json("/api/v1/messages")).unread, 1);
  await (await put({ Read: true })).body?.cancel();
  assert.equal((await json("/api/v1/messages")).unread, 0);
  await (await put({ Read: false, Search: "to:ben@example.com" })).body
    ?.cancel();
  const unread = await json("/api/v1/search?query=is%3Aunread");
  assert.equal(unread.messages_count, 1);
  assert.equal(unread.messages[0].To[0].Address, "ben@example.com");
  const both = await put({ Read: true, IDs: [a.id], Search: "x" });
  assert.equal(both.status, 400);
  assert.equal(
    await both.text(),
    "You may specify either IDs or a search query, not both",
  );
});

Deno.test("mailpitApi: DELETE /api/v1/messages removes the IDs given, or every message without them; DELETE search removes its matches", async () => {
  const { inbox, call, send } = setup();
  const a = send("ana@example.com", "signup");
  const b = send("ben@example.com", "recovery");
  const c = send("cat@example.com", "recovery");
  const some = await call("/api/v1/messages", {
    method: "DELETE",
    body: JSON.stringify({ IDs: [a.id] }),
  });
  assert.equal(await some.text(), "ok");
  assert.deepEqual(inbox.list().map((m) => m.id), [c.id, b.id]);
  const search = await call("/api/v1/search?query=to%3Acat%40example.com", {
    method: "DELETE",
  });
  assert.equal(await search.text(), "ok");
  assert.deepEqual(inbox.list().map((m) => m.id), [b.id]);
  const all = await call("/api/v1/messages", { method: "DELETE" });
  assert.equal(await all.text(), "ok");
  assert.deepEqual(inbox.list(), []);
});

Deno.test("mailpitApi: /view/<ID>.html and .txt (and latest) answer the message's HTML and text, as Mailpit's rendering endpoints; /view/<ID> goes to its inbox page", async () => {
  const { call, send } = setup();
  const a = send("ana@example.com", "signup");
  const html = await call(`/view/${a.id}.html`);
  assert.equal(html.headers.get("content-type"), "text/html; charset=utf-8");
  assert.equal(await html.text(), a.html);
  const text = await (await call("/view/latest.txt")).text();
  assert.ok(text.includes("(http://127.0.0.1:54321/auth/v1/verify?"), text);
  const page = await call("/view/latest");
  assert.equal(page.status, 302);
  assert.equal(
    page.headers.get("location"),
    `http://127.0.0.1:54321/inbox/${a.id}`,
  );
  const missing = await call(`/view/${crypto.randomUUID()}.html`);
  assert.equal(missing.status, 404);
  assert.equal(await missing.text(), "Message not found");
  const garbled = await call("/view/%E0%A4%A.html");
  assert.equal(garbled.status, 404);
  await garbled.body?.cancel();
});

Deno.test("mailpitApi: Mailpit's web pages redirect to the inbox page; health checks answer ok; other API paths are 404", async () => {
  const { call } = setup();
  for (const path of ["/", "/search?q=x"]) {
    const res = await call(path);
    assert.equal(res.status, 302, path);
    assert.equal(res.headers.get("location"), "http://127.0.0.1:54321/inbox/");
  }
  assert.equal(await (await call("/livez")).text(), "ok");
  assert.equal(await (await call("/readyz")).text(), "ok");
  const other = await call("/api/v1/tags");
  assert.equal(other.status, 404);
  await other.body?.cancel();
});

Deno.test("configPorts and mailSender: [local_smtp] port, enabled and sender as the Supabase CLI reads them", () => {
  assert.equal(configPorts("[local_smtp]\nport = 64324\n").mail, 64324);
  assert.equal(configPorts('project_id = "x"\n').mail, 54324);
  assert.equal(configPorts("[local_smtp]\nenabled = false\n").mail, null);
  assert.deepEqual(mailSender('project_id = "x"\n'), {
    address: "admin@email.com",
    name: "Admin",
  });
  assert.deepEqual(
    mailSender(
      '[local_smtp]\nadmin_email = "auth@app.test"\nsender_name = "App"\n',
    ),
    { address: "auth@app.test", name: "App" },
  );
});
