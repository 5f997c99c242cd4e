/**
 * The legacy `usuarios` of an app that predates this project (serial id,
 * varchar columns, a naive `timestamp`, nullable role and state, no
 * `auth_user_id`): the shape the adoption and hosted-database tests start
 * from.
 *
 * @module
 */

/** `CREATE TABLE public.usuarios` in the legacy shape, with no rows. */
export const LEGACY_USUARIOS = `
  create table public.usuarios (
    id serial primary key,
    correo varchar(255),
    nombre_usuario varchar(100),
    rol varchar(50),
    ultimo_acceso timestamp,
    presence_state varchar(20)
  );`;
