// Entry point deployed by `supabase functions deploy auth-sync`: the
// handler over the process environment and the real dependencies.
import { realDeps } from "../_shared/deps.ts";
import { denoEnv } from "../_shared/env.ts";
import { createAuthSync } from "./handler.ts";

Deno.serve(createAuthSync(denoEnv, realDeps));
