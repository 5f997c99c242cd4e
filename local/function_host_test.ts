import assert from "node:assert/strict";
import { FunctionHost, npmImportsInstalled } from "./function_host.ts";
import { createGateway } from "./gateway.ts";

const ROOT = new URL("../", import.meta.url).pathname;

// A project folder of its own (config.toml, supabase/functions/, and this
// repository's node_modules), so the test adds and edits functions without
// touching the repository's.
async function project(config = ""): Promise<{
  dir: string;
  write: (path: string, text: string) => Promise<void>;
  remove: () => Promise<void>;
}> {
  const dir = `${await Deno.makeTempDir({ prefix: "function-host-" })}/`;
  await Deno.mkdir(`${dir}supabase/functions/_shared`, { recursive: true });
  await Deno.symlink(`${ROOT}node_modules`, `${dir}node_modules`);
  await Deno.writeTextFile(`${dir}supabase/config.toml`, config);
  return {
    dir,
    write: async (path, text) => {
      const file = `${dir}supabase/functions/${path}`;
      await Deno.mkdir(file.slice(0, file.lastIndexOf("/")), {
        recursive: true,
      });
      await Deno.writeTextFile(file, text);
    },
    remove: () => Deno.remove(dir, { recursive: true }),
  };
}

// What `supabase functions new` makes, minus its imports that need the
// network (jsr:, packages not in node_modules): a deno.json of its own and
// an index.ts that exports `{ fetch }`.
const DENO_JSON = JSON.stringify({ imports: { zod: "npm:zod@4.6.7" } });
const helloIndex = (greeting: string) => `
import { z } from "zod";
import { suffix } from "../_shared/suffix.ts";
export default {
  fetch: async (req: Request) => {
    const { name } = z.object({ name: z.string() }).parse(await req.json());
    return Response.json({
      message: \`${greeting} \${name}\${suffix}\`,
      path: new URL(req.url).pathname,
      url: Deno.env.get("SUPABASE_URL") ?? null,
      home: Deno.env.get("STACK_ONLY_SECRET") ?? null,
    });
  },
};
`;

function serve(host: FunctionHost): {
  call: (
    path: string,
    body?: unknown,
    signal?: AbortSignal,
  ) => Promise<Response>;
  close: () => Promise<void>;
} {
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    createGateway({
      auth: () => Promise.resolve(new Response(null, { status: 500 })),
      functions: (name) => host.lookup(name),
      isValidJwt: (token) => Promise.resolve(token === "good"),
    }),
  );
  return {
    call: (path, body = { name: "Ada" }, signal) =>
      fetch(`http://127.0.0.1:${server.addr.port}${path}`, {
        method: "POST",
        headers: { authorization: "Bearer good" },
        body: JSON.stringify(body),
        signal,
      }),
    close: () => server.shutdown(),
  };
}

// A project served by a FunctionHost behind the gateway, its log lines
// collected; `close` stops both and removes the project.
async function hosted(
  config = "",
  env = new Map<string, string>(),
): Promise<{
  p: Awaited<ReturnType<typeof project>>;
  host: FunctionHost;
  gw: ReturnType<typeof serve>;
  lines: string[];
  close: () => Promise<void>;
}> {
  const p = await project(config);
  const lines: string[] = [];
  const host = new FunctionHost({
    projectDir: p.dir,
    env,
    log: (line) => lines.push(line),
  });
  const gw = serve(host);
  return {
    p,
    host,
    gw,
    lines,
    close: async () => {
      await gw.close();
      await host.close();
      await p.remove();
    },
  };
}

Deno.test({
  name:
    "FunctionHost: a function added while the stack runs is served through its index.ts and deno.json, and an edit is served on the next request, without a restart",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    Deno.env.set("STACK_ONLY_SECRET", "not for functions");
    const { p, gw, lines, close } = await hosted(
      "",
      new Map([["SUPABASE_URL", "http://api.test"]]),
    );
    try {
      const before = await gw.call("/functions/v1/hello");
      assert.equal(before.status, 404);
      assert.equal((await before.json()).code, "NOT_FOUND");

      await p.write("_shared/suffix.ts", `export const suffix = "!";\n`);
      await p.write("hello/deno.json", DENO_JSON);
      await p.write("hello/index.ts", helloIndex("Hello"));
      const added = await gw.call("/functions/v1/hello/sub?x=1");
      assert.equal(added.status, 200, await added.clone().text());
      assert.deepEqual(await added.json(), {
        message: "Hello Ada!",
        path: "/hello/sub",
        url: "http://api.test",
        home: null,
      });

      await p.write("hello/index.ts", helloIndex("Hola"));
      const edited = await gw.call("/functions/v1/hello");
      assert.equal((await edited.json()).message, "Hola Ada!");

      await p.write("_shared/suffix.ts", `export const suffix = "?";\n`);
      const shared = await gw.call("/functions/v1/hello");
      assert.equal((await shared.json()).message, "Hola Ada?");
      assert.ok(
        lines.some((l) => l === "[hello] Files changed: reloading"),
        lines.join("\n"),
      );
    } finally {
      Deno.env.delete("STACK_ONLY_SECRET");
      await close();
    }
  },
});

