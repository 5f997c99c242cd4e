// Entry point deployed by `supabase functions deploy presence`.
import { createPresence } from "./handler.ts";

Deno.serve(createPresence());
