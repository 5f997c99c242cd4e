-- What an auth-sync update is about to do at Supabase Auth, written before
-- Auth is called and settled once the usuarios row follows (or the change
-- is undone). A call that dies between the two (a worker killed on its CPU,
-- memory or wall-clock limit, a lost COMMIT answer) leaves its intent open;
-- the next update of the row, or the reconcile action, reads the account
-- back and settles it. Never holds a password: field names only.
create table if not exists public.auth_sync_intents (
  id uuid primary key,
  target_id bigint not null,
  holder uuid not null,
  kind text not null check (kind in ('update', 'create')),
  account_id uuid,
  created_by text,
  fields text[] not null,
  old_email text,
  new_email text,
  row_set jsonb not null default '{}',
  actor_kind text not null,
  actor_auth_user_id uuid,
  actor_email text,
  created_at timestamptz not null default now(),
  settled_at timestamptz,
  settled_by uuid,
  outcome text
);

comment on table public.auth_sync_intents is
  'auth-sync: an account change announced before Supabase Auth is called, settled (settled_at, outcome) once the usuarios row follows or the change is undone. An open intent whose lease has lapsed is settled by the next call.';
comment on column public.auth_sync_intents.holder is
  'Lease holder (auth_sync_leases.holder) of the call that wrote the intent.';
comment on column public.auth_sync_intents.kind is
  'update: account_id is changed; create: an account is created, carrying created_by in its app_metadata.';
comment on column public.auth_sync_intents.created_by is
  'For a creation, the request id the new account carries in app_metadata.auth_sync_request, which tells it from a stranger''s account of the same email.';
comment on column public.auth_sync_intents.fields is
  'Provider fields the call sends (email, password): names only, never a value.';
comment on column public.auth_sync_intents.old_email is
  'The account''s email before the call: what an undo sets back.';
comment on column public.auth_sync_intents.new_email is
  'The email the call sets: an undo, or a settling, applies only while the account still holds it.';
comment on column public.auth_sync_intents.row_set is
  'The usuarios columns the call writes once Auth has changed (correo, nombre_usuario, auth_user_id); no secret.';
comment on column public.auth_sync_intents.settled_by is
  'Lease holder of the call that settled the intent: the writing call itself, or a later call that found it open.';
comment on column public.auth_sync_intents.outcome is
  'applied (row written), undone, unchanged (Auth did not apply it), superseded (the account holds neither email), unknown (a password: cannot be read back), left_changed (Auth changed, could not be undone).';

create index if not exists auth_sync_intents_open_idx
  on public.auth_sync_intents (target_id) where settled_at is null;

alter table public.auth_sync_intents enable row level security;