Deno.test({
  name:
    "FunctionHost: an index.ts that hands its handler to Deno.serve is served, its console output is logged under its name, and verify_jwt comes from config.toml",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const { p, host, gw, lines, close } = await hosted(
      "[functions.open]\nverify_jwt = false\n",
    );
    try {
      const index = `console.log("booted");
Deno.serve({ port: 9 }, (req) => {
  console.error("handled", req.method);
  return new Response("served by Deno.serve", { status: 201 });
});
`;
      await p.write("open/index.ts", index);
      await p.write("closed/index.ts", index);
      assert.equal(host.lookup("open")?.verifyJwt, false);
      assert.equal(host.lookup("closed")?.verifyJwt, true);
      assert.equal(host.lookup("_shared"), undefined);

      const res = await gw.call("/api/open");
      assert.equal(res.status, 201);
      assert.equal(await res.text(), "served by Deno.serve");
      assert.ok(lines.includes("[open] booted"), lines.join("\n"));
      assert.ok(lines.includes("[open] handled POST"), lines.join("\n"));
    } finally {
      await close();
    }
  },
});

Deno.test({
  name:
    "FunctionHost: a function's request.signal aborts for a request its client abandoned, not after a served one, and its log has no legacy-abort warning; the worker serves on (no second process)",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const { p, gw, lines, close } = await hosted();
    try {
      await p.write(
        "sig/index.ts",
        `Deno.serve(async (req) => {
  const slow = new URL(req.url).searchParams.has("slow");
  req.signal.addEventListener("abort", () =>
    console.log(slow ? "abandoned" : "aborted after a served request"));
  if (slow) await new Promise((r) => setTimeout(r, 1_500));
  return new Response(String(Deno.pid));
});
`,
      );
      const res = await gw.call("/api/sig");
      const pid = await res.text();
      assert.match(pid, /^\d+$/);
      await assert.rejects(
        gw.call("/api/sig?slow", {}, AbortSignal.timeout(300)),
      );
      const until = Date.now() + 5_000;
      while (!lines.includes("[sig] abandoned") && Date.now() < until) {
        await new Promise((r) => setTimeout(r, 50));
      }
      assert.ok(lines.includes("[sig] abandoned"), lines.join("\n"));
      assert.ok(
        !lines.includes("[sig] aborted after a served request"),
        lines.join("\n"),
      );
      assert.ok(
        !lines.some((l) => l.includes("legacy behavior")),
        lines.join("\n"),
      );
      // The same worker answers the next request: an abandoned request
      // left no process behind it.
      const again = await gw.call("/api/sig");
      assert.equal(await again.text(), pid);
      assert.ok(
        !lines.some((l) => l.includes("stopped while answering")),
        lines.join("\n"),
      );
      assert.equal(
        lines.filter((l) => l.startsWith("[sig] Starting")).length,
        1,
      );
    } finally {
      await close();
    }
  },
});

Deno.test({
  name:
    "FunctionHost: a worker stuck in a busy loop (its client gone) is stopped by the CPU limit, the call waiting on it answered 546 WORKER_LIMIT, and the next call served by a new worker",
  ignore: Deno.build.os !== "linux",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const { p, gw, lines, close } = await hosted();
    try {
      await p.write(
        "spin/index.ts",
        `Deno.serve((req) => {
  if (new URL(req.url).searchParams.has("spin")) for (;;) { /* busy */ }
  return new Response(String(Deno.pid));
});
`,
      );
      const first = await (await gw.call("/api/spin")).text();
      await assert.rejects(
        gw.call("/api/spin?spin", {}, AbortSignal.timeout(300)),
      );
      const stuck = await gw.call(
        "/api/spin",
        undefined,
        AbortSignal.timeout(20_000),
      );
      assert.equal(stuck.status, 546);
      assert.deepEqual(await stuck.json(), {
        code: "WORKER_LIMIT",
        message:
          "Worker failed to respond due to a resource limit (please check logs)",
      });
      assert.ok(
        lines.some((l) => l.startsWith("[spin] CPU time limit reached")),
        lines.join("\n"),
      );
      const next = await gw.call("/api/spin");
      assert.equal(next.status, 200);
      assert.notEqual(await next.text(), first);
    } finally {
      await close();
    }
  },
});

