import assert from "node:assert/strict";
import { once } from "node:events";
import type net from "node:net";
import { pacedSockets, reconnectDelay } from "./sockets.ts";

Deno.test("reconnectDelay: 50 ms doubling to 500 ms, each with up to half taken off at random", () => {
  for (const [retries, ceiling] of [[0, 0.05], [1, 0.1], [3, 0.4], [4, 0.5]]) {
    for (let i = 0; i < 50; i++) {
      const delay = reconnectDelay(retries);
      assert.ok(
        delay >= ceiling / 2 && delay <= ceiling,
        `${retries}: ${delay}`,
      );
    }
  }
});

// A loopback server that counts the connections it accepts and closes each.
function countingServer() {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  let accepted = 0;
  const serving = (async () => {
    for await (const conn of listener) {
      accepted++;
      conn.close();
    }
  })().catch(() => {});
  return {
    port: (listener.addr as Deno.NetAddr).port,
    accepted: () => accepted,
    async close() {
      listener.close();
      await serving;
    },
  };
}

const closed = async (sockets: net.Socket[]) => {
  for (const s of sockets) {
    if (!s.destroyed) {
      s.destroy();
      await once(s, "close");
    }
  }
};

Deno.test("pacedSockets: twice the pool's connections open at once; the next within the second waits, and a pool ended meanwhile opens nothing", async () => {
  const server = countingServer();
  const ended = new AbortController();
  const open = pacedSockets({
    host: "127.0.0.1",
    port: server.port,
    max: 2,
    signal: ended.signal,
  });
  const sockets: net.Socket[] = [];
  try {
    // The factory is async: without a wait it opens its socket before the
    // abort below, in the same turn as the call.
    for (let i = 0; i < 4; i++) {
      const socket = await open();
      assert.equal(socket.host, "127.0.0.1"); // postgres.js's TLS server name
      assert.equal(socket.port, server.port);
      sockets.push(socket);
    }
    await Promise.all(sockets.map((s) => once(s, "connect")));
    const fifth = open();
    ended.abort();
    await assert.rejects(fifth, { name: "AbortError" });
    await assert.rejects(open(), { name: "AbortError" });
    await closed(sockets);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(server.accepted(), 4);
  } finally {
    await closed(sockets);
    await server.close();
  }
});

Deno.test("pacedSockets: once a second has passed, sockets open at once again", async () => {
  const server = countingServer();
  const ended = new AbortController();
  const open = pacedSockets({
    host: "127.0.0.1",
    port: server.port,
    max: 1,
    signal: ended.signal,
  });
  const sockets: net.Socket[] = [];
  try {
    sockets.push(await open(), await open());
    await new Promise((r) => setTimeout(r, 1_050));
    // Opened in the same turn as the call, before the abort: no wait.
    const third = open();
    ended.abort();
    sockets.push(await third);
    assert.equal(sockets.length, 3);
  } finally {
    await closed(sockets);
    await server.close();
  }
});
