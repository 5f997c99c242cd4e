-- auth-sync's own tables are the functions' alone (they connect as
-- postgres; service_role keeps what it has), as presence.changes is.
--
-- On a hosted Supabase project every table and sequence postgres creates in
-- public is granted, by default privileges set up with the project, to anon
-- and authenticated as well (supabase/postgres,
-- migrations/db/init-scripts/00000000000000-initial-schema.sql: "alter
-- default privileges in schema public grant all on tables to postgres, anon,
-- authenticated, service_role"), on projects made before Supabase stopped
-- doing so for new tables (2026-05-30 for new projects, 2026-10-30 for all;
-- tables made before keep their grants) and where "Default privileges for
-- new entities" is turned on. Row level security without a policy keeps
-- their rows from those roles, but not TRUNCATE, and the grants put the
-- tables in the Data API's schema. Taken away here; on a database without
-- those default privileges this changes nothing.
revoke all on table public.auth_sync_audit, public.auth_sync_leases,
  public.auth_sync_intents
  from public, anon, authenticated;

do $$
declare
  _seq text := pg_catalog.pg_get_serial_sequence('public.auth_sync_audit', 'id');
begin
  if _seq is not null then
    execute pg_catalog.format(
      'revoke all on sequence %s from public, anon, authenticated', _seq);
  end if;
end
$$;
