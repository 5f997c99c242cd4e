import assert from "node:assert/strict";
import { corsHeaders as supabaseCors } from "@supabase/supabase-js/cors";
import { createClient, FunctionRegion } from "@supabase/supabase-js";
import { ALLOWED_HEADERS, corsHeaders } from "./cors.ts";

const allowed = new Set(
  corsHeaders["Access-Control-Allow-Headers"].split(",").map((h) =>
    h.trim().toLowerCase()
  ),
);

Deno.test("corsHeaders: allows every header supabase-js's own CORS list names", () => {
  const theirs = supabaseCors["Access-Control-Allow-Headers"].split(",").map(
    (h) => h.trim().toLowerCase(),
  );
  assert.ok(theirs.length >= 8);
  for (const header of theirs) assert.ok(allowed.has(header), header);
  assert.equal(allowed.size, ALLOWED_HEADERS.length);
});

Deno.test("corsHeaders: allows every header functions.invoke sends with a region, retries and trace context", async () => {
  const sent: string[] = [];
  const supabase = createClient("http://127.0.0.1:9", "anon-key", {
    auth: { persistSession: false, autoRefreshToken: false },
    global: {
      // What a tracing SDK and a retrying wrapper add.
      headers: {
        traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        tracestate: "a=b",
        baggage: "k=v",
        "x-retry-count": "1",
      },
      fetch: (_input, init) => {
        new Headers(init?.headers).forEach((_, name) => sent.push(name));
        return Promise.resolve(
          new Response("{}", {
            headers: { "Content-Type": "application/json" },
          }),
        );
      },
    },
  });
  const { error } = await supabase.functions.invoke("presence-ping", {
    body: { state: "online" },
    region: FunctionRegion.EuWest1,
  });
  assert.equal(error, null);
  assert.ok(sent.includes("x-region"));
  for (
    const h of ["content-type", "authorization", "apikey", "x-client-info"]
  ) {
    assert.ok(sent.includes(h), h);
  }
  for (const header of sent) assert.ok(allowed.has(header), header);
});
