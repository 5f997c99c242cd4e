-- presence.log_usuarios_changes (20261124020000) logged every written row's
-- id, a null one included: on a table adopted with an id that may be null
-- (no primary key), every write of such a row (an insert without an id, a
-- bulk "everyone offline" touching one) failed on presence.changes' key.
-- 20261124020000 now refuses such a table; for one adopted before, a row
-- without an id is not logged (no API answer can name it) and its write
-- passes as it did before the triggers. Otherwise as 20261124020000.
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
    where n.id is not null
    on conflict (user_id) do update
      set txid = excluded.txid, logged_at = pg_catalog.now();
  elsif tg_op = 'UPDATE' then
    insert into presence.changes as c (user_id, txid)
    select i.id, pg_catalog.pg_current_xact_id()
    from (select n.id from new_rows n union select o.id from old_rows o) i
    where i.id is not null
    on conflict (user_id) do update
      set txid = excluded.txid, logged_at = pg_catalog.now();
  else
    insert into presence.changes as c (user_id, txid)
    select distinct o.id, pg_catalog.pg_current_xact_id() from old_rows o
    where o.id is not null
    on conflict (user_id) do update
      set txid = excluded.txid, logged_at = pg_catalog.now();
  end if;
  return null;
end;
$$;
