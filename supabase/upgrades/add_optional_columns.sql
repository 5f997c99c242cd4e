-- Upgrade of an adopted public.usuarios to this project's full shape, run by
-- the table's owner on purpose (README, "Adopting an existing project"):
--
--   psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -f supabase/upgrades/add_optional_columns.sql
--
-- or pasted into the dashboard's SQL editor. It is not a migration: adding
-- columns and constraints to someone's table is their choice, never a side
-- effect of `supabase db push`.
--
-- What it does, all or nothing (one statement), and nothing on a table that
-- already has it all (it can be run again):
-- - adds auth_user_id uuid and makes it unique (a unique constraint
--   usuarios_auth_user_id_key, as on a fresh install);
-- - adds last_manual_logout_at timestamptz;
-- - checks presence_state to online/offline (usuarios_presence_state_check)
--   and makes it not null, with default 'offline' where it has none (rows
--   inserted without a state would otherwise fail);
-- - drops the plain index usuarios_auth_user_id_idx the migration made
--   while auth_user_id had duplicates, once the unique one replaces it.
-- It changes no existing value. Rows that stop it (a duplicated
-- auth_user_id, a presence_state that is null or not online/offline) are
-- named in the error, with the statement that finds them all; fix them and
-- run it again.
do $$
declare
  _type text;
  _blocking text;
  _count bigint;
  _problems text[] := array[]::text[];
begin
  if to_regclass('public.usuarios') is null then
    raise exception 'public.usuarios does not exist'
      using hint = 'Push the migrations first (supabase db push).';
  end if;

  -- Check everything before changing anything, and report every problem at
  -- once.
  select format_type(atttypid, atttypmod) into _type from pg_attribute
  where attrelid = 'public.usuarios'::regclass and attname = 'auth_user_id'
    and attnum > 0 and not attisdropped;
  if _type is not null and _type <> 'uuid' then
    _problems := _problems || format(
      'auth_user_id exists as %s, not uuid; convert it yourself (alter table public.usuarios alter column auth_user_id type uuid using auth_user_id::uuid)',
      _type);
  elsif _type = 'uuid' then
    select count(*), string_agg(format('%s (ids %s)', auth_user_id, ids), '; ')
      into _count, _blocking
    from (
      select auth_user_id, string_agg(id::text, ', ' order by id) as ids
      from public.usuarios where auth_user_id is not null
      group by auth_user_id having count(*) > 1
      order by auth_user_id limit 10
    ) d;
    if _count > 0 then
      _problems := _problems || format(
        'auth_user_id is not unique: %s. Find them all with: select auth_user_id, array_agg(id) from public.usuarios where auth_user_id is not null group by 1 having count(*) > 1',
        _blocking);
    end if;
  end if;

  if exists (
    select 1 from pg_attribute
    where attrelid = 'public.usuarios'::regclass and attname = 'presence_state'
      and attnum > 0 and not attisdropped
  ) then
    select count(*), string_agg(format('id %s (%s)', id, coalesce(quote_literal(presence_state), 'null')), ', ')
      into _count, _blocking
    from (
      select id, presence_state from public.usuarios
      where presence_state is null or presence_state not in ('online', 'offline')
      order by id limit 10
    ) d;
    if _count > 0 then
      _problems := _problems || format(
        'presence_state must be online or offline, but: %s. Find them all with: select id, presence_state from public.usuarios where presence_state is null or presence_state not in (''online'', ''offline''); e.g. update public.usuarios set presence_state = ''offline'' where presence_state is null or presence_state not in (''online'', ''offline'')',
        _blocking);
    end if;
  end if;

  if cardinality(_problems) > 0 then
    raise exception 'public.usuarios was not upgraded; these rows stop it: %',
      array_to_string(_problems, ' | ')
      using hint = 'Nothing was changed. Fix the rows named, then run supabase/upgrades/add_optional_columns.sql again.';
  end if;

  -- auth_user_id, unique.
  if _type is null then
    alter table public.usuarios add column auth_user_id uuid;
    comment on column public.usuarios.auth_user_id is
      'auth.users.id of the linked identity. A linked row is never matched by email or username for another identity. No foreign key: the provider owns identities, and seeds and restores load rows before accounts.';
    raise notice 'public.usuarios: added auth_user_id uuid.';
  end if;
  if not exists (
    select 1 from pg_index i
    join pg_attribute a on a.attrelid = i.indrelid and a.attnum = i.indkey[0]
    where i.indrelid = 'public.usuarios'::regclass and i.indisunique
      and i.indnatts = 1 and i.indpred is null and i.indexprs is null
      and a.attname = 'auth_user_id'
  ) then
    alter table public.usuarios
      add constraint usuarios_auth_user_id_key unique (auth_user_id);
    if to_regclass('public.usuarios_auth_user_id_idx') is not null then
      drop index public.usuarios_auth_user_id_idx;
    end if;
    raise notice 'public.usuarios: auth_user_id is now unique (usuarios_auth_user_id_key).';
  end if;

  -- last_manual_logout_at.
  if not exists (
    select 1 from pg_attribute
    where attrelid = 'public.usuarios'::regclass
      and attname = 'last_manual_logout_at' and attnum > 0 and not attisdropped
  ) then
    alter table public.usuarios add column last_manual_logout_at timestamptz;
    comment on column public.usuarios.last_manual_logout_at is
      'Time of the last ping that set the state to offline.';
    raise notice 'public.usuarios: added last_manual_logout_at timestamptz.';
  end if;

  -- presence_state: present, never null, online or offline.
  if not exists (
    select 1 from pg_attribute
    where attrelid = 'public.usuarios'::regclass and attname = 'presence_state'
      and attnum > 0 and not attisdropped
  ) then
    -- A constant default: no table rewrite.
    alter table public.usuarios
      add column presence_state text not null default 'offline';
    comment on column public.usuarios.presence_state is
      'Presence set by the user: online or offline. Nothing moves it automatically.';
    raise notice 'public.usuarios: added presence_state text not null default ''offline''.';
  end if;
  if not exists (
    select 1 from pg_attrdef d
    join pg_attribute a on a.attrelid = d.adrelid and a.attnum = d.adnum
    where d.adrelid = 'public.usuarios'::regclass and a.attname = 'presence_state'
  ) then
    alter table public.usuarios alter column presence_state set default 'offline';
    raise notice 'public.usuarios: presence_state defaults to ''offline''.';
  end if;
  alter table public.usuarios alter column presence_state set not null;
  if not exists (
    select 1 from pg_constraint
    where conrelid = 'public.usuarios'::regclass
      and conname = 'usuarios_presence_state_check'
  ) then
    alter table public.usuarios add constraint usuarios_presence_state_check
      check (presence_state in ('online', 'offline'));
    raise notice 'public.usuarios: presence_state is checked to online/offline (usuarios_presence_state_check).';
  end if;
end
$$;
