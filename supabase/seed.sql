-- Local fixture. The matching identities (same ids and emails) are created in
-- Supabase Auth by the local stack at start (local/fixture.ts); against
-- `supabase start`, run `deno task seed:identities` after `supabase db reset`.
-- Every administrator row is linked to its account by auth_user_id: rol
-- grants rights only on a linked row.
insert into public.usuarios (correo, nombre_usuario, auth_user_id, rol)
values
  -- matched by auth_user_id
  ('ana@example.com', 'ana', '00000000-0000-4000-8000-000000000001', 'usuario'),
  -- matched by correo (not linked yet)
  ('bruno@example.com', 'bruno', null, 'usuario'),
  -- matched by nombre_usuario = full email
  (null, 'carla@example.com', null, 'usuario'),
  -- reachable only by username: nombre_usuario = part before the @
  (null, 'diego', null, 'usuario'),
  -- administrator by rol, linked
  ('admin@example.com', 'admin', '00000000-0000-4000-8000-000000000005', 'administrador'),
  -- administrator by rol, linked; its username is what an outsider's
  -- soporte@elsewhere.test would borrow if USERNAME_MATCH_DOMAINS allowed it
  ('soporte@example.com', 'soporte', '00000000-0000-4000-8000-000000000009', 'admin')
on conflict do nothing;
