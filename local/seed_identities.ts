/**
 * Creates the fixture's identities (local/fixture.ts) through the Auth admin
 * API, leaving any that already exist. The local stack calls it at start;
 * against `supabase start` run `deno task seed:identities` after
 * `supabase db reset` (reads `SUPABASE_URL` and `SUPABASE_SERVICE_ROLE_KEY`,
 * defaulting to the local ones; a `SUPABASE_URL` that is not this machine is
 * refused).
 *
 * @module
 */
import { ADMIN_STAMP } from "../supabase/functions/_shared/email_proof.ts";
import { LOCAL_SERVICE_ROLE_KEY } from "./auth/mod.ts";
import { SEED_IDENTITIES, type SeedIdentity } from "./fixture.ts";
import { isLoopbackUrl } from "./migrate.ts";

/**
 * Creates each seeded identity with its fixed id, confirmed, and stamps the
 * address of each `adminVerified` one (also on an identity seeded before
 * the stamp existed, found by its fixed id).
 *
 * @example
 * ```ts
 * await seedIdentities("http://127.0.0.1:54321", serviceRoleKey);
 * ```
 */
export async function seedIdentities(
  apiUrl: string,
  serviceRoleKey: string,
): Promise<void> {
  const headers = {
    "Content-Type": "application/json",
    apikey: serviceRoleKey,
    Authorization: `Bearer ${serviceRoleKey}`,
  };
  for (const identity of SEED_IDENTITIES) {
    const res = await fetch(`${apiUrl}/auth/v1/admin/users`, {
      method: "POST",
      headers,
      body: JSON.stringify({
        id: identity.id,
        email: identity.email,
        password: identity.password,
        email_confirm: true,
        ...(identity.adminVerified ? { app_metadata: _stamp(identity) } : {}),
      }),
    });
    const body = await res.json();
    const code = body.error_code ?? body.code;
    _check(identity, res.status, code, ["email_exists"]);
    if (res.ok || !identity.adminVerified) continue;
    // Seeded before administrator addresses needed the stamp: stamp the
    // fixture's own account (its fixed id), never another with the address.
    const stamped = await fetch(
      `${apiUrl}/auth/v1/admin/users/${identity.id}`,
      {
        method: "PUT",
        headers,
        body: JSON.stringify({ app_metadata: _stamp(identity) }),
      },
    );
    const answer = await stamped.json();
    _check(identity, stamped.status, answer.error_code ?? answer.code, [
      "user_not_found",
    ]);
  }
}

function _stamp(identity: SeedIdentity): Record<string, string> {
  return { [ADMIN_STAMP]: identity.email };
}

// Throws unless the answer is a success or one of the codes that leave
// the fixture as it is.
function _check(
  identity: SeedIdentity,
  status: number,
  code: unknown,
  tolerated: readonly string[],
): void {
  if (status < 300 || tolerated.includes(String(code))) return;
  throw new Error(
    `Seeding identity "${identity.email}" failed with ${status} "${code}"`,
  );
}

if (import.meta.main) {
  const apiUrl = Deno.env.get("SUPABASE_URL") ?? "http://127.0.0.1:54321";
  // Identities whose passwords the README prints belong on this machine
  // only: a SUPABASE_URL left in the shell for a hosted project is refused.
  const parsed = URL.parse(apiUrl);
  if (!parsed || !/^https?:$/.test(parsed.protocol)) {
    console.error(
      "seed:identities refused: SUPABASE_URL is not an http(s) URL (expected e.g. http://127.0.0.1:54321). Unset it to seed the local stack.",
    );
    Deno.exit(1);
  }
  if (!isLoopbackUrl(apiUrl)) {
    console.error(
      `seed:identities refused: SUPABASE_URL (${parsed.host}) is not this machine, and the fixture's identities have known passwords. Unset it to seed the local stack.`,
    );
    Deno.exit(1);
  }
  await seedIdentities(
    apiUrl,
    Deno.env.get("SUPABASE_SERVICE_ROLE_KEY") || LOCAL_SERVICE_ROLE_KEY,
  );
  console.log(`Seeded ${SEED_IDENTITIES.length} identities.`);
}
