-- Index on ultimo_acceso of public.usuarios, built without blocking the table's
-- writes: CONCURRENTLY, the first statement of its own file (the Supabase
-- CLI sends a file as one pipeline, and only a pipeline's first statement
-- may run outside a transaction). Unnamed, so that a build that failed
-- before (an INVALID index) is never taken for done; presence.settle_index
-- then drops invalid and redundant copies (a table this project created
-- already has its index) and names the one kept usuarios_ultimo_acceso_idx.
-- A failure leaves this file unapplied: the next push builds again.
create index concurrently on public.usuarios (ultimo_acceso);

select presence.settle_index(
  'public.usuarios'::regclass,
  'ultimo_acceso',
  'usuarios_ultimo_acceso_idx',
  'usuarios_ultimo_acceso_idx',
  'Changes-since reads of the presence function: ranges of ultimo_acceso.'
);
