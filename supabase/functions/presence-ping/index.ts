// Entry point deployed by `supabase functions deploy presence-ping`: the
// handler over the process environment and the real dependencies.
import { realDeps } from "../_shared/deps.ts";
import { denoEnv } from "../_shared/env.ts";
import { createPresencePing } from "./handler.ts";

Deno.serve(createPresencePing(denoEnv, realDeps));
