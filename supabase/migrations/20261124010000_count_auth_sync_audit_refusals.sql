-- Refused calls (403 admin_required) are counted, not appended: one row per
-- actor, action, target row and minute, with the number of attempts, and at
-- most six rows per actor and minute (auth-sync/audit.ts). A caller without
-- rights can no longer grow the table with every request.
alter table public.auth_sync_audit
  add column if not exists attempts integer not null default 1;
alter table public.auth_sync_audit
  add column if not exists refused_minute timestamptz;

comment on column public.auth_sync_audit.attempts is
  'Calls this row stands for: 1 for a change; for a refusal, the refused calls of its actor, action and target within refused_minute.';
comment on column public.auth_sync_audit.refused_minute is
  'The minute whose refused calls this row counts; null on rows of changes.';

-- The upsert key of refusals. Only refusal rows are in it, so it stays as
-- small as the refusals themselves.
create unique index if not exists auth_sync_audit_refusal_key
  on public.auth_sync_audit
  (actor_auth_user_id, action, (coalesce(target_id, 0)), refused_minute)
  where refused_minute is not null;
