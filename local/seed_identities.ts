/**
 * Creates the fixture's identities (local/fixture.ts) through the Auth admin
 * API, leaving any that already exist. The local stack calls it at start;
 * against `supabase start` run `deno task seed:identities` after
 * `supabase db reset` (reads `SUPABASE_URL` and `SUPABASE_SERVICE_ROLE_KEY`,
 * defaulting to the local ones).
 *
 * @module
 */
import { SEED_IDENTITIES } from "./fixture.ts";

/** The well-known local service_role key (`supabase start` prints it). */
const _LOCAL_SERVICE_ROLE_KEY =
  "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJpc3MiOiJzdXBhYmFzZS1kZW1vIiwicm9sZSI6InNlcnZpY2Vfcm9sZSIsImV4cCI6MTk4MzgxMjk5Nn0.EGIM96RAZx35lJzdJsyH-qQwv8Hdp7fcn3W2dIh_sh0";

/**
 * Creates each seeded identity with its fixed id, confirmed.
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
  for (const identity of SEED_IDENTITIES) {
    const res = await fetch(`${apiUrl}/auth/v1/admin/users`, {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        apikey: serviceRoleKey,
        Authorization: `Bearer ${serviceRoleKey}`,
      },
      body: JSON.stringify({
        id: identity.id,
        email: identity.email,
        password: identity.password,
        email_confirm: true,
      }),
    });
    const body = await res.json();
    const code = body.error_code ?? body.code;
    if (!res.ok && code !== "email_exists") {
      throw new Error(
        `Seeding identity "${identity.email}" failed with ${res.status} "${code}"`,
      );
    }
  }
}

if (import.meta.main) {
  await seedIdentities(
    Deno.env.get("SUPABASE_URL") ?? "http://127.0.0.1:54321",
    Deno.env.get("SUPABASE_SERVICE_ROLE_KEY") ?? _LOCAL_SERVICE_ROLE_KEY,
  );
  console.log(`Seeded ${SEED_IDENTITIES.length} identities.`);
}
