// Entry point deployed by `supabase functions deploy presence-ping`: the
// handler over the process environment and the real dependencies.
import { denoEnv } from "../_shared/env.ts";
import { createPresencePing, pingDeps } from "./handler.ts";

Deno.serve(createPresencePing(denoEnv, pingDeps));
