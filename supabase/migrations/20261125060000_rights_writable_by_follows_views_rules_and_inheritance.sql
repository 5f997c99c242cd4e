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
--   - through the column a generated rol is computed from, or a default of
--     rol the caller controls (the JWT's user_metadata), which an insert of
--     any column writes;
--   - through a view that INSTEAD OF triggers or rules make writable for
--     some commands only (pg_column_is_updatable asks for UPDATE and DELETE
--     both), or a view over one;
--   - through a rule of usuarios itself, fired by a write through a view.
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
-- a relation (usuarios too) with a rule whose action touches those
-- columns, and a table whose rol defaults to anything but a constant,
-- count with all their columns. A view counts when the role may update or
-- insert such a column of it (or insert any column, for one with a default
-- of the view's) and the view can be written by that command
-- (pg_relation_is_updatable). The view definitions are read once each, with
-- string functions: 1,000 views of 34 columns over usuarios cost about half
-- a second, 1,000 more over those about one (PostgreSQL 15, 2-core VM).
-- Still not seen: what a trigger or a security definer function of the
-- app's own, or a foreign table, writes (docs/security.md says so).
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
  family(oid) as (select oid from below union select oid from above),
  -- Their columns rights and links are read from (an inherited column
  -- keeps its name).
  named(relid, attnum) as (
    select a.attrelid, a.attnum
    from family t
    join pg_catalog.pg_attribute a on a.attrelid = t.oid
    where a.attname in ('rol', 'auth_user_id', 'correo')
      and a.attnum > 0
      and not a.attisdropped
  ),
  -- Those columns; the columns a generated one of them is computed from
  -- (writing those writes it); and every column of a table whose rol
  -- defaults to anything but a constant (the caller's JWT, say): an insert
  -- of any column writes it.
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
    union
    select a.attrelid, a.attnum
    from named n
    join pg_catalog.pg_attribute r
      on r.attrelid = n.relid and r.attnum = n.attnum
     and r.attname = 'rol' and r.attgenerated = ''
    join pg_catalog.pg_attrdef ad on ad.adrelid = n.relid and ad.adnum = n.attnum
    join pg_catalog.pg_attribute a
      on a.attrelid = n.relid and a.attnum > 0 and not a.attisdropped
    where ad.adbin::text !~ '^\{CONST '
  ),
  -- Those tables, and the relations with a rule (a view's select, or
  -- another rule) over one of them, or over such a relation, and so on:
  -- the only ones whose rules are read below.
  over(oid) as (
    select oid from family
    union
    select rw.ev_class
    from over o
    join pg_catalog.pg_depend d
      on d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
     and d.refobjid = o.oid
     and d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
    join pg_catalog.pg_rewrite rw on rw.oid = d.objid
  ),
  -- Each of their views' output columns (resno) and its source table and
  -- column, as the node text of the view's _RETURN rule writes its target
  -- entries: "... :resno 3 :resname rol :ressortgroupref 0 :resorigtbl
  -- 16894 :resorigcol 4 :resjunk false}". Read with string functions, once
  -- per view (a regular expression over the whole text costs about a
  -- millisecond per view); a name's spaces come escaped with a backslash,
  -- so " :ressortgroupref " is never inside one. An entry of a subquery of
  -- the view counts at its own position, erring on the safe side.
  entries(rule, resno, srcrel, srccol, junk) as (
    select rw.oid, pg_catalog.split_part(t.piece, ' ', 1)::pg_catalog.int2,
           f.f[4]::pg_catalog.oid, f.f[6]::pg_catalog.int2,
           f.f[8] like 'true%'
    from (select distinct oid from over) o
    join pg_catalog.pg_rewrite rw on rw.ev_class = o.oid and rw.ev_type = '1'
    cross join pg_catalog.unnest(
      (pg_catalog.string_to_array(rw.ev_action::text, ' :resno '))[2:]) t(piece)
    cross join lateral (
      -- The fields take under 100 characters.
      select pg_catalog.string_to_array(pg_catalog.substr(t.piece,
        pg_catalog.strpos(t.piece, ' :ressortgroupref ') + 1, 100), ' ') as f
    ) f
    where pg_catalog.strpos(t.piece, ' :ressortgroupref ') > 0
      and pg_catalog.split_part(t.piece, ' ', 1) ~ '^[0-9]{1,4}$'
      and f.f[3] = ':resorigtbl' and f.f[4] ~ '^[0-9]{1,10}$'
      and f.f[5] = ':resorigcol' and f.f[6] ~ '^[0-9]{1,4}$'
      and f.f[7] = ':resjunk'
  ),
  counted(rule, n) as (
    select e.rule, pg_catalog.count(*) from entries e group by e.rule
  ),
  -- Views whose writes INSTEAD OF triggers or rules make, or whose
  -- definition could not be read whole (a target entry the expression
  -- above does not match: a node format it does not know): all their
  -- columns count.
  opaque(oid) as (
    select o.oid
    from (select distinct oid from over) o
    join pg_catalog.pg_class v on v.oid = o.oid and v.relkind = 'v'
    join pg_catalog.pg_rewrite rw on rw.ev_class = v.oid and rw.ev_type = '1'
    left join counted n on n.rule = rw.oid
    where exists (
        select 1 from pg_catalog.pg_trigger t
        -- 64: TRIGGER_TYPE_INSTEAD.
        where t.tgrelid = v.oid and (t.tgtype & 64) <> 0)
      or exists (
        select 1 from pg_catalog.pg_rewrite r2
        where r2.ev_class = v.oid and r2.ev_type <> '1')
      or coalesce(n.n, 0) <> pg_catalog.cardinality(
              pg_catalog.string_to_array(rw.ev_action::text, '{TARGETENTRY ')) - 1
  ),
  -- security_invoker views: what is under one is checked as the session's
  -- role (whose own grants and policies the table arm reads), even under
  -- an owner-rights view, so a chain ends there.
  invoker(oid) as (
    select c.oid
    from (select distinct oid from over) o
    join pg_catalog.pg_class c on c.oid = o.oid and c.relkind = 'v'
    cross join pg_catalog.pg_options_to_table(c.reloptions) x
    where x.option_name = 'security_invoker' and x.option_value::boolean
  ),
  -- Which column a write of another reaches: a plain column of an
  -- owner-rights view from its source; every column of an opaque
  -- owner-rights view from each column it reads; every column of a
  -- relation with a rule from each column the rule's action touches (the
  -- rule fires whoever writes that relation, by whichever path).
  edges(srcrel, srccol, dstrel, dstcol) as (
    select e.srcrel, e.srccol, rw.ev_class, e.resno
    from entries e
    join pg_catalog.pg_rewrite rw on rw.oid = e.rule
    where not e.junk
      and not exists (select 1 from invoker i where i.oid = rw.ev_class)
    union
    select d.refobjid, d.refobjsubid::pg_catalog.int2, a.attrelid, a.attnum
    from (
      select rw.oid, rw.ev_class
      from (select distinct oid from over) o
      join pg_catalog.pg_rewrite rw on rw.ev_class = o.oid
      left join opaque q on q.oid = rw.ev_class
      left join invoker i on i.oid = rw.ev_class
      where rw.ev_type <> '1' or (q.oid is not null and i.oid is null)
    ) rw
    join pg_catalog.pg_depend d
      on d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
     and d.objid = rw.oid
     and d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
     and d.refobjsubid > 0
    join pg_catalog.pg_attribute a
      on a.attrelid = rw.ev_class and a.attnum > 0 and not a.attisdropped
  ),
  -- Those columns, and the columns their writes reach, and so on.
  reaching(relid, attnum) as (
    select relid, attnum from watched
    union
    select e.dstrel, e.dstcol
    from reaching o
    join edges e on e.srcrel = o.relid and e.srccol = o.attnum
  ),
  roles as (
    select r.oid, r.rolname::text as name, r.rolbypassrls
    from pg_catalog.pg_roles r
    where r.rolname in ('anon', 'authenticated')
  ),
  -- UPDATE and INSERT, with their bits in pg_relation_is_updatable (of
  -- CmdType) and their policy command.
  writes(privilege, bit, cmd) as (
    values ('UPDATE', 4, 'w'), ('INSERT', 8, 'a')
  )
  -- On one of the tables: a grant of the column, and row level security
  -- that lets it through (off, not forced on a table the role owns or
  -- inherits the owner of, a bypass, or a permissive policy for it).
  select r.name, c.oid::pg_catalog.regclass::text, 'table'
  from roles r
  cross join watched w
  join pg_catalog.pg_class c on c.oid = w.relid
  cross join writes p
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
  -- Through an owner-rights view: a column of it that reaches them (a
  -- plain column whose source is one of them, or any column of an opaque
  -- view), where the view can be written by that command (by itself, or by
  -- INSTEAD OF triggers or rules, its own or those of a view under it: not
  -- pg_column_is_updatable, which asks for UPDATE and DELETE both) and the
  -- role may; or, for an insert, such a column with a default of the
  -- view's, which an insert of any column writes.
  select r.name, v.oid::pg_catalog.regclass::text, 'view'
  from (
    select o.relid, pg_catalog.array_agg(o.attnum) as attnums
    from reaching o group by o.relid
  ) rv
  join pg_catalog.pg_class v on v.oid = rv.relid and v.relkind = 'v'
  cross join lateral (
    select pg_catalog.pg_relation_is_updatable(v.oid, true) as events
  ) u
  cross join roles r
  cross join writes p
  where (u.events & p.bit) <> 0
    and exists (
      select 1 from pg_catalog.unnest(rv.attnums) c(attnum)
      where pg_catalog.has_column_privilege(r.oid, v.oid, c.attnum, p.privilege)
         or (p.privilege = 'INSERT'
             and pg_catalog.has_any_column_privilege(r.oid, v.oid, 'INSERT')
             and exists (
               select 1 from pg_catalog.pg_attrdef ad
               where ad.adrelid = v.oid and ad.adnum = c.attnum)))
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
