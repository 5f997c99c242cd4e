import assert from "node:assert/strict";
import { HttpError } from "../_shared/errors.ts";
import { type CursorState, openCursor, sealCursor } from "./cursor.ts";

const state: CursorState = {
  time: 1795393267417123n,
  horizon: 1795393266410000n,
  snapshot: "765:770:766,768",
  awayS: 300,
  offlineS: 900,
};

async function refused(text: string, secret = "service") {
  try {
    await openCursor(text, secret);
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

function b64(text: string): string {
  return btoa(text).replaceAll("+", "-").replaceAll("/", "_").replace(
    /=+$/,
    "",
  );
}

Deno.test("sealCursor/openCursor: a sealed cursor opens to the same state", async () => {
  const text = await sealCursor(state, "service");
  assert.match(text, /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/);
  assert.deepEqual(await openCursor(text, "service"), state);
});

Deno.test("openCursor: a cursor sealed with another service key is refused", async () => {
  await refused(await sealCursor(state, "other key"));
});

Deno.test("openCursor: an altered payload is refused (forged cursor)", async () => {
  const [, mac] = (await sealCursor(state, "service")).split(".");
  const forged = b64(JSON.stringify({
    v: 1,
    t: "1795393267417123",
    h: "0",
    s: "1:1:",
    a: 300,
    o: 900,
  }));
  await refused(`${forged}.${mac}`);
});

Deno.test("openCursor: malformed texts are refused, never thrown as anything else", async () => {
  const text = await sealCursor(state, "service");
  for (
    const bad of [
      "x",
      ".",
      "..",
      text + ".x",
      text.replace(".", ""),
      text.slice(0, -2),
      "not base64!.abc",
      `${text.split(".")[0]}.%%%`,
      "\u0000.\u0000",
      "a".repeat(5000),
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
    await refused(
      await sealCursor({ ...state, snapshot }, "service"),
    );
  }
});
