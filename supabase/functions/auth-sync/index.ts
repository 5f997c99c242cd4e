// Entry point deployed by `supabase functions deploy auth-sync`.
import { createAuthSync } from "./handler.ts";

Deno.serve(createAuthSync());
