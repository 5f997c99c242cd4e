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
--     acts with its relation owner's rights), whether the role writes that
--     relation itself or through a view or another rule;
--   - as a member of the table's owner, whom row level security does not
--     hold;
--   - through the column a generated rol is computed from.
-- And it named views that only filter on those columns (an own-account
-- view, where auth_user_id = auth.uid()), through which no write can reach
-- them: on a hosted project such a view alone turned every rol
-- administrator off.
--
-- Now presence.rights_write_paths() follows all of these and says where
-- (the relation and the way); rights_writable_by() names the roles of those
-- paths. A view column counts when it is one of those columns, or a column
-- of such a view, as the view's own definition says (each output column's
-- source, resorigtbl and resorigcol of its _RETURN rule; a column named in
-- a subquery of the view's counts too, erring on the safe side), and every
-- view between it and the table runs with its owner's rights (a
-- security_invoker view on the way has what is under it checked as the
-- session's role). A view that INSTEAD OF triggers or rules make writable,
-- and a relation with a rule whose action touches those columns, count with
-- all their columns. A view counts when the role may update or insert such
-- a column of it and the view can write it (pg_column_is_updatable). Still
-- not seen: what a trigger or a security definer function of the app's own,
-- or a foreign table, writes (docs/security.md says so).
create or replace function presence.rights_write_paths()
returns table (role text, relation text, way text)
language sql
stable
security invoker
set search_path = ''
as $$
  with recursive
  -- A target entry of a view's query as the node text of its _RETURN rule
  -- writes it (resno, the source table and column, resjunk): a name's
  -- spaces, backslashes and brackets come escaped with a backslash.
  target_entry(re) as (
    select ':resno (\d+) :resname (?:[^ \\]|\\.)* :ressortgroupref \d+ :resorigtbl (\d+) :resorigcol (\d+) :resjunk (true|false)'::text
  ),
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
  named(relid, attnum) as (
    select a.attrelid, a.attnum
    from (select oid from below union select oid from above) t
    join pg_catalog.pg_attribute a on a.attrelid = t.oid
    where a.attname in ('rol', 'auth_user_id', 'correo')
      and a.attnum > 0
      and not a.attisdropped
  ),
  -- Those columns, and the columns a generated one of them is computed
  -- from: writing those writes it.
  watched(relid, attnum) as (
    select relid, attnum from named
    union
    select d.refobjid, d.refobjsubid::pg_catalog.int2
    from named n
    join pg_catalog.pg_attrdef ad on ad.adrelid = n.relid and ad.adnum = n.attnum
    join pg_catalog.pg_depend d
      on d.classid = 'pg_catalog.pg_attrdef'::pg_catalog.regclass
     and d.objid = ad.oid
     and d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
     and d.refobjid = n.relid
     and d.refobjsubid > 0
     and d.refobjsubid <> n.attnum
  ),
  -- Those columns, and, in turn, each column of an owner-rights view whose
  -- source is one of them, and every column of a relation with a rule
  -- whose action touches one of them (or of a view INSTEAD OF triggers or
  -- rules make writable, or whose definition could not be read).
  reaching(relid, attnum) as (
    select relid, attnum from watched
    union
    select x.relid, x.attnum
    from reaching o
    join pg_catalog.pg_depend d
      on d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
     and d.refobjid = o.relid
     and d.refobjsubid = o.attnum
     and d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
    join pg_catalog.pg_rewrite rw on rw.oid = d.objid
    join pg_catalog.pg_class v on v.oid = rw.ev_class
    cross join lateral (
      -- The view's output columns whose source is o (resno).
      select v.oid as relid, m[1]::pg_catalog.int2 as attnum
      from target_entry te
      cross join pg_catalog.regexp_matches(rw.ev_action::text, te.re, 'g') m
      where rw.ev_type = '1'
        and m[4] = 'false'
        and m[2]::pg_catalog.oid = o.relid
        and m[3]::pg_catalog.int2 = o.attnum
      union
      select v.oid, a.attnum
      from pg_catalog.pg_attribute a
      where a.attrelid = v.oid and a.attnum > 0 and not a.attisdropped
        and (
          -- A rule of another relation: writing that relation fires it.
          -- (A rule of the table itself counts in the rule arm below.)
          (rw.ev_type <> '1' and rw.ev_class <> o.relid)
          -- A view whose writes INSTEAD OF triggers or rules make, or
          -- whose definition could not be read whole (a target entry the
          -- expression above does not match: a format it does not know).
          or (rw.ev_type = '1' and (
            exists (
              select 1 from pg_catalog.pg_trigger t
              -- 64: TRIGGER_TYPE_INSTEAD.
              where t.tgrelid = v.oid and (t.tgtype & 64) <> 0)
            or exists (
              select 1 from pg_catalog.pg_rewrite r2
              where r2.ev_class = v.oid and r2.ev_type <> '1')
            or (select pg_catalog.count(*)
                from target_entry te
                cross join pg_catalog.regexp_matches(rw.ev_action::text, te.re, 'g'))
               is distinct from
               (select pg_catalog.count(*)
                from pg_catalog.regexp_matches(rw.ev_action::text,
                  '\{TARGETENTRY ', 'g'))
            or rw.ev_action::text !~ '\{TARGETENTRY '))
        )
    ) x
    -- A security_invoker view ends the chain: what is under it is checked
    -- as the session's role, whose own grants and policies the table arm
    -- reads, even under an owner-rights view.
    where (rw.ev_type <> '1' and rw.ev_class <> o.relid)
       or (rw.ev_type = '1' and v.relkind = 'v' and not coalesce((
            select y.option_value::boolean
            from pg_catalog.pg_options_to_table(v.reloptions) y
            where y.option_name = 'security_invoker'), false))
  ),
  roles as (
    select r.oid, r.rolname::text as name, r.rolbypassrls
    from pg_catalog.pg_roles r
    where r.rolname in ('anon', 'authenticated')
  )
  -- On one of the tables: a grant of the column, and row level security
  -- that lets it through (off, not forced on a table the role owns or
  -- inherits the owner of, a bypass, or a permissive policy for it).
  select r.name, c.oid::pg_catalog.regclass::text, 'table'
  from roles r
  cross join watched w
  join pg_catalog.pg_class c on c.oid = w.relid
  cross join (values ('UPDATE', 'w'), ('INSERT', 'a')) p(privilege, cmd)
  where pg_catalog.has_column_privilege(r.oid, c.oid, w.attnum, p.privilege)
    and (
      not c.relrowsecurity
      or r.rolbypassrls
      or (not c.relforcerowsecurity
          and pg_catalog.pg_has_role(r.oid, c.relowner, 'USAGE'))
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
  -- Through an owner-rights view: a column of it that reaches them, which
  -- the view can write and the role may update or insert.
  select r.name, v.oid::pg_catalog.regclass::text, 'view'
  from roles r
  cross join reaching o
  join pg_catalog.pg_class v on v.oid = o.relid and v.relkind = 'v'
  where pg_catalog.pg_column_is_updatable(v.oid, o.attnum, true)
    and (pg_catalog.has_column_privilege(r.oid, v.oid, o.attnum, 'UPDATE')
         or pg_catalog.has_column_privilege(r.oid, v.oid, o.attnum, 'INSERT'))
  union
  -- Through a rule (not a view's own select) whose action touches them, on
  -- a relation the role may write as the rule's event.
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
