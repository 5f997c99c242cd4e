-- Short leases that let one auth-sync update at a time work on a usuarios row.
-- An update calls Supabase Auth between reading the row and writing it, and a
-- database row lock cannot be held across that call: it would pin a pooler
-- connection for the call's length, and on a single-session database (the
-- local PGlite stack) Auth's own writes would wait behind it for ever. A
-- lease is taken and released in statements of their own instead, and
-- expires by itself if its holder dies.
create table if not exists public.auth_sync_leases (
  target_id bigint primary key,
  holder uuid not null,
  expires_at timestamptz not null
);

comment on table public.auth_sync_leases is
  'auth-sync: at most one update at a time per usuarios row. A row here is a lease held by one call; an expired one may be taken over.';
comment on column public.auth_sync_leases.target_id is
  'usuarios.id being updated. No foreign key: a lease must not stop a row from being deleted.';
comment on column public.auth_sync_leases.holder is
  'Random id of the call holding the lease; only it releases the lease.';
comment on column public.auth_sync_leases.expires_at is
  'When the lease lapses if its holder never releases it (database clock).';

alter table public.auth_sync_leases enable row level security;
