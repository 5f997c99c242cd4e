import assert from "node:assert/strict";
import { startPgliteServer } from "../local/db/pglite_server.ts";
import { startCountingProxy } from "./pgproxy.ts";

/**
 * A bare protocol client, so each test decides exactly which messages go
 * in one write (a flight) and waits for the server's answer between them.
 */
async function rawClient(url: string) {
  const u = new URL(url);
  const conn = await Deno.connect({ hostname: u.hostname, port: +u.port });
  const enc = new TextEncoder();
  let buffered = new Uint8Array(0);
  const message = (type: string, body: Uint8Array) => {
    const out = new Uint8Array(5 + body.length);
    out[0] = type.charCodeAt(0);
    new DataView(out.buffer).setInt32(1, 4 + body.length);
    out.set(body, 5);
    return out;
  };
  const cstr = (...parts: string[]) => enc.encode(parts.join("\0") + "\0");
  const send = async (...messages: Uint8Array[]) => {
    const all = new Uint8Array(messages.reduce((n, m) => n + m.length, 0));
    let at = 0;
    for (const m of messages) all.set(m, (at += m.length) - m.length);
    for (let off = 0; off < all.length;) {
      off += await conn.write(all.slice(off));
    }
  };
  // Reads until `count` ReadyForQuery ('Z') messages have come.
  const ready = async (count = 1) => {
    const buf = new Uint8Array(64 * 1024);
    while (count > 0) {
      while (buffered.length >= 5) {
        const len = new DataView(buffered.buffer, buffered.byteOffset)
          .getInt32(1);
        if (buffered.length < 1 + len) break;
        if (buffered[0] === "E".charCodeAt(0)) {
          throw new Error("the server answered with an error");
        }
        if (buffered[0] === "Z".charCodeAt(0)) count--;
        buffered = buffered.slice(1 + len);
        if (count === 0) return;
      }
      const n = await conn.read(buf);
      if (n === null) throw new Error("the server closed the connection");
      const next = new Uint8Array(buffered.length + n);
      next.set(buffered);
      next.set(buf.subarray(0, n), buffered.length);
      buffered = next;
    }
  };
  // Untyped startup message: length, protocol 3.0, then name/value pairs.
  const params = cstr("user", u.username, "database", u.pathname.slice(1), "");
  const startup = new Uint8Array(8 + params.length);
  new DataView(startup.buffer).setInt32(0, startup.length);
  new DataView(startup.buffer).setInt32(4, 196608);
  startup.set(params, 8);
  await send(startup);
  await ready();
  return {
    send,
    ready,
    query: (sql: string) => message("Q", cstr(sql)),
    // Unnamed statement, its text, no parameter types (an Int16 of 0).
    parse: (sql: string) =>
      message("P", new Uint8Array([...cstr("", sql), 0, 0])),
    sync: () => message("S", new Uint8Array(0)),
    flush: () => message("H", new Uint8Array(0)),
    close: () => conn.close(),
  };
}

Deno.test("counting proxy: statements, round trips (one per flight after an answer) and parsed texts with their UUIDs folded", async () => {
  const db = await startPgliteServer({ port: 0 });
  const proxy = startCountingProxy(db.url);
  const client = await rawClient(proxy.url);
  try {
    // The startup exchange is not counted.
    assert.deepEqual(proxy.counts(), {
      statements: 0,
      roundTrips: 0,
      parse: 0,
      sync: 0,
      flush: 0,
      connections: 1,
    });
    // Two flights of one query each, then one flight of two queries: three
    // round trips for four statements.
    await client.send(client.query("select 1"));
    await client.ready();
    await client.send(client.query("select 2"));
    await client.ready();
    await client.send(client.query("select 3"), client.query("select 4"));
    await client.ready(2);
    // A Flush with nothing pending gets no answer, so the next query, sent
    // on its own, is part of the same round trip.
    await client.send(client.flush());
    await new Promise((r) => setTimeout(r, 100));
    await client.send(client.query("select 5"));
    await client.ready();
    // A Parse of the same text with two different UUIDs written in: one
    // shape, kept as first seen.
    const uuid = (n: number) => `'b0000000-0000-4000-8000-00000000000${n}'`;
    for (const n of [1, 2]) {
      await client.send(client.parse(`select ${uuid(n)}::uuid`), client.sync());
      await client.ready();
    }
    assert.deepEqual(proxy.counts(), {
      statements: 5,
      roundTrips: 6,
      parse: 2,
      sync: 2,
      flush: 1,
      connections: 1,
    });
    assert.deepEqual(proxy.statements(), [
      { text: `select ${uuid(1)}::uuid`, count: 2 },
    ]);
    proxy.reset();
    assert.equal(proxy.counts().statements, 0);
    assert.deepEqual(proxy.statements(), []);
  } finally {
    client.close();
    await proxy.close();
    await db.close();
  }
});
