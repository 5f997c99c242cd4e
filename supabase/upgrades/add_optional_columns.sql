-- Upgrade of an adopted public.usuarios to this project's full shape, run by
-- the table's owner on purpose (docs/adoption.md, "The upgrade"), with psql,
-- after `supabase db push --remote`:
--
--   psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -f supabase/upgrades/add_optional_columns.sql
--
-- It is not a migration: adding columns and constraints to someone's table
-- is their choice, never a side effect of `supabase db push`. Not for the
-- dashboard's SQL editor, which runs a script as one transaction: the
-- unique index is built CONCURRENTLY, which cannot run in one.
--
-- Online-safe on a busy table: no step scans the table under a lock that
-- blocks its writes. Each catalog-only step (a column without a volatile
-- default, attaching an index, a NOT VALID constraint, SET NOT NULL proven
-- by a validated check) waits at most 500 ms for its lock at a time and is
-- retried (presence.run_ddl, from the migrations); the unique index is
-- built concurrently, then attached as the constraint; the checks are added
-- NOT VALID, then validated, which scans without blocking writes. A step
-- already done is skipped, its scan included: the script can be run again,
-- and a run stopped half-way is finished by the next one.
--
-- What it does:
-- - adds auth_user_id uuid and makes it unique (a unique constraint
--   usuarios_auth_user_id_key, as on a fresh install);
-- - adds last_manual_logout_at timestamptz;
-- - checks presence_state to online/offline (usuarios_presence_state_check)
--   and makes it not null, with default 'offline' where it has none (rows
--   inserted without a state would otherwise fail).
-- It changes no existing value. Rows that stop it (a duplicated
-- auth_user_id, a presence_state that is null or not online/offline) are
-- named in the error, with the statement that finds them all, before
-- anything changes; fix them and run it again.
\set ON_ERROR_STOP on

-- 1. Check everything before changing anything, and report every problem at
-- once. A check whose constraint is already in place is not run again.
do $$
declare
  _type text;
  _blocking text;
  _count bigint;
  _problems text[] := array[]::text[];
