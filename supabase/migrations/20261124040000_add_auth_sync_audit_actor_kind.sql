-- Who called auth-sync: an administrator, or a trusted server holding the
-- project's secret key, which has no identity id or email to record.
-- A column with a constant default is a catalog-only change: no rewrite,
-- no scan; the lock it needs is brief, and waiting for it is bounded.
set lock_timeout = '5s';

alter table public.auth_sync_audit
  add column if not exists actor_kind text not null default 'user';

comment on column public.auth_sync_audit.actor_kind is
  'user (an administrator; actor_auth_user_id and actor_email say who), secret_key (a server with an sb_secret_ key) or service_role_key (a server with the legacy service role key).';
