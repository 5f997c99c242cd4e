-- What the usuarios row held, before the call, in the columns an intent's
-- row_set writes. A later call that settles a dead call's intent writes
-- only the columns that still hold these values: a column the app (or
-- anyone) changed since keeps its newer value (auth-sync/intent.ts).
-- A nullable column without a default is a catalog-only change: no
-- rewrite, no scan; the lock it needs is brief, and waiting for it is
-- bounded.
set lock_timeout = '5s';

alter table public.auth_sync_intents
  add column if not exists row_before jsonb;

comment on column public.auth_sync_intents.row_before is
  'The row''s values, before the call, of the columns in row_set; settling writes a column only while it still holds its value here. Null on intents written before this column: settling then writes row_set whole.';