begin
  if to_regclass('public.usuarios') is null
    or to_regprocedure('presence.run_ddl(text)') is null then
    raise exception 'public.usuarios or the migrations'' helpers do not exist'
      using hint = 'Push the migrations first (supabase db push --remote, for the linked project).';
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
  elsif _type = 'uuid' and not exists (
    select 1 from pg_constraint
    where conrelid = 'public.usuarios'::regclass
      and conname = 'usuarios_auth_user_id_key'
  ) then
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
  ) and not (
    exists (
      select 1 from pg_attribute
      where attrelid = 'public.usuarios'::regclass
        and attname = 'presence_state' and attnotnull
    ) and exists (
      select 1 from pg_constraint
      where conrelid = 'public.usuarios'::regclass
        and conname = 'usuarios_presence_state_check' and convalidated
    )
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
end
$$;

-- 2. auth_user_id, a catalog-only step.
do $$
begin
  if not exists (
    select 1 from pg_attribute
    where attrelid = 'public.usuarios'::regclass and attname = 'auth_user_id'
      and attnum > 0 and not attisdropped
  ) then
    perform presence.run_ddl(
      'alter table public.usuarios add column auth_user_id uuid');
    comment on column public.usuarios.auth_user_id is
      'auth.users.id of the linked identity. A linked row is never matched by email or username for another identity. No foreign key: the provider owns identities, and seeds and restores load rows before accounts.';
    raise notice 'public.usuarios: added auth_user_id uuid.';
  end if;
  -- A build of the unique index that did not finish left it INVALID: drop
  -- it, so that the next statement builds it again instead of skipping it.
  if exists (
    select 1 from pg_index
    where indexrelid = to_regclass('public.usuarios_auth_user_id_key')
      and not indisvalid
  ) then
    perform presence.run_ddl('drop index public.usuarios_auth_user_id_key');
    raise notice 'public.usuarios: dropped the invalid index usuarios_auth_user_id_key left by an earlier run.';
  end if;
end
$$;

-- 3. The unique index, built without blocking writes (it skips quietly
-- when it exists: a fresh install's, or an earlier run's).
set client_min_messages = warning;
create unique index concurrently if not exists usuarios_auth_user_id_key
  on public.usuarios (auth_user_id);
reset client_min_messages;

-- 4. Attached as the constraint (catalog-only); the plain index an earlier
-- version of the migrations made is then redundant.
do $$
begin
  if not exists (
    select 1 from pg_constraint
    where conrelid = 'public.usuarios'::regclass
      and conname = 'usuarios_auth_user_id_key'
  ) then
    perform presence.run_ddl('alter table public.usuarios add constraint usuarios_auth_user_id_key unique using index usuarios_auth_user_id_key');
    raise notice 'public.usuarios: auth_user_id is now unique (usuarios_auth_user_id_key).';
  end if;
  if to_regclass('public.usuarios_auth_user_id_idx') is not null then
    perform presence.run_ddl('drop index public.usuarios_auth_user_id_idx');
  end if;
end
$$;

-- 5. last_manual_logout_at, and presence_state's column and default: all
-- catalog-only (a constant default rewrites nothing).
do $$
begin
  if not exists (
    select 1 from pg_attribute
    where attrelid = 'public.usuarios'::regclass
      and attname = 'last_manual_logout_at' and attnum > 0 and not attisdropped
  ) then
    perform presence.run_ddl(
      'alter table public.usuarios add column last_manual_logout_at timestamptz');
    comment on column public.usuarios.last_manual_logout_at is
      'Time of the last ping that set the state to offline.';
    raise notice 'public.usuarios: added last_manual_logout_at timestamptz.';
  end if;
  if not exists (
    select 1 from pg_attribute
    where attrelid = 'public.usuarios'::regclass and attname = 'presence_state'
      and attnum > 0 and not attisdropped
  ) then
    perform presence.run_ddl('alter table public.usuarios add column presence_state text not null default ''offline''');
    comment on column public.usuarios.presence_state is
      'Presence set by the user: online or offline. Nothing moves it automatically.';
    raise notice 'public.usuarios: added presence_state text not null default ''offline''.';
  end if;
  if not exists (
    select 1 from pg_attrdef d
    join pg_attribute a on a.attrelid = d.adrelid and a.attnum = d.adnum
    where d.adrelid = 'public.usuarios'::regclass and a.attname = 'presence_state'
  ) then
    perform presence.run_ddl('alter table public.usuarios alter column presence_state set default ''offline''');
    raise notice 'public.usuarios: presence_state defaults to ''offline''.';
  end if;
end
$$;

-- 6. presence_state checked to online/offline and not null: the checks are
-- added NOT VALID (catalog-only; writes are checked from then on), then
-- validated, which scans the table under a lock that writes do not wait
-- for. SET NOT NULL then needs no scan: the validated
-- usuarios_presence_state_not_null check proves it, and then goes.
do $$
begin
  if not exists (
    select 1 from pg_constraint
    where conrelid = 'public.usuarios'::regclass
      and conname = 'usuarios_presence_state_check'
  ) then
    perform presence.run_ddl('alter table public.usuarios add constraint usuarios_presence_state_check check (presence_state in (''online'', ''offline'')) not valid');
  end if;
  if exists (
    select 1 from pg_attribute
    where attrelid = 'public.usuarios'::regclass and attname = 'presence_state'
      and not attnotnull
  ) and not exists (
    select 1 from pg_constraint
    where conrelid = 'public.usuarios'::regclass
      and conname = 'usuarios_presence_state_not_null'
  ) then
    perform presence.run_ddl('alter table public.usuarios add constraint usuarios_presence_state_not_null check (presence_state is not null) not valid');
  end if;
end
$$;

do $$
declare
  _name text;
begin
  foreach _name in array array['usuarios_presence_state_check', 'usuarios_presence_state_not_null'] loop
    if exists (
      select 1 from pg_constraint
      where conrelid = 'public.usuarios'::regclass and conname = _name
        and not convalidated
    ) then
      perform presence.run_ddl(format(
        'alter table public.usuarios validate constraint %I', _name));
      if _name = 'usuarios_presence_state_check' then
        raise notice 'public.usuarios: presence_state is checked to online/offline (usuarios_presence_state_check).';
      end if;
    end if;
  end loop;
end
$$;

do $$
begin
  if exists (
    select 1 from pg_attribute
    where attrelid = 'public.usuarios'::regclass and attname = 'presence_state'
      and not attnotnull
  ) then
    perform presence.run_ddl(
      'alter table public.usuarios alter column presence_state set not null');
    raise notice 'public.usuarios: presence_state is now not null.';
  end if;
  if exists (
    select 1 from pg_constraint
    where conrelid = 'public.usuarios'::regclass
      and conname = 'usuarios_presence_state_not_null'
  ) then
    perform presence.run_ddl('alter table public.usuarios drop constraint usuarios_presence_state_not_null');
  end if;
end
$$;
