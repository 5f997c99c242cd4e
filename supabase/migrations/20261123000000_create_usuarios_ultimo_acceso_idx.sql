-- The presence function's changes-since reads are ranges of ultimo_acceso
-- (pings a previous answer could not see, and users whose age crossed the
-- away or offline threshold since), so each poll reads only what changed
-- instead of the whole table.
--
-- Cost, measured and accepted (docs/performance.md): an indexed column
-- changes on every ping, so pings are no longer HOT updates; each writes one
-- entry in every index of usuarios.
--
-- Built here only on an empty table (a fresh install: nothing to scan, no
-- write waits). A table with rows gets it from
-- 20261124030400_index_usuarios_ultimo_acceso.sql, built CONCURRENTLY.
do $$
begin
  if to_regclass('public.usuarios_ultimo_acceso_idx') is null
    and not exists (select 1 from public.usuarios) then
    create index usuarios_ultimo_acceso_idx on public.usuarios (ultimo_acceso);
    comment on index public.usuarios_ultimo_acceso_idx is
      'Changes-since reads of the presence function: ranges of ultimo_acceso.';
  end if;
end
$$;
