-- presence.rights_writable_by() sees every way the Data API roles could
-- write the columns rights are read from, not only the table and the views
-- right over it.
--
-- The first version (20261125000000) read the grants of public.usuarios and
-- of the owner-rights views that select rol, auth_user_id or correo from it
-- directly, with a table-level privilege test. A standard user could still
-- make herself an administrator, while it answered '{}':
--   - through a column grant on such a view
--     (grant update (nombre_usuario, rol) on a view), which a table-level
--     test does not see;
--   - through a view over such a view: on a hosted project the default
--     privileges grant every new view in public to anon and authenticated,
--     so a second view built on the first brings back the write the
--     operator took away from the first;
--   - through a table that inherits usuarios, or a partition of it, whose
--     rows are read as usuarios rows;
--   - through a table usuarios inherits from, an update of which reaches
--     usuarios rows with that table's grants and row level security;
--   - through a rule of another relation whose action writes them (a rule
--     acts with its relation owner's rights).
--
-- Now it follows all of these, in presence.rights_write_paths(), which
-- also says where (the relation and the way); rights_writable_by() names
-- the roles of those paths. A view counts when it and every view between it
-- and the table run with their owners' rights (a security_invoker view on
-- the way has what is under it checked as the session's role), it can be
-- written (by itself, or through INSTEAD OF triggers or rules:
-- pg_relation_is_updatable), and the role may update or insert any of its
-- columns. A view over such a view counts whatever columns it takes: the
-- catalog records which columns a view reads, not which of its own columns
-- each becomes. A view that cannot be written (a join, an aggregate) no
-- longer counts, whatever its grants.
-- Still not seen: what a trigger or a security definer function of the
-- app's own writes (docs/security.md says so).
create or replace function presence.rights_write_paths()
returns table (role text, relation text, way text)
language sql
stable
security invoker
set search_path = ''
as $$
  with recursive
  -- usuarios and the tables whose rows are read as its rows: inheritance
  -- children and partitions, and theirs in turn.
  below(oid) as (
    select 'public.usuarios'::pg_catalog.regclass::pg_catalog.oid
    union
    select i.inhrelid
    from pg_catalog.pg_inherits i join below b on i.inhparent = b.oid
  ),
  -- The tables an update of which reaches usuarios rows: its parents, and
  -- theirs in turn.
  above(oid) as (
    select i.inhparent
    from pg_catalog.pg_inherits i
    where i.inhrelid = 'public.usuarios'::pg_catalog.regclass
    union
    select i.inhparent
    from pg_catalog.pg_inherits i join above a on i.inhrelid = a.oid
  ),
  -- Their columns rights and links are read from (an inherited column
  -- keeps its name).
  watched(relid, attnum) as (
    select a.attrelid, a.attnum
    from (select oid from below union select oid from above) t
    join pg_catalog.pg_attribute a on a.attrelid = t.oid
    where a.attname in ('rol', 'auth_user_id', 'correo')
      and a.attnum > 0
      and not a.attisdropped
  ),
  -- Those columns, and every column of an owner-rights view that reads
  -- one of them or a column of such a view, and so on. A security_invoker
  -- view ends the chain: what is under it is checked as the session's role
  -- (whose own grants and policies the table arm below reads), even under
  -- an owner-rights view.
  reaching(relid, attnum) as (
    select relid, attnum from watched
    union
    select a.attrelid, a.attnum
    from reaching o
    join pg_catalog.pg_depend d
      on d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
     and d.refobjid = o.relid
     and d.refobjsubid = o.attnum
     and d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
    join pg_catalog.pg_rewrite rw on rw.oid = d.objid and rw.ev_type = '1'
    join pg_catalog.pg_class v on v.oid = rw.ev_class and v.relkind = 'v'
    join pg_catalog.pg_attribute a
      on a.attrelid = v.oid and a.attnum > 0 and not a.attisdropped
    where not coalesce((
        select x.option_value::boolean
        from pg_catalog.pg_options_to_table(v.reloptions) x
        where x.option_name = 'security_invoker'), false)
  ),
  roles as (
    select r.oid, r.rolname::text as name, r.rolbypassrls
    from pg_catalog.pg_roles r
    where r.rolname in ('anon', 'authenticated')
  )
  -- On one of the tables: a grant of the column, and row level security
  -- that lets it through.
  select r.name, c.oid::pg_catalog.regclass::text, 'table'
  from roles r
  cross join watched w
  join pg_catalog.pg_class c on c.oid = w.relid
  cross join (values ('UPDATE', 'w'), ('INSERT', 'a')) p(privilege, cmd)
  where pg_catalog.has_column_privilege(r.oid, c.oid, w.attnum, p.privilege)
    and (
      not c.relrowsecurity
      or r.rolbypassrls
      or exists (
        select 1 from pg_catalog.pg_policy pol
        where pol.polrelid = c.oid
          and pol.polpermissive
          and pol.polcmd in ('*', p.cmd)
          and (
            0::pg_catalog.oid = any (pol.polroles)
            or exists (
              select 1 from pg_catalog.unnest(pol.polroles) pr(oid)
              where pg_catalog.pg_has_role(r.oid, pr.oid, 'USAGE')
            )
          )
      )
    )
  union
  -- Through an owner-rights view over them that can be written and that
  -- the role may write (any column).
  select r.name, v.oid::pg_catalog.regclass::text, 'view'
  from roles r
  cross join (select distinct relid from reaching) o
  join pg_catalog.pg_class v on v.oid = o.relid and v.relkind = 'v'
  -- 4: UPDATE, 8: INSERT (bits of CmdType).
  where (pg_catalog.pg_relation_is_updatable(v.oid, true) & 12) <> 0
    and (pg_catalog.has_any_column_privilege(r.oid, v.oid, 'UPDATE')
         or pg_catalog.has_any_column_privilege(r.oid, v.oid, 'INSERT'))
  union
  -- Through a rule (not a view's own select) whose action writes or reads
  -- them, on a relation the role may write as the rule's event.
  select r.name, rw.ev_class::pg_catalog.regclass::text,
         'rule ' || rw.rulename::text
  from roles r
  cross join reaching o
  join pg_catalog.pg_depend d
    on d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
   and d.refobjid = o.relid
   and d.refobjsubid = o.attnum
   and d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
  join pg_catalog.pg_rewrite rw on rw.oid = d.objid and rw.ev_type <> '1'
  where case rw.ev_type
    when '2' then pg_catalog.has_any_column_privilege(r.oid, rw.ev_class, 'UPDATE')
    when '3' then pg_catalog.has_any_column_privilege(r.oid, rw.ev_class, 'INSERT')
    else pg_catalog.has_table_privilege(r.oid, rw.ev_class, 'DELETE')
  end
  order by 1, 2, 3
$$;

comment on function presence.rights_write_paths() is
  'Where anon or authenticated could write usuarios.rol, auth_user_id or correo: a table (usuarios, its inheritance children and parents) by grants and row level security, an owner-rights view over them at any depth, or a rule. presence.rights_writable_by() names their roles.';

-- The roles of rights_write_paths(): the one home of the rule is there.
create or replace function presence.rights_writable_by()
returns text[]
language sql
stable
security invoker
set search_path = ''
as $$
  select coalesce(pg_catalog.array_agg(distinct p.role order by p.role), '{}')
  from presence.rights_write_paths() p
$$;

comment on function presence.rights_writable_by() is
  'The Data API roles (anon, authenticated) that could write usuarios.rol, auth_user_id or correo (presence.rights_write_paths() says where); while it names one, rol grants no administrator rights.';

-- create or replace keeps the grants of 20261125000000 (execute for
-- service_role and postgres only); said again so that this file alone says
-- who may call either.
revoke execute on function presence.rights_write_paths()
  from public, anon, authenticated;
grant execute on function presence.rights_write_paths()
  to service_role, postgres;
revoke execute on function presence.rights_writable_by()
  from public, anon, authenticated;
grant execute on function presence.rights_writable_by()
  to service_role, postgres;

-- Said where a push through psql shows it (supabase db push does not print
-- a migration's warnings: the deploy steps run the check themselves).
do $$
declare
  _roles text[] := presence.rights_writable_by();
begin
  if _roles <> '{}' then
    raise warning 'public.usuarios: % can write rol, auth_user_id or correo through the Data API, so rol grants no administrator rights (ADMIN_EMAILS still does) until that write is taken away', pg_catalog.array_to_string(_roles, ' and ')
      using hint = 'docs/security.md, "Administrator rights", has the statements.';
  end if;
end
$$;
