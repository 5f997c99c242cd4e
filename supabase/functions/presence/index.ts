// Entry point deployed by `supabase functions deploy presence`: the
// handler over the process environment and a fresh set of the real
// dependencies, kept for the isolate's life.
import { createDeps } from "../_shared/deps.ts";
import { denoEnv } from "../_shared/env.ts";
import { createPresence } from "./handler.ts";

Deno.serve(createPresence(denoEnv, createDeps()));
