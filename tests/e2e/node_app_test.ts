/**
 * The README's "Calling from an app" example, run as written by Node.js of
 * the version the README names for apps, against the stack: the pinned
 * supabase-js from `node_modules`, `createClient`, `signInWithPassword`, and
 * `functions.invoke("presence-ping")` online, then offline.
 */
import assert from "node:assert/strict";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { APP_NODE_MAJOR, appNode, nodeMajor } from "../support/node.ts";
import { startTestStack, type TestStack } from "../support/stack.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const stack: TestStack = await startTestStack();

/** The first `ts` block after `marker` in the README, as written. */
async function readmeExample(marker: string): Promise<string> {
  const readme = await Deno.readTextFile(`${ROOT}README.md`);
  const at = readme.indexOf(marker);
  assert.notEqual(at, -1, marker);
  const block = /```ts\n([\s\S]*?)```/.exec(readme.slice(at));
  assert.ok(block, `no ts block after ${marker}`);
  return block[1];
}

e2eTest(
  `README app example: runs on Node ${APP_NODE_MAJOR} against the stack and sets presence online, then offline`,
  async () => {
    const node = await appNode();
    assert.ok(((await nodeMajor(node)) ?? 0) >= APP_NODE_MAJOR);
    const readme = await Deno.readTextFile(`${ROOT}README.md`);
    assert.match(readme, new RegExp(`Node\\.js ${APP_NODE_MAJOR}`));

    const user = await stack.createUser({ row: { auth_user_id: true } });
    const example = await readmeExample("Calling from an app");
    // The example's free variables, then the example, then what it got.
    const script = [
      `const SUPABASE_URL = ${JSON.stringify(stack.apiUrl)};`,
      `const SUPABASE_ANON_KEY = ${JSON.stringify(stack.anonKey)};`,
      `const email = ${JSON.stringify(user.email)};`,
      `const password = ${JSON.stringify(user.password)};`,
      example,
      "console.log(JSON.stringify({ data, error: error?.message ?? null }));",
      "process.exit(0);",
    ].join("\n");
    // Inside the repository, so Node resolves supabase-js from node_modules.
    const file = `${ROOT}.local/readme-app-${crypto.randomUUID()}.mjs`;
    await Deno.mkdir(`${ROOT}.local`, { recursive: true });
    await Deno.writeTextFile(file, script);
    try {
      const out = await new Deno.Command(node, {
        args: [file],
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
        signal: AbortSignal.timeout(60_000),
      }).output();
      const stderr = new TextDecoder().decode(out.stderr);
      assert.equal(out.code, 0, stderr);
      const result = JSON.parse(new TextDecoder().decode(out.stdout));
      assert.equal(result.error, null);
      assert.equal(result.data.ok, true);
      assert.equal(result.data.user.id, user.rowId);
      assert.equal(result.data.user.presence_state, "online");
    } finally {
      await Deno.remove(file);
    }
    const [row] = await stack.sql`
      select presence_state from public.usuarios where id = ${user.rowId}`;
    assert.equal(row.presence_state, "offline");
  },
);

closeStackAfterAll("README app example", stack);
