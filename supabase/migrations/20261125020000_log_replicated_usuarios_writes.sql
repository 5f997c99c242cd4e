-- Writes of public.usuarios applied by a logical-replication subscription
-- were never logged in presence.changes, so watchers never saw them: the
-- change-log triggers of 20261124020000 are statement-level, and a
-- subscription's apply worker fires row triggers only, never statement
-- triggers (PostgreSQL, "Logical Replication", "Architecture"; a TRUNCATE
-- it applies does fire the truncate trigger). ENABLE ALWAYS only made them
-- fire in sessions with session_replication_role = replica, which is not
-- what the apply worker does with them.
--
-- This adds one row-level trigger, enabled ALWAYS, that logs what the
-- statement triggers log (the same upsert; on an update, the old id and the
-- new one; no row without an id, as 20261124235200), only where
-- session_replication_role is 'replica': the apply worker runs so, and an
-- ordinary session pays one check of that setting per written row and
-- nothing more. A session that sets replica itself (a data-only restore
-- through psql, pg_restore) fires both it and the statement triggers; both
-- stamp the same ids with the same transaction id, so the log still holds
-- one row per id, as it would without this trigger.
--
-- Security definer, fixed search_path and no EXECUTE for clients, as
-- presence.log_usuarios_changes: the apply worker runs as the
-- subscription's owner (or the table's), which may have no right on the
-- presence schema.

create or replace function presence.log_usuarios_row_changes()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  if tg_op in ('UPDATE', 'DELETE') and old.id is not null then
    insert into presence.changes as c (user_id, txid)
    values (old.id, pg_catalog.pg_current_xact_id())
    on conflict (user_id) do update
      set txid = excluded.txid, logged_at = pg_catalog.now();
  end if;
  if tg_op in ('INSERT', 'UPDATE') and new.id is not null
     and (tg_op = 'INSERT' or new.id is distinct from old.id) then
    insert into presence.changes as c (user_id, txid)
    values (new.id, pg_catalog.pg_current_xact_id())
    on conflict (user_id) do update
      set txid = excluded.txid, logged_at = pg_catalog.now();
  end if;
  return null;
end;
$$;

comment on function presence.log_usuarios_row_changes() is
  'Row trigger of public.usuarios for replica-mode writers (a logical-replication apply, which fires no statement trigger): stamps each written row id in presence.changes with the top-level transaction id, as presence.log_usuarios_changes does.';

revoke execute on function presence.log_usuarios_row_changes()
  from public, anon, authenticated;

-- Creating the trigger takes a SHARE ROW EXCLUSIVE lock on usuarios for an
-- instant (catalog only, no scan): presence.run_ddl waits at most 500 ms at
-- a time for it (longer while an autovacuum runs, so that Postgres cancels
-- it) and retries, so that the app's writes are never held behind a long
-- transaction. Created and enabled ALWAYS in one attempt.
do $$
begin
  perform presence.run_ddl($ddl$
    create or replace trigger usuarios_log_replica_rows
      after insert or update or delete on public.usuarios
      for each row
      when (pg_catalog.current_setting('session_replication_role')
            operator(pg_catalog.=) 'replica')
      execute function presence.log_usuarios_row_changes();
    alter table public.usuarios enable always trigger usuarios_log_replica_rows
  $ddl$);
end
$$;
