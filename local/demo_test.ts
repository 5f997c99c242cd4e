import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { createDemo } from "./demo.ts";

const demo = createDemo({ anonKey: 'anon-"key"' });
const get = (path: string, method = "GET") =>
  demo(new Request(`http://127.0.0.1:54321${path}`, { method }));

Deno.test("demo: the kit is served as JavaScript a browser can run", async () => {
  const res = await get("/demo/presence.ts");
  assert.equal(res.status, 200);
  assert.equal(
    res.headers.get("content-type"),
    "text/javascript; charset=utf-8",
  );
  const source = await res.text();
  // Loaded as plain JavaScript: a type annotation left behind would be a
  // syntax error here.
  const mod = await import(
    `data:text/javascript;base64,${Buffer.from(source).toString("base64")}`
  );
  assert.equal(typeof mod.PresenceKit, "function");
  assert.equal(typeof mod.browserPage().hidden, "function");
});

Deno.test("demo: the page carries the stack's anon key, escaped", async () => {
  const res = await get("/demo/");
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /^text\/html/);
  const html = await res.text();
  assert.match(html, /<meta name="anon-key" content="anon-&#34;key&#34;" \/>/);
  assert.doesNotMatch(html, /%ANON_KEY%/);
});

Deno.test("demo: /demo redirects to /demo/, supabase-js is served, others are 404 or 405", async () => {
  const redirect = await get("/demo");
  assert.equal(redirect.status, 302);
  assert.equal(
    redirect.headers.get("location"),
    "http://127.0.0.1:54321/demo/",
  );
  const umd = await get("/demo/vendor/supabase.js");
  assert.equal(umd.status, 200);
  assert.match(await umd.text(), /^var supabase=/);
  const missing = await get("/demo/deno.json");
  assert.equal(missing.status, 404);
  await missing.body?.cancel();
  const post = await get("/demo/", "POST");
  assert.equal(post.status, 405);
  await post.body?.cancel();
});
