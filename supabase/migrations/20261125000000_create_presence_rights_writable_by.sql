-- presence.rights_writable_by(): which Data API roles (anon, authenticated)
-- could write a column that administrator rights are read from.
--
-- A row's rol grants administrator rights when the row is linked to the
-- caller by auth_user_id (docs/security.md "Administrator rights"). Whoever
-- can write rol, or auth_user_id (pointing an administrator's row at
-- themselves), through the Data API can make themselves an administrator
-- of auth-sync, and from there reset any account's password. That is so on
-- a table whose grants let anon or authenticated update or insert those
-- columns and whose row level security lets them: RLS off (many adopted
-- legacy tables; tables created before Supabase stopped granting new public
-- tables to the Data API roles keep those grants), or a permissive policy
-- for UPDATE, INSERT or ALL that applies to them (the common "users update
-- their own row" policy is one).
--
-- The functions read it before a rol grants rights, and grant none while it
-- names a role: rol then makes no administrator until the operator takes
-- the write away (column grants, docs/security.md has the statements);
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
    and exists (
      select 1
      from pg_catalog.pg_attribute a
      cross join (values ('UPDATE', 'w'), ('INSERT', 'a')) p(privilege, cmd)
      where a.attrelid = c.oid
        and a.attname in ('rol', 'auth_user_id')
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
                  where pg_catalog.pg_has_role(r.oid, pr.oid, 'MEMBER')
                )
              )
          )
        )
    )
$$;

comment on function presence.rights_writable_by() is
  'The Data API roles (anon, authenticated) that could write usuarios.rol or usuarios.auth_user_id (grants and row level security); while it names one, rol grants no administrator rights.';

revoke execute on function presence.rights_writable_by()
  from public, anon, authenticated;
grant execute on function presence.rights_writable_by()
  to service_role, postgres;

-- Said at push time too, where the operator is looking.
do $$
declare
  _roles text[] := presence.rights_writable_by();
begin
  if _roles <> '{}' then
    raise warning 'public.usuarios: % can write rol or auth_user_id through the Data API, so rol grants no administrator rights (ADMIN_EMAILS still does) until that write is taken away', pg_catalog.array_to_string(_roles, ' and ')
      using hint = 'Keep the table-level write from them and grant only the columns they may change, e.g. revoke insert, update on public.usuarios from anon, authenticated; grant update (nombre_usuario) on public.usuarios to authenticated; (docs/security.md, "Administrator rights").';
  end if;
end
$$;
