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
-- An adopted table is checked first, before anything here exists: the
-- triggers below log every written id as a bigint, so on a table whose id
-- is not an integer (a uuid profile table) they would fail every write the
-- app makes, sign-ups through a handle_new_user trigger included; on one
-- whose id is not the key (nullable, or repeated: no primary key), writes
-- of a null id fail and writes of rows sharing an id wait on each other
-- (this check added after the file was first applied: a database that
-- passed it has its tables as they were). Columns
-- the functions read or write in a type they cannot use (an enum state, a
-- text auth_user_id or ultimo_acceso) would fail every ping instead. Either
-- way the push stops here, naming each column and how to retype it; the
-- table, and every write the app makes to it, stay as they were.
do $$
declare
  _problems text[] := '{}';
  _hints text[] := '{}';
  _c record;
begin
  if pg_catalog.to_regclass('public.usuarios') is null then
    return;
  end if;
  for _c in
    select a.attname::text as name,
           pg_catalog.format_type(a.atttypid, a.atttypmod) as shown,
           b.oid as base, b.typcategory as category,
           -- The row's key: not null, and unique by a whole, valid index.
           a.attnotnull and exists (
             select 1 from pg_catalog.pg_index i
             where i.indrelid = a.attrelid and i.indisunique and i.indisvalid
               and i.indpred is null and i.indnatts = 1
               and i.indkey[0] = a.attnum
           ) as is_key
    from pg_catalog.pg_attribute a
    join pg_catalog.pg_type t on t.oid = a.atttypid
    -- A domain counts as the type it is over.
    join pg_catalog.pg_type b
      on b.oid = case when t.typtype = 'd' then t.typbasetype else t.oid end
    where a.attrelid = 'public.usuarios'::pg_catalog.regclass
      and a.attnum > 0 and not a.attisdropped
      and a.attname in ('id', 'auth_user_id', 'ultimo_acceso', 'presence_state')
    order by a.attnum
  loop
    if _c.name = 'id' and _c.base not in ('int2'::pg_catalog.regtype,
        'int4'::pg_catalog.regtype, 'int8'::pg_catalog.regtype) then
      _problems := pg_catalog.array_append(_problems, pg_catalog.format('id is %s, not an integer', _c.shown));
      _hints := pg_catalog.array_append(_hints, 'the functions need an integer id (smallint, integer or bigint): they log ids and answer them as numbers');
    elsif _c.name = 'id' and not _c.is_key then
      _problems := pg_catalog.array_append(_problems, 'id is not the rows'' key (it may be null, or repeat: no primary key or unique index on it)');
      _hints := pg_catalog.array_append(_hints, 'the change log keeps one entry per id, so a null id would refuse the app''s writes and a repeated one make them wait on each other: give each row an id of its own, then alter table public.usuarios add primary key (id)');
    elsif _c.name = 'auth_user_id' and _c.base <> 'uuid'::pg_catalog.regtype then
      _problems := pg_catalog.array_append(_problems, pg_catalog.format('auth_user_id is %s, not uuid', _c.shown));
      _hints := pg_catalog.array_append(_hints, 'alter table public.usuarios alter column auth_user_id type uuid using auth_user_id::uuid');
    elsif _c.name = 'ultimo_acceso' and _c.base not in (
        'timestamptz'::pg_catalog.regtype, 'timestamp'::pg_catalog.regtype) then
      _problems := pg_catalog.array_append(_problems, pg_catalog.format('ultimo_acceso is %s, not a timestamp', _c.shown));
      _hints := pg_catalog.array_append(_hints, 'alter table public.usuarios alter column ultimo_acceso type timestamptz using ultimo_acceso::timestamptz');
    elsif _c.name = 'presence_state' and _c.category <> 'S' then
      _problems := pg_catalog.array_append(_problems, pg_catalog.format('presence_state is %s, not text', _c.shown));
      _hints := pg_catalog.array_append(_hints, 'alter table public.usuarios alter column presence_state type text');
    end if;
  end loop;
  if pg_catalog.cardinality(_problems) > 0 then
    raise exception 'public.usuarios cannot be adopted as it is: %',
      pg_catalog.array_to_string(_problems, '; ')
      using errcode = '42804',
            hint = pg_catalog.array_to_string(_hints, '; ') ||
              '. Nothing was changed (docs/adoption.md, "Column types").';
  end if;
end
$$;

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
  raise exception 'public.usuarios stayed locked by other transactions: the presence change-log triggers were not created. Run supabase db push again (--remote for the linked project) when the table is quieter.'
    using errcode = '55P03';
end
$$;
