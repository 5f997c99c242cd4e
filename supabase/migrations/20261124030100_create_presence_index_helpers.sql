-- Helpers of the migrations that build indexes on a busy table without
-- blocking its writes (docs/adoption.md, "Online-safe migrations").
--
-- CREATE INDEX CONCURRENTLY cannot run in a function or a transaction, and
-- the Supabase CLI sends each migration file as one pipeline: such a
-- statement must be the first of its file, and cannot be made conditional.
-- Each index file therefore builds an unnamed index concurrently (a name
-- Postgres picks, never one a failed build left behind), then calls
-- presence.settle_index, which keeps one valid index and drops the rest.

-- Runs one catalog-only DDL statement (a DROP INDEX, a RENAME, an ALTER that
-- rewrites nothing) waiting at most 500 ms for its lock at a time, and
-- retries with backoff: a statement queued behind a long transaction would
-- otherwise hold every later write on the table behind it.
create or replace function presence.run_ddl(p_statement text)
returns void
language plpgsql
security invoker
set search_path = ''
set lock_timeout = '500ms'
as $$
declare
  _attempt int := 0;
begin
  loop
    begin
      execute p_statement;
      return;
    exception when lock_not_available then
      _attempt := _attempt + 1;
      if _attempt >= 20 then
        raise exception 'gave up after % attempts waiting for a lock: %',
          _attempt, p_statement
          using errcode = 'lock_not_available',
                hint = 'A long transaction holds the table; run it again when it ends.';
      end if;
      perform pg_sleep(least(0.05 * 2 ^ _attempt, 2) * (0.5 + random() / 2));
    end;
  end loop;
end
$$;

comment on function presence.run_ddl(text) is
  'Migrations: a catalog-only DDL statement with lock_timeout 500 ms, retried with backoff.';

-- After "create index concurrently on <table> (<key>)": among the table's
-- single-key btree indexes on p_key, drops each INVALID one this project
-- made (named p_name, or p_auto followed by digits: a build that failed or
-- was cancelled), keeps one valid index (a unique one first, then p_name,
-- then the owner's own), drops this project's other valid ones as
-- redundant, and names the kept one p_name if it is this project's. The
-- owner's own indexes are never dropped. An index counts as on p_key only
-- in the key column's collation, the one the functions' lookups use: an
-- owner's index COLLATE "C" (for prefix searches) cannot serve them, and
-- this project's copy is then kept beside it. (Changed after this file was
-- first applied: settle_index runs only while the index migrations apply,
-- so a database that applied them never calls it again.)
create or replace function presence.settle_index(
  p_table regclass,
  p_key text,
  p_name text,
  p_auto text,
  p_comment text
)
returns void
language plpgsql
security invoker
set search_path = ''
as $$
declare
  _schema text;
  _collation oid;
  _keep oid;
  _ours boolean;
  _r record;
begin
  select n.nspname into _schema
  from pg_class c join pg_namespace n on n.oid = c.relnamespace
  where c.oid = p_table;
  -- The column p_key reads (`lower(correo)`: correo), and its collation.
  select a.attcollation into _collation
  from pg_attribute a
  where a.attrelid = p_table
    and a.attname = substring(p_key from '([a-z_][a-z0-9_]*)\)*$');
  for _r in
    select i.indexrelid, c.relname::text as name, i.indisvalid as valid,
           c.relname = p_name or c.relname ~ ('^' || p_auto || '[0-9]*$')
             as ours
    from pg_index i
    join pg_class c on c.oid = i.indexrelid
    join pg_am a on a.oid = c.relam
    where i.indrelid = p_table and i.indnatts = 1 and i.indpred is null
      and a.amname = 'btree'
      -- varchar columns read lower((correo)::text): compare without
      -- parentheses and casts.
      and regexp_replace(pg_get_indexdef(i.indexrelid, 1, true), '[()]|::text', '', 'g')
        = regexp_replace(p_key, '[()]|::text', '', 'g')
      and i.indcollation[0] = coalesce(_collation, 0)
    order by i.indisvalid desc, i.indisunique desc, c.relname = p_name desc,
             (c.relname = p_name or c.relname ~ ('^' || p_auto || '[0-9]*$')),
             c.relname
  loop
    if not _r.valid and _r.ours then
      perform presence.run_ddl(format('drop index %s', _r.indexrelid::regclass));
      raise notice '%: dropped the invalid index % (left by a build that did not finish).',
        p_table, _r.name;
    elsif not _r.valid then
      raise notice '%: the index % on % is INVALID and not this project''s; left as it is.',
        p_table, _r.name, p_key;
    elsif _keep is null then
      _keep := _r.indexrelid;
      _ours := _r.ours;
    elsif _r.ours then
      perform presence.run_ddl(format('drop index %s', _r.indexrelid::regclass));
    end if;
  end loop;
  if _keep is null then
    raise exception '%: no valid index on % after the concurrent build', p_table, p_key;
  end if;
  if _ours then
    if (select relname from pg_class where oid = _keep) <> p_name then
      perform presence.run_ddl(format('alter index %s rename to %I',
        _keep::regclass, p_name));
    end if;
    execute format('comment on index %I.%I is %L', _schema, p_name, p_comment);
  end if;
end
$$;

comment on function presence.settle_index(regclass, text, text, text, text) is
  'Migrations: after an unnamed CREATE INDEX CONCURRENTLY, drops invalid and redundant copies and names the index kept.';

-- For the migrations' role alone: not the Data API's, not the functions'.
revoke all on function presence.run_ddl(text)
  from public, anon, authenticated, service_role;
revoke all on function presence.settle_index(regclass, text, text, text, text)
  from public, anon, authenticated, service_role;
