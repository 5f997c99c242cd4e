-- The presence function's changes-since reads are ranges of ultimo_acceso
-- (pings a previous answer could not see, and users whose age crossed the
-- away or offline threshold since), so each poll reads only what changed
-- instead of the whole table.
--
-- Cost, measured and accepted (README "Reading presence"): an indexed
-- column changes on every ping, so pings are no longer HOT updates; each
-- writes one entry in every index of usuarios.
create index if not exists usuarios_ultimo_acceso_idx
  on public.usuarios (ultimo_acceso);

comment on index public.usuarios_ultimo_acceso_idx is
  'Changes-since reads of the presence function: ranges of ultimo_acceso.';
