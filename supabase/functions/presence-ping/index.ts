// Entry point deployed by `supabase functions deploy presence-ping`.
import { createPresencePing } from "./handler.ts";

Deno.serve(createPresencePing());
