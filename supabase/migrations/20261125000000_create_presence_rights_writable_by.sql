-- presence.rights_writable_by(): which Data API roles (anon, authenticated)
-- could write a column that administrator rights or a row's owner are read
-- from.
--
-- A row's rol grants administrator rights when the row is linked to the
-- caller by auth_user_id (docs/security.md "Administrator rights"), and
-- auth-sync links an unlinked row to the account that owns its correo.
-- Whoever can write rol, auth_user_id (pointing an administrator's row at
-- themselves) or correo (putting their own address on an unlinked
-- administrator's row for the next sync) through the Data API can make
-- themselves an administrator of auth-sync, and from there reset any
-- account's password. That is so where the grants let anon or
-- authenticated update or insert one of those columns, on the table or
-- through a view that runs with its owner's rights (not security_invoker),
-- and, on the table, row level security lets them: RLS off (many adopted
-- legacy tables; tables created before Supabase stopped granting new public
-- tables to the Data API roles keep those grants), or a permissive policy
-- for UPDATE, INSERT or ALL that applies to them (the common "users update
-- their own row" policy is one).
--
-- The check reads grants, RLS and which policies exist, not what their
-- expressions, restrictive policies or triggers allow: only column grants
-- that leave the three columns out count as protection. The functions read
-- it before a rol grants rights, and grant none while it names a role: rol
-- then makes no administrator until the operator takes the write away;
-- ADMIN_EMAILS still does. Writes through a security definer function of
-- the app's own are not seen here.
create or replace function presence.rights_writable_by()
returns text[]
language sql
stable
security invoker
set search_path = ''
as $$
  select coalesce(pg_catalog.array_agg(r.rolname::text order by r.rolname), '{}')
  from pg_catalog.pg_roles r
  cross join pg_catalog.pg_class c
  where c.oid = 'public.usuarios'::pg_catalog.regclass
    and r.rolname in ('anon', 'authenticated')
    and (
      -- On the table: a grant of the column, and RLS that lets it through.
      exists (
        select 1
        from pg_catalog.pg_attribute a
        cross join (values ('UPDATE', 'w'), ('INSERT', 'a')) p(privilege, cmd)
        where a.attrelid = c.oid
          and a.attname in ('rol', 'auth_user_id', 'correo')
          and a.attnum > 0
          and not a.attisdropped
          and pg_catalog.has_column_privilege(r.oid, c.oid, a.attnum, p.privilege)
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
      )
      -- Through a view over those columns that runs with its owner's
      -- rights, writable by the role.
      or exists (
        select 1
        from pg_catalog.pg_depend d
        join pg_catalog.pg_rewrite rw on rw.oid = d.objid
        join pg_catalog.pg_class v on v.oid = rw.ev_class and v.relkind = 'v'
        join pg_catalog.pg_attribute a
          on a.attrelid = d.refobjid and a.attnum = d.refobjsubid
        where d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
          and d.refobjid = c.oid
          and a.attname in ('rol', 'auth_user_id', 'correo')
          and not coalesce((
            select o.option_value::boolean
            from pg_catalog.pg_options_to_table(v.reloptions) o
            where o.option_name = 'security_invoker'), false)
          and (pg_catalog.has_table_privilege(r.oid, v.oid, 'UPDATE')
               or pg_catalog.has_table_privilege(r.oid, v.oid, 'INSERT'))
      )
    )
$$;

comment on function presence.rights_writable_by() is
  'The Data API roles (anon, authenticated) that could write usuarios.rol, auth_user_id or correo (grants, row level security, owner-rights views); while it names one, rol grants no administrator rights.';

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