Deno.test({
  name:
    "FunctionHost: a function that cannot start answers 503 BOOT_ERROR and logs why; fixed, it is served",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const { p, gw, lines, close } = await hosted();
    try {
      await p.write("broken/index.ts", `throw new Error("boom at boot");\n`);
      const res = await gw.call("/functions/v1/broken");
      assert.equal(res.status, 503);
      assert.deepEqual(await res.json(), {
        code: "BOOT_ERROR",
        message: "Worker failed to boot (please check logs)",
      });
      assert.ok(
        lines.some((l) =>
          l.startsWith("[broken]") && l.includes("boom at boot")
        ),
        lines.join("\n"),
      );

      await p.write(
        "broken/index.ts",
        `export default { fetch: () => new Response("fixed") };\n`,
      );
      const fixed = await gw.call("/functions/v1/broken");
      assert.equal(await fixed.text(), "fixed");
    } finally {
      await close();
    }
  },
});

Deno.test({
  name:
    "FunctionHost: a worker that dies while answering gives 500 WORKER_ERROR, as the Edge Runtime does (546 is WORKER_LIMIT's), and the next call is served by a new worker",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const { p, gw, lines, close } = await hosted();
    try {
      await p.write(
        "crash/index.ts",
        `Deno.serve((req) => {
  if (new URL(req.url).searchParams.has("exit")) Deno.exit(3);
  return new Response(String(Deno.pid));
});
`,
      );
      const first = await (await gw.call("/api/crash")).text();
      const crashed = await gw.call("/api/crash?exit");
      assert.equal(crashed.status, 500);
      assert.deepEqual(await crashed.json(), {
        code: "WORKER_ERROR",
        message: "Function exited due to an error (please check logs)",
      });
      assert.ok(
        lines.some((l) => l.startsWith("[crash] The worker stopped")),
        lines.join("\n"),
      );
      const next = await gw.call("/api/crash");
      assert.equal(next.status, 200);
      assert.notEqual(await next.text(), first);
    } finally {
      await close();
    }
  },
});

Deno.test("supabase/functions/*/deno.json: every function has one, pinning package.json's versions, with only packages its code imports (nothing dev-only deploys)", async () => {
  const pkg = JSON.parse(await Deno.readTextFile(`${ROOT}package.json`));
  const dir = `${ROOT}supabase/functions`;
  const functions = [...Deno.readDirSync(dir)]
    .filter((e) => e.isDirectory && !e.name.startsWith("_"))
    .map((e) => e.name);
  assert.ok(functions.length >= 3);
  for (const name of functions) {
    const config = JSON.parse(
      await Deno.readTextFile(`${dir}/${name}/deno.json`),
    );
    for (const [bare, specifier] of Object.entries(config.imports)) {
      const match = /^npm:(@?[^@]+)@(.+)$/.exec(String(specifier));
      assert.ok(match, `${name}: ${specifier}`);
      assert.equal(match[1], bare, `${name}: ${bare}`);
      assert.equal(
        match[2],
        pkg.dependencies[bare],
        `${name}: ${bare} is not package.json's ${pkg.dependencies[bare]}`,
      );
    }
    // What the deployed code imports by bare name, here or in _shared.
    const used = new Set<string>();
    for (const folder of [`${dir}/${name}`, `${dir}/_shared`]) {
      for (const entry of Deno.readDirSync(folder)) {
        if (!entry.name.endsWith(".ts") || entry.name.endsWith("_test.ts")) {
          continue;
        }
        const text = await Deno.readTextFile(`${folder}/${entry.name}`);
        for (const m of text.matchAll(/from "([^".][^"]*)"/g)) {
          if (!m[1].startsWith("node:")) used.add(m[1]);
        }
      }
    }
    for (const bare of used) {
      assert.ok(bare in config.imports, `${name} imports ${bare}`);
    }
    for (const bare of Object.keys(config.imports)) {
      assert.ok(
        ["@supabase/supabase-js", "postgres", "jose", "zod"].includes(bare),
        `${name}: ${bare} is not a runtime dependency`,
      );
    }
  }
});

