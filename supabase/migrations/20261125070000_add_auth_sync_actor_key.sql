-- Which of the project's secret keys a trusted server presented: a project
-- may have several (the dashboard names each), and after one leaks the
-- operator needs to tell its changes from the others'. The name, never the
-- key. Recorded on the audit row and on the intent (whose audit row another
-- call may write when it settles it).
-- Nullable columns without a default are a catalog-only change: no
-- rewrite, no scan; the lock it needs is brief, and waiting for it is
-- bounded.
set lock_timeout = '5s';

alter table public.auth_sync_audit
  add column if not exists actor_key text;

comment on column public.auth_sync_audit.actor_key is
  'For a trusted server (actor_kind secret_key or service_role_key): the name of the key it presented, as SUPABASE_SECRET_KEYS names it (default, or the name given in the dashboard), or service_role for the legacy key; null for a user and on rows written before 2026-11-25.';

alter table public.auth_sync_intents
  add column if not exists actor_key text;

comment on column public.auth_sync_intents.actor_key is
  'As auth_sync_audit.actor_key, for the call that wrote the intent.';
