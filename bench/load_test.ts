import assert from "node:assert/strict";
import { runDenoClient, runWrk, stopLoads } from "./load.ts";

/** A loopback server that records what each request carried. */
function recorder(answer: (token: string) => Response) {
  const seen: { token: string; body: string }[] = [];
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    async (req) => {
      const token = req.headers.get("authorization")!.replace("Bearer ", "");
      seen.push({ token, body: await req.text() });
      return answer(token);
    },
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}/functions/v1/presence-ping`,
    seen,
    close: () => server.shutdown(),
  };
}

const ok = () => Response.json({ ok: true });

Deno.test("Deno client, count mode: each token once, with its own body (the first-seen and watcher passes rely on it)", async () => {
  const s = recorder(ok);
  try {
    const tokens = Array.from({ length: 40 }, (_, i) => `token-${i}`);
    const bodies = tokens.map((_, i) => JSON.stringify({ cursor: `c${i}` }));
    const r = await runDenoClient({
      url: s.url,
      tokens,
      bodies,
      mode: "count",
      count: tokens.length,
      concurrency: 4,
    });
    assert.equal(r.requests, 40);
    assert.equal(r.errors, 0);
    const sent = s.seen.map((x) => `${x.token} ${x.body}`).sort();
    const expected = tokens.map((t, i) => `${t} ${bodies[i]}`).sort();
    assert.deepEqual(sent, expected);
  } finally {
    await s.close();
  }
});

Deno.test("Deno client: a non-2xx answer is counted as an error, not as a served request", async () => {
  const s = recorder((token) =>
    token === "refused" ? new Response("no", { status: 401 }) : ok()
  );
  try {
    const r = await runDenoClient({
      url: s.url,
      tokens: ["fine", "refused"],
      mode: "count",
      count: 6,
      concurrency: 1,
    });
    assert.equal(r.requests, 3);
    assert.equal(r.errors, 3);
    assert.deepEqual(r.errorKinds, { status_401: 3 });
    assert.ok(s.seen.every((x) => x.body === '{"state":"online"}'));
  } finally {
    await s.close();
  }
});

Deno.test("Deno client: chunked answers are read whole, and the connection is kept", async () => {
  const s = recorder(() =>
    new Response(
      new ReadableStream({
        start(c) {
          c.enqueue(new TextEncoder().encode('{"ok":'));
          c.enqueue(new TextEncoder().encode("true}"));
          c.close();
        },
      }),
    )
  );
  try {
    const r = await runDenoClient({
      url: s.url,
      tokens: ["a", "b"],
      mode: "count",
      count: 20,
      concurrency: 2,
    });
    assert.equal(r.requests, 20);
    assert.equal(r.errors, 0);
  } finally {
    await s.close();
  }
});

// The pass reads the CPU when the client exits: before the fix, a grace
// timer left pending kept it alive 15 s past its pass, and the functions'
// idle connections (and their CPU) were gone by then.
Deno.test("Deno client, open loop: requests are due at the rate, and the client ends with its pass", async () => {
  const s = recorder(ok);
  try {
    const started = performance.now();
    const r = await runDenoClient({
      url: s.url,
      tokens: ["a", "b", "c"],
      mode: "rate",
      rate: 100,
      durationS: 1,
    });
    const elapsedS = (performance.now() - started) / 1000;
    assert.equal(r.errors, 0);
    // 100 due in the second (the last one or few may fall after its end).
    assert.ok(r.requests > 80 && r.requests <= 101, `${r.requests} requests`);
    assert.equal(s.seen.length, r.requests);
    assert.ok(elapsedS < 12, `the client lived ${elapsedS.toFixed(1)} s`);
  } finally {
    await s.close();
  }
});

Deno.test("wrk: an answer >= 400 is an error, not a served request, and not in req/s", async () => {
  const s = recorder((token) =>
    token === "refused" ? new Response("no", { status: 503 }) : ok()
  );
  const tokensFile = await Deno.makeTempFile();
  try {
    await Deno.writeTextFile(tokensFile, "fine\nrefused\n");
    const r = await runWrk({
      url: s.url,
      tokensFile,
      concurrency: 1,
      durationS: 1,
    });
    const served = s.seen.filter((x) => x.token === "fine").length;
    // wrk counts what completed before its end; one may be in flight.
    assert.ok(served - r.requests <= 1, `${r.requests} of ${served}`);
    assert.ok(r.errorKinds.status > 0 && r.errors >= r.errorKinds.status);
    assert.ok(Math.abs(r.requests - r.errorKinds.status) <= 1);
    assert.equal(r.rps, r.requests / r.durationS);
  } finally {
    await s.close();
    await Deno.remove(tokensFile);
  }
});

Deno.test("stopLoads: a run undone on a signal kills the load generators at once, not at their time limit", async () => {
  const s = recorder(ok);
  const tokensFile = await Deno.makeTempFile();
  try {
    await Deno.writeTextFile(tokensFile, "fine\n");
    const loads = [
      runWrk({ url: s.url, tokensFile, concurrency: 1, durationS: 60 }),
      runDenoClient({
        url: s.url,
        tokens: ["fine"],
        mode: "rate",
        rate: 50,
        durationS: 60,
      }),
    ];
    // Both under way: the server has seen requests from each.
    while (s.seen.length < 20) await new Promise((r) => setTimeout(r, 50));
    stopLoads();
    const [wrk, client] = await Promise.allSettled(loads);
    // Killed, they print no result: each fails instead of answering later.
    assert.equal(wrk.status, "rejected");
    assert.match(
      String((wrk as PromiseRejectedResult).reason),
      /wrk printed no result/,
    );
    assert.equal(client.status, "rejected");
    assert.match(
      String((client as PromiseRejectedResult).reason),
      /load_worker failed/,
    );
  } finally {
    await s.close();
    await Deno.remove(tokensFile);
  }
});
