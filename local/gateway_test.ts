import assert from "node:assert/strict";
import { createGateway } from "./gateway.ts";

// A gateway whose Auth answers with the Authorization header it received.
function echoGateway() {
  return createGateway({
    auth: (req) =>
      Promise.resolve(
        Response.json({ authorization: req.headers.get("authorization") }),
      ),
    functions: {},
    isValidJwt: () => Promise.resolve(false),
    apiKeys: ["legacy.anon.jwt"],
    opaqueKeys: {
      sb_secret_s: "legacy.service_role.jwt",
      sb_publishable_p: "legacy.anon.jwt",
    },
  });
}

Deno.test("gateway: the bearer Auth receives is built from the apikey header only, as the CLI's Kong builds it; a key in the query passes the key check but gives no bearer", async () => {
  const gateway = echoGateway();
  const seen = async (path: string, headers: Record<string, string> = {}) => {
    const res = await gateway(
      new Request(`http://127.0.0.1:54321${path}`, { headers }),
    );
    assert.equal(res.status, 200);
    return (await res.json()).authorization;
  };
  assert.equal(
    await seen("/auth/v1/admin/users", { apikey: "sb_secret_s" }),
    "Bearer legacy.service_role.jwt",
  );
  assert.equal(await seen("/auth/v1/admin/users?apikey=sb_secret_s"), null);
  assert.equal(
    await seen("/auth/v1/user?apikey=sb_publishable_p", {
      Authorization: "Bearer sb_publishable_p",
    }),
    null,
  );
  assert.equal(
    await seen("/auth/v1/user?apikey=sb_secret_s", {
      Authorization: "Bearer user.jwt",
    }),
    "Bearer user.jwt",
  );
});