Deno.test("npmImportsInstalled: the project's functions use node_modules (nothing fetched); a function pinning a package or version npm ci did not install gets Deno's cache instead", async () => {
  for (const name of ["presence-ping", "presence", "auth-sync"]) {
    assert.equal(
      npmImportsInstalled(`${ROOT}supabase/functions/${name}/deno.json`, ROOT),
      true,
      name,
    );
  }
  const dir = await Deno.makeTempDir({ prefix: "npm-imports-" });
  try {
    const check = async (imports: Record<string, string>) => {
      await Deno.writeTextFile(`${dir}/deno.json`, JSON.stringify({ imports }));
      return npmImportsInstalled(`${dir}/deno.json`, ROOT);
    };
    // What `supabase functions new` writes.
    assert.equal(
      await check({
        "@supabase/functions-js": "jsr:@supabase/functions-js@^2",
        "@supabase/server": "npm:@supabase/server@^1",
      }),
      false,
    );
    assert.equal(await check({ zod: "npm:zod@4.6.6" }), false);
    assert.equal(await check({ zod: "npm:zod@^4.6.7" }), false);
    assert.equal(await check({ zod: "npm:zod@4.6.7" }), true);
    assert.equal(await check({ fjs: "jsr:@supabase/functions-js@^2" }), true);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test({
  name:
    "FunctionHost: a worker ends when the stack's process is killed outright (no orphan keeps its port)",
  ignore: Deno.build.os !== "linux",
  fn: async () => {
    const p = await project();
    try {
      await p.write(
        "pid/index.ts",
        `export default { fetch: () => new Response(String(Deno.pid)) };\n`,
      );
      const script = `
        import { FunctionHost } from ${
        JSON.stringify(`${ROOT}local/function_host.ts`)
      };
        const host = new FunctionHost({ projectDir: ${
        JSON.stringify(p.dir)
      }, env: new Map(), log: () => {} });
        const res = await host.lookup("pid").handler(new Request("http://x/functions/v1/pid"));
        console.log(await res.text());
        setInterval(() => {}, 1000);
      `;
      const stack = new Deno.Command(Deno.execPath(), {
        args: ["eval", "--no-check", script],
        cwd: ROOT,
        stdout: "piped",
        stderr: "inherit",
      }).spawn();
      const reader = stack.stdout.pipeThrough(new TextDecoderStream())
        .getReader();
      let out = "";
      while (!out.includes("\n")) {
        const { value, done } = await reader.read();
        if (done) break;
        out += value;
      }
      const workerPid = Number(out.trim());
      assert.ok(workerPid > 0, out);
      await Deno.stat(`/proc/${workerPid}`); // running
      stack.kill("SIGKILL");
      await stack.status;
      await reader.cancel();
      // The worker sees its stdin end and exits; wait for it to go.
      let gone = false;
      for (let i = 0; i < 200 && !gone; i++) {
        gone = await Deno.stat(`/proc/${workerPid}`).then(
          () => false,
          () => true,
        );
        if (!gone) await new Promise((r) => setTimeout(r, 50));
      }
      assert.ok(gone, `worker ${workerPid} outlived the stack`);
    } finally {
      await p.remove();
    }
  },
});

Deno.test("deno.json: in the project's own processes (stack, tests, bench) request.signal aborts only for a request its client abandoned, without the legacy-abort warning", async () => {
  const dir = await Deno.makeTempDir({ prefix: "legacy-abort-" });
  try {
    await Deno.writeTextFile(
      `${dir}/serve.ts`,
      `const s = Deno.serve({ port: 0, onListen: () => {} }, (req) => {
  req.signal.addEventListener("abort", () => console.log("aborted"));
  return new Response("ok");
});
await (await fetch(\`http://127.0.0.1:\${s.addr.port}/\`)).text();
await new Promise((r) => setTimeout(r, 200));
await s.shutdown();
console.log("done");
`,
    );
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", `--config=${ROOT}deno.json`, `${dir}/serve.ts`],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const [stdout, stderr] = [out.stdout, out.stderr].map((b) =>
      new TextDecoder().decode(b)
    );
    assert.equal(stdout, "done\n", stderr);
    assert.ok(!stderr.includes("legacy behavior"), stderr);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
