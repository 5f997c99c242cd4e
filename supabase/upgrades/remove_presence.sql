-- Takes the presence service out of a database, run by public.usuarios'
-- owner on purpose (docs/adoption.md, "Taking it out"), with psql:
--
--   psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -f supabase/upgrades/remove_presence.sql
--
-- Undeploy the functions first, one `supabase functions delete <name>` per
-- function (presence-ping, presence, auth-sync): without the presence
-- schema they answer 500 migration_missing.
--
-- What it removes, in this order:
-- 1. the five change-log triggers on public.usuarios (four statement-level,
--    one row-level for replica-mode writers), the only objects on the app's
--    own write path, each waiting at most 500 ms for its lock at a
--    time and retried (presence.run_ddl), so that the app's writes are never
--    held behind a long transaction;
-- 2. the presence schema: its functions and the change log
--    (presence.changes), which nothing else reads;
-- 3. the migration history rows of the migrations that made them, as
--    `supabase migration repair --status reverted` would, so that the
--    history says what the database holds, and a later
--    `supabase db push --remote --include-all` puts them back.
--
-- What it keeps: public.usuarios as it is (every row, column, index,
-- comment and constraint, those the migrations or the upgrade added
-- included: the app may rely on them now), and the auth_sync_* tables (the
-- audit trail records changes made to accounts). Each is listed at the end
-- with the statement that drops it, for you to run if you mean to.
--
-- Run it again after a stop half-way: a step already done is skipped.
\set ON_ERROR_STOP on

do $$
declare
  _trigger text;
begin
  if to_regclass('public.usuarios') is not null then
    for _trigger in
      select t.tgname::text from pg_trigger t
      where t.tgrelid = 'public.usuarios'::regclass and not t.tgisinternal
        and t.tgname in ('usuarios_log_insert', 'usuarios_log_update',
                         'usuarios_log_delete', 'usuarios_log_truncate',
                         'usuarios_log_replica_rows')
    loop
      if to_regprocedure('presence.run_ddl(text)') is not null then
        perform presence.run_ddl(
          format('drop trigger if exists %I on public.usuarios', _trigger));
      else
        -- Pushed before the helper existed: one wait of 2 s at most.
        perform set_config('lock_timeout', '2s', true);
        execute format('drop trigger if exists %I on public.usuarios', _trigger);
      end if;
      raise notice 'dropped the trigger % on public.usuarios', _trigger;
    end loop;
  end if;
end
$$;

-- Only once no trigger calls into it: a CASCADE would otherwise drop a
-- trigger under a lock without a timeout.
do $$
begin
  if to_regnamespace('presence') is null then
    return;
  end if;
  if exists (
    select 1 from pg_trigger t join pg_proc p on p.oid = t.tgfoid
    where p.pronamespace = 'presence'::regnamespace
  ) then
    raise exception 'a trigger still calls a function of the presence schema'
      using hint = 'Run this script again; it drops the change-log triggers first.';
  end if;
  drop schema presence cascade;
  raise notice 'dropped the presence schema (its functions and presence.changes)';
end
$$;

do $$
begin
  if to_regclass('supabase_migrations.schema_migrations') is null then
    return;
  end if;
  delete from supabase_migrations.schema_migrations
  where version in (
    '20261123000100', '20261124020000', '20261124020100', '20261124030000',
    '20261124030100', '20261124060000', '20261124235000', '20261124235100',
    '20261124235200', '20261125000000', '20261125010000', '20261125020000',
    '20261125030000', '20261125043000', '20261125050000', '20261125060000');
end
$$;

do $$
declare
  _name text;
begin
  for _name in
    select c.relname::text from pg_class c
    where c.relnamespace = 'public'::regnamespace and c.relkind = 'r'
      and c.relname in ('auth_sync_audit', 'auth_sync_leases', 'auth_sync_intents')
    order by 1
  loop
    raise notice 'kept public.% (drop table public.%;)', _name, _name;
  end loop;
  for _name in
    select c.relname::text from pg_class c
    where c.relnamespace = 'public'::regnamespace and c.relkind = 'i'
      and c.relname in ('usuarios_correo_lower_idx',
                        'usuarios_nombre_usuario_lower_idx',
                        'usuarios_ultimo_acceso_idx')
    order by 1
  loop
    raise notice 'kept the index public.% (drop index concurrently public.%;)',
      _name, _name;
  end loop;
end
$$;
