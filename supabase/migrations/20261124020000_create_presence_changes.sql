-- The change log the presence function's changes-since cursor reads: for
-- every usuarios row ever inserted, updated or deleted, the top-level
-- transaction id (xid8) of its last write. Whoever writes (presence-ping,
-- the app's own SQL or rpc(), a SAVEPOINT or EXCEPTION block, another role,
-- a nightly job), the triggers below stamp it.
--
-- Reading (docs/api.md, "How the cursor works"), as PgQ (SkyTools) reads
-- its event tables: a cursor carries the snapshot S of the answer that
-- issued it; a write committed since is one whose txid S could not see,
-- that is txid >= xmax(S) or txid in xip(S). Both are index lookups on
-- txid, so a poll costs what changed, whatever other transactions are open
-- and for how long, and nothing reads pg_stat_activity.
--
-- One row per user, not per write: the last writer of a row is the one the
-- reader needs (a row's writes are serialised by its row lock, so if any
-- write committed after S, the last one visible now did too). The table
-- stays as large as the number of ids ever written; rows of deleted users
-- tell watchers to drop them, and may be pruned once older than an hour
-- (the longest a cursor lives):
--   delete from presence.changes c where not exists
--     (select 1 from public.usuarios u where u.id = c.user_id)
--   and c.logged_at < now() - interval '1 hour';
--
-- Adoption (docs/adoption.md): the triggers add no column, constraint or
-- lock to usuarios and refuse no write; they cost one upsert per written
-- row (docs/performance.md, "Reading presence").
create schema if not exists presence;

-- Created once, in a block: CREATE INDEX IF NOT EXISTS would take its lock
-- on presence.changes before finding the index there, and every write of
-- usuarios writes presence.changes.
do $$
begin
  if pg_catalog.to_regclass('presence.changes') is not null then
    return;
  end if;
  create table presence.changes (
    user_id bigint primary key,
    txid xid8 not null,
    logged_at timestamptz not null default now()
  );
  create index changes_txid_idx on presence.changes (txid);
  comment on table presence.changes is
    'Change log of public.usuarios for the presence function''s changes-since cursor: the top-level transaction id of the last write of each row id (insert, update or delete). Written by triggers only.';
  comment on column presence.changes.user_id is
    'usuarios.id written; -9223372036854775808 stands for "the whole table" (a TRUNCATE): every watcher starts over.';
  comment on column presence.changes.txid is
    'pg_current_xact_id() of the writing transaction: the top-level id, also for writes made in a subtransaction.';
  revoke all on presence.changes from public, anon, authenticated;
  grant select on presence.changes to service_role, postgres;
end
$$;

-- Security definer: the writing role (the app's, authenticated through the
-- Data API, a job's) needs no right on the presence schema, and its write is
-- never refused for the log's sake. Fixed search_path; no EXECUTE for anyone
-- but the owner (a trigger function is not checked for EXECUTE when it
-- fires, and cannot be called as an rpc()).
create or replace function presence.log_usuarios_changes()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  if tg_op = 'TRUNCATE' then
    insert into presence.changes as c (user_id, txid)
    values (-9223372036854775808, pg_catalog.pg_current_xact_id())
    on conflict (user_id) do update
      set txid = excluded.txid, logged_at = pg_catalog.now();
  elsif tg_op = 'INSERT' then
    insert into presence.changes as c (user_id, txid)
    select distinct n.id, pg_catalog.pg_current_xact_id() from new_rows n
    on conflict (user_id) do update
      set txid = excluded.txid, logged_at = pg_catalog.now();
  elsif tg_op = 'UPDATE' then
    insert into presence.changes as c (user_id, txid)
    select i.id, pg_catalog.pg_current_xact_id()
    from (select n.id from new_rows n union select o.id from old_rows o) i
    on conflict (user_id) do update
      set txid = excluded.txid, logged_at = pg_catalog.now();
  else
    insert into presence.changes as c (user_id, txid)
    select distinct o.id, pg_catalog.pg_current_xact_id() from old_rows o
    on conflict (user_id) do update
      set txid = excluded.txid, logged_at = pg_catalog.now();
  end if;
  return null;
end;
$$;

comment on function presence.log_usuarios_changes() is
  'Trigger of public.usuarios: stamps each written row id in presence.changes with the top-level transaction id.';

revoke execute on function presence.log_usuarios_changes()
  from public, anon, authenticated;

-- Statement-level with transition tables: a bulk write ("everyone offline")
-- logs its rows in one statement, not one per row. Enabled ALWAYS, so that
-- replica-mode writers (session_replication_role = replica, as data-only
-- restores and logical replication apply run) are logged too.
--
-- Creating a trigger takes a SHARE ROW EXCLUSIVE lock on usuarios for an
-- instant (catalog only, no scan), which must wait for writes in flight;
-- while it waits, new writes would queue behind it. So it waits at most 2 s
-- per attempt, steps aside for a second, and tries again (10 attempts): a
-- busy table's writes are held up for at most 2 s at a time.
do $$
declare
  attempt integer;
begin
  for attempt in 1 .. 10 loop
    begin
      perform pg_catalog.set_config('lock_timeout', '2s', true);
      drop trigger if exists usuarios_log_insert on public.usuarios;
      create trigger usuarios_log_insert
        after insert on public.usuarios
        referencing new table as new_rows
        for each statement execute function presence.log_usuarios_changes();
      drop trigger if exists usuarios_log_update on public.usuarios;
      create trigger usuarios_log_update
        after update on public.usuarios
        referencing old table as old_rows new table as new_rows
        for each statement execute function presence.log_usuarios_changes();
      drop trigger if exists usuarios_log_delete on public.usuarios;
      create trigger usuarios_log_delete
        after delete on public.usuarios
        referencing old table as old_rows
        for each statement execute function presence.log_usuarios_changes();
      drop trigger if exists usuarios_log_truncate on public.usuarios;
      create trigger usuarios_log_truncate
        after truncate on public.usuarios
        for each statement execute function presence.log_usuarios_changes();
      alter table public.usuarios
        enable always trigger usuarios_log_insert,
        enable always trigger usuarios_log_update,
        enable always trigger usuarios_log_delete,
        enable always trigger usuarios_log_truncate;
      perform pg_catalog.set_config('lock_timeout', '0', true);
      return;
    exception when lock_not_available then
      raise notice 'public.usuarios is busy (attempt % of 10): trying again in 1 s', attempt;
      perform pg_catalog.pg_sleep(1);
    end;
  end loop;
  raise exception 'public.usuarios stayed locked by other transactions: the presence change-log triggers were not created. Run supabase db push again when the table is quieter.'
    using errcode = '55P03';
end
$$;
