-- The first comment on usuarios.rol said a row matched by correo grants
-- administrator rights; only a row linked by auth_user_id does
-- (docs/security.md "Administrator rights"). Replaced only where it is still
-- that text: an owner's own comment stays.
do $$
declare
  _num smallint;
begin
  select a.attnum into _num
  from pg_attribute a
  where a.attrelid = to_regclass('public.usuarios')
    and a.attname = 'rol'
    and a.attnum > 0
    and not a.attisdropped;
  if _num is not null and col_description('public.usuarios'::regclass, _num)
    = 'Role; administrador, admin, superadmin and super-admin grant administrator rights when the row is matched by auth_user_id or correo.'
  then
    comment on column public.usuarios.rol is
      'Role; administrador, admin, superadmin and super-admin grant administrator rights only on a row linked to the caller by auth_user_id, never on a row matched by correo or nombre_usuario.';
  end if;
end
$$;
