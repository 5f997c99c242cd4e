import assert from "node:assert/strict";
import { HttpError } from "../_shared/errors.ts";
import {
  CursorKeys,
  type CursorState,
  openCursor,
  sealCursor,
} from "./cursor.ts";

const state: CursorState = {
  time: 1795393267417123n,
  snapshot: "765:770:766,768",
  awayS: 300,
  offlineS: 900,
};
const keys = new CursorKeys();

async function refused(text: string, secret = "service") {
  try {
    await openCursor(text, secret, keys);
  } catch (error) {
    assert.ok(error instanceof HttpError);
    assert.equal(error.status, 400);
    assert.equal(error.code, "validation_failed");
    const issues = error.extra.issues as { path: unknown[]; message: string }[];
    assert.deepEqual(issues.map((i) => i.path), [["cursor"]]);
    assert.ok(!issues[0].message.includes(text.slice(0, 20)));
    return;
  }
  assert.fail(`accepted ${text.slice(0, 40)}`);
}

function bytes(text: string): Uint8Array {
  const b = atob(text.replaceAll("-", "+").replaceAll("_", "/"));
  return Uint8Array.from(b, (c) => c.charCodeAt(0));
}

function text(data: Uint8Array): string {
  return btoa(String.fromCharCode(...data)).replaceAll("+", "-")
    .replaceAll("/", "_").replace(/=+$/, "");
}

Deno.test("sealCursor/openCursor: a sealed cursor opens to the same state", async () => {
  const sealed = await sealCursor(state, "service", keys);
  assert.match(sealed, /^[A-Za-z0-9_-]+$/);
  assert.deepEqual(await openCursor(sealed, "service", keys), state);
});

Deno.test("sealCursor/openCursor: the timeline goes with the state; a cursor sealed without one (before 2026-11-25) opens without one", async () => {
  const withTimeline = { ...state, timeline: "0000000A" };
  const sealed = await sealCursor(withTimeline, "service", keys);
  assert.deepEqual(await openCursor(sealed, "service", keys), withTimeline);
  const before = await openCursor(
    await sealCursor(state, "service", keys),
    "service",
    keys,
  );
  assert.equal(before && "timeline" in before, false);
});

Deno.test("openCursor: a key a later version adds to the payload is dropped, not refused (an isolate of this version during a deploy)", async () => {
  const k = await keys.derive("service");
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const payload = { t: String(state.time), s: state.snapshot, a: 300, o: 900 };
  const plain = new TextEncoder().encode(
    JSON.stringify({ ...payload, z: "from a later version" }),
  );
  const sealed = new Uint8Array(
    await crypto.subtle.encrypt(
      { name: "AES-GCM", iv, additionalData: k.header },
      k.aes,
      plain,
    ),
  );
  assert.deepEqual(
    await openCursor(
      text(new Uint8Array([...k.header, ...iv, ...sealed])),
      "service",
      keys,
    ),
    state,
  );
});

Deno.test("sealCursor: the cursor is opaque (no snapshot, time or JSON readable in it, a new IV each time)", async () => {
  const a = await sealCursor(state, "service", keys);
  const b = await sealCursor(state, "service", keys);
  assert.notEqual(a, b);
  const clear = new TextDecoder("latin1").decode(bytes(a));
  for (const secret of ["765:770", "766,768", "1795393267", '"s":']) {
    assert.ok(!clear.includes(secret), secret);
    assert.ok(!a.includes(btoa(secret).replace(/=+$/, "")), secret);
  }
});

Deno.test("openCursor: a cursor sealed under another service key is null (resync), not an error", async () => {
  assert.equal(
    await openCursor(await sealCursor(state, "old key", keys), "new", keys),
    null,
  );
});

Deno.test("openCursor: a cursor of the first format (payload.mac) is refused", async () => {
  const v1 = `${text(new TextEncoder().encode('{"v":1}'))}.${"A".repeat(43)}`;
  await refused(v1);
});

Deno.test("openCursor: an altered cursor under the current key is refused (forged)", async () => {
  const sealed = bytes(await sealCursor(state, "service", keys));
  for (const at of [6, 20, sealed.length - 1]) {
    const forged = sealed.slice();
    forged[at] ^= 1;
    await refused(text(forged));
  }
});

Deno.test("openCursor: malformed texts are refused, never thrown as anything else", async () => {
  const sealed = await sealCursor(state, "service", keys);
  for (
    const bad of [
      "x",
      ".",
      "..",
      sealed + ".x",
      sealed.slice(0, 20),
      "not base64!",
      "\u0000",
      "a".repeat(5000),
      text(new Uint8Array([1, ...bytes(sealed).subarray(1)])),
    ]
  ) {
    await refused(bad);
  }
});

Deno.test("openCursor: a correctly sealed payload of the wrong shape is refused", async () => {
  // Sealing needs the key, so this cannot come from a client; it proves the
  // SQL casts can never see a value that fails them.
  for (
    const snapshot of ["10:5:", "5:10:4", "5:10:7,6", "5:10:10", "0:0:", "x"]
  ) {
    await refused(await sealCursor({ ...state, snapshot }, "service", keys));
  }
});
