/**
 * The demo page at `/demo/` on the API port: `client/demo.html` and
 * `client/demo.js`, the client kit, and supabase-js's browser build.
 *
 * The kit is `client/presence.ts`, served with its types stripped by
 * `stripTypeScriptTypes` of `node:module` (built into Deno, the same
 * type stripping Node uses): no bundler to fetch or pin, no build step, no
 * second copy of the kit in JavaScript. That works because the kit uses only
 * erasable TypeScript and imports nothing at run time (its supabase-js
 * import is `import type`); whitespace replaces the types, so a browser's
 * line numbers match the source.
 *
 * @module
 */
import { stripTypeScriptTypes } from "node:module";

const _CLIENT = new URL("../client/", import.meta.url);
const _SUPABASE_UMD = new URL(
  "../node_modules/@supabase/supabase-js/dist/umd/supabase.js",
  import.meta.url,
);
const _JS = "text/javascript; charset=utf-8";

/** What the page needs to know of the stack. */
export interface DemoOptions {
  /** Sent to the page, which sends it as `apikey` like any app. */
  anonKey: string;
}

/**
 * Builds the handler of `/demo` and everything under it.
 *
 * @example
 * ```ts
 * createGateway({ auth, functions, isValidJwt, demo: createDemo({ anonKey }) });
 * ```
 */
export function createDemo(
  options: DemoOptions,
): (req: Request) => Promise<Response> {
  return async (req) => {
    const { pathname } = new URL(req.url);
    if (req.method !== "GET" && req.method !== "HEAD") {
      return new Response("Method not allowed", { status: 405 });
    }
    switch (pathname) {
      case "/demo":
        return Response.redirect(new URL("/demo/", req.url), 302);
      case "/demo/":
      case "/demo/index.html": {
        // The anon key is public by design (it ships in every app); the
        // page gets the stack's own rather than a copy that could drift.
        const html = await Deno.readTextFile(new URL("demo.html", _CLIENT));
        return new Response(
          html.replace("%ANON_KEY%", _attribute(options.anonKey)),
          {
            headers: {
              "content-type": "text/html; charset=utf-8",
              "cache-control": "no-store",
            },
          },
        );
      }
      case "/demo/demo.js":
        return _file(new URL("demo.js", _CLIENT), _JS);
      case "/demo/presence.ts": {
        // A module script needs a JavaScript MIME type, not a .js name.
        const source = await Deno.readTextFile(
          new URL("presence.ts", _CLIENT),
        );
        return new Response(stripTypeScriptTypes(source), {
          headers: { "content-type": _JS, "cache-control": "no-store" },
        });
      }
      case "/demo/vendor/supabase.js":
        return _file(_SUPABASE_UMD, _JS);
      default:
        return new Response("Not found", { status: 404 });
    }
  };
}

async function _file(url: URL, type: string): Promise<Response> {
  return new Response(await Deno.readFile(url), {
    headers: { "content-type": type, "cache-control": "no-store" },
  });
}

function _attribute(text: string): string {
  return text.replace(/[&"<>]/g, (c) => `&#${c.charCodeAt(0)};`);
}
