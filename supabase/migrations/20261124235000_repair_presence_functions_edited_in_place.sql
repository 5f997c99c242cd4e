-- Brings a database pushed on 2026-11-24 between 02:42 and 03:20 UTC up to
-- what the earlier migrations create now. Two of them were changed after
-- they had been applied (a migration already recorded is never run again):
--
-- - 20261124020100 gained presence.live_session, the session proof that
--   presence.record_ping (since 20261124060000) and presence.reader call.
--   Without it every locally verified ping failed with 42883 and went
--   through Auth instead, for good.
-- - 20261124030000 first set lock_timeout on every presence function, then
--   only on record_ping and reader: the change-log trigger function runs
--   inside the app's own writes, whose lock waits are the app's to bound.
--
-- On any other database this changes nothing. From now on a change to an
-- applied migration's objects is a new migration.

-- As 20261124020100 defines it.
do $$
begin
  if to_regprocedure('presence.live_session(uuid, uuid)') is null then
    create function presence.live_session(
      p_user_id uuid,
      p_session_id uuid,
      out live boolean,
      out email text,
      out email_confirmed boolean
    )
    language plpgsql
    stable
    security invoker
    set search_path = ''
    as $f$
    begin
      select pg_catalog.lower(au.email::text), au.email_confirmed_at is not null
        into email, email_confirmed
      from auth.sessions s
      join auth.users au on au.id = s.user_id
      where s.id = p_session_id
        and s.user_id = p_user_id
        and au.deleted_at is null
        and (au.banned_until is null or au.banned_until <= pg_catalog.now())
        and (s.not_after is null or s.not_after > pg_catalog.now());
      live := found;
    end;
    $f$;
    comment on function presence.live_session(uuid, uuid) is
      'Whether a locally verified token''s session is live (unexpired, user neither banned nor deleted), and the user''s email now.';
    revoke execute on function presence.live_session(uuid, uuid)
      from public, anon, authenticated;
    grant execute on function presence.live_session(uuid, uuid)
      to service_role, postgres;
  end if;
end
$$;

-- No lock_timeout on the two other functions the first 20261124030000 gave
-- one (every presence function there was then): as it sets it now, only
-- record_ping and reader have it (and run_ddl, of 20261124030100, its own).
do $$
declare
  _fn regprocedure;
begin
  for _fn in
    select p.oid::regprocedure from pg_proc p
    where p.pronamespace = 'presence'::regnamespace and p.prokind = 'f'
      and p.proname in ('log_usuarios_changes', 'match_usuario')
      and exists (
        select 1 from pg_catalog.unnest(p.proconfig) c
        where c like 'lock\_timeout=%'
      )
  loop
    execute format('alter function %s reset lock_timeout', _fn);
  end loop;
end
$$;
