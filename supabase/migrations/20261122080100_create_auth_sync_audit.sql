-- One row per auth-sync call that changed (or tried to change) something.
create table if not exists public.auth_sync_audit (
  id bigint generated always as identity primary key,
  created_at timestamptz not null default now(),
  actor_auth_user_id uuid,
  actor_email text,
  action text not null,
  target_id bigint,
  fields text[] not null default '{}',
  outcome text not null,
  detail text
);

comment on table public.auth_sync_audit is
  'Audit trail of auth-sync changes: when, who, which usuarios row, which fields, outcome. Never holds a password, token or key.';
comment on column public.auth_sync_audit.actor_auth_user_id is
  'Identity id of the administrator who made the call.';
comment on column public.auth_sync_audit.fields is
  'Names of the fields changed or attempted (email, password, nombre_usuario, auth_user_id), never their values for password.';
comment on column public.auth_sync_audit.outcome is
  'ok, failed, or partial_failure when the provider changed but the database did not and the change could not be undone.';
comment on column public.auth_sync_audit.detail is
  'Error code or short reason for a failure; no secrets.';

create index if not exists auth_sync_audit_target_id_idx
  on public.auth_sync_audit (target_id);

alter table public.auth_sync_audit enable row level security;
