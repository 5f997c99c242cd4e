-- anon and authenticated may not TRUNCATE public.usuarios, nor add triggers
-- to it or reference it from a foreign key of their own.
--
-- On a hosted project whose default privileges grant every table postgres
-- creates in public to the Data API roles (projects made before Supabase's
-- change of 2026-05-30, applied to all projects' new tables from
-- 2026-10-30; see 20261125043000), the usuarios the first migration creates
-- got ALL for them. Row level security without a policy keeps its rows from
-- them, but not TRUNCATE. select, insert, update and delete are left as they
-- are: on an adopted table the app's Data API readers and writers may rely on
-- them (row level security and the rights check, presence.rights_writable_by,
-- are what guard them), while the Data API itself never truncates, adds a
-- trigger or references a table, so nobody relies on these three.
--
-- A revoke of grants another role made is a no-op with a warning, never an
-- error (an adopted table's owner keeps what it granted).
revoke truncate, trigger, references on table public.usuarios
  from public, anon, authenticated;
