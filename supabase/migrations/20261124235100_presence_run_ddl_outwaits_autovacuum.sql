-- presence.run_ddl (20261124030100) waited 500 ms for its lock at a time.
-- An autovacuum of the table holds a lock that DDL waits for, and Postgres
-- cancels it for a waiter only once that waiter has waited deadlock_timeout
-- (1 s): a waiter that gives up sooner never gets it, however often it
-- tries. On `usuarios`, which every ping updates, autovacuum runs often and
-- long, and the upgrade script failed with a hint that blamed a long
-- transaction.
--
-- Each attempt still waits 500 ms, so that a statement queued behind a long
-- transaction does not hold the table's writes behind it for long; while a
-- VACUUM or ANALYZE runs in this database, the next attempt waits deadlock_timeout
-- and 500 ms more, which is what makes Postgres cancel an autovacuum that
-- blocks it (one run to prevent wraparound is never cancelled: the hint
-- says to wait for it).
create or replace function presence.run_ddl(p_statement text)
returns void
language plpgsql
security invoker
set search_path = ''
set lock_timeout = '500ms'
as $$
declare
  _attempt int := 0;
  _vacuum boolean := false;
begin
  loop
    begin
      perform pg_catalog.set_config('lock_timeout',
        case when _vacuum
          then (pg_catalog.date_part('epoch',
              pg_catalog.current_setting('deadlock_timeout')::interval)
            * 1000 + 500)::int || 'ms'
          else '500ms' end,
        true);
      execute p_statement;
      return;
    exception when lock_not_available then
      _attempt := _attempt + 1;
      -- The progress views show any role a VACUUM's or ANALYZE's database;
      -- pg_stat_activity hides other roles' backend_type from a role
      -- without pg_read_all_stats, as a project's postgres may be.
      select exists (
        select 1 from pg_catalog.pg_stat_progress_vacuum v
        where v.datname = pg_catalog.current_database()
        union all
        select 1 from pg_catalog.pg_stat_progress_analyze v
        where v.datname = pg_catalog.current_database()
      ) into _vacuum;
      if _attempt >= 20 then
        raise exception 'gave up after % attempts waiting for a lock: %',
          _attempt, p_statement
          using errcode = 'lock_not_available',
                hint = 'A long transaction, or a VACUUM of the table (an autovacuum against wraparound is never cancelled), holds it; run this again when it ends. pg_stat_activity shows which.';
      end if;
      perform pg_catalog.pg_sleep(
        least(0.05 * 2 ^ _attempt, 2) * (0.5 + pg_catalog.random() / 2));
    end;
  end loop;
end
$$;

comment on function presence.run_ddl(text) is
  'Migrations: a catalog-only DDL statement with lock_timeout 500 ms (deadlock_timeout + 500 ms while an autovacuum runs, so that it yields), retried with backoff.';
