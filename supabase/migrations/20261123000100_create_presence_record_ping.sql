-- presence-ping's match-and-update as one database function, so that the hot
-- path is one short statement per ping. PL/pgSQL caches the plans of its
-- static statements per server connection whatever the client does, which
-- also holds through Supabase's transaction pooler, where the functions
-- cannot use named prepared statements: the planner no longer sees a large
-- statement on every ping.
--
-- The schema is not exposed by the Data API (supabase/config.toml exposes
-- public and graphql_public only), and execution is granted to the service
-- connection alone: nobody reaches this through PostgREST.
create schema if not exists presence;

comment on schema presence is
  'presence-ping''s database functions. Not exposed through the Data API; used by the functions over their direct connection.';

revoke all on schema presence from public;
grant usage on schema presence to service_role;

-- p_session_id set (the fast path, a token verified locally): the session
-- must exist and be unexpired, its user neither banned nor deleted, and the
-- email matched is read from auth.users here; otherwise session_ok is false
-- and nothing is written. p_session_id null (Auth described the identity):
-- p_email is the email as Auth reported it, and auth.* is not read at all,
-- so this path works where the auth schema cannot be read.
--
-- Every rule of docs/api.md "presence-ping" is kept: precedence auth_user_id >
-- correo > nombre_usuario = email > nombre_usuario = local part (the last one
-- only for the domains in p_username_domains, or all with '*'), lower() on
-- both sides, the lowest id per strategy, a row linked to another identity
-- never matched by email or username, the time from the database clock
-- truncated to milliseconds, last_manual_logout_at set by 'offline'.
-- p_min_write_interval_s > 0 reads instead of writing a repeat of the
-- stored state within that many seconds.
--
-- The optional columns (auth_user_id, last_manual_logout_at) are looked up
-- in pg_attribute on each call, and one of several static statements is
-- chosen: static statements keep their cached plans, where EXECUTE would
-- plan on every call. A statement for a column dropped in the meantime is
-- never run, so a cached plan never refers to a missing column.
-- Legacy shapes (integer ids, varchar, timestamp without time zone, no
-- unique indexes) are read through assignments, which cast. The function
-- runs in UTC: a `timestamp without time zone` column then holds UTC, as
-- the inline statement writes it (`at time zone 'UTC'`), whatever the
-- caller's TimeZone.
create or replace function presence.record_ping(
  p_user_id uuid,
  p_session_id uuid,
  p_email text,
  p_state text,
  p_username_domains text[],
  p_min_write_interval_s integer,
  out session_ok boolean,
  out id bigint,
  out ultimo_acceso timestamptz,
  out presence_state text
)
language plpgsql
volatile
security invoker
set search_path = ''
set timezone = 'UTC'
as $$
declare
  v_email text;
  v_local text;
  v_has_link boolean;
  v_has_logout boolean;
  v_id bigint;
  v_now timestamptz := pg_catalog.date_trunc('milliseconds', pg_catalog.now());
  v_skip_after timestamptz;
begin
  if p_state is null or p_state not in ('online', 'offline') then
    raise exception 'presence.record_ping: state must be online or offline'
      using errcode = '22023';
  end if;

  if p_session_id is not null then
    select pg_catalog.lower(au.email::text) into v_email
    from auth.sessions s
    join auth.users au on au.id = s.user_id
    where s.id = p_session_id
      and s.user_id = p_user_id
      and au.deleted_at is null
      and (au.banned_until is null or au.banned_until <= pg_catalog.now())
      and (s.not_after is null or s.not_after > pg_catalog.now());
    if not found then
      session_ok := false;
      return;
    end if;
  else
    v_email := pg_catalog.lower(p_email);
  end if;
  session_ok := true;

  select coalesce(bool_or(a.attname = 'auth_user_id'), false),
         coalesce(bool_or(a.attname = 'last_manual_logout_at'), false)
    into v_has_link, v_has_logout
  from pg_catalog.pg_attribute a
  where a.attrelid = 'public.usuarios'::pg_catalog.regclass
    and a.attname in ('auth_user_id', 'last_manual_logout_at')
    and a.attnum > 0
    and not a.attisdropped;

  -- The part before the last @, where the rules allow the fourth strategy
  -- for this email's domain; null otherwise (and then it matches nothing).
  if v_email is not null
     and ('*' = any (p_username_domains)
          or pg_catalog.substring(v_email, '@([^@]*)$') = any (p_username_domains)) then
    v_local := pg_catalog.substring(v_email, '^(.+)@[^@]*$');
  end if;

  -- First strategy that finds a row wins; each is an index lookup.
  if v_has_link then
    select u.id into v_id from public.usuarios u
      where u.auth_user_id = p_user_id
      order by u.id limit 1;
    if v_id is null then
      select u.id into v_id from public.usuarios u
        where pg_catalog.lower(u.correo) = v_email
          and (u.auth_user_id is null or u.auth_user_id = p_user_id)
        order by u.id limit 1;
    end if;
    if v_id is null then
      select u.id into v_id from public.usuarios u
        where pg_catalog.lower(u.nombre_usuario) = v_email
          and (u.auth_user_id is null or u.auth_user_id = p_user_id)
        order by u.id limit 1;
    end if;
    if v_id is null and v_local is not null then
      select u.id into v_id from public.usuarios u
        where pg_catalog.lower(u.nombre_usuario) = v_local
          and (u.auth_user_id is null or u.auth_user_id = p_user_id)
        order by u.id limit 1;
    end if;
  else
    select u.id into v_id from public.usuarios u
      where pg_catalog.lower(u.correo) = v_email
      order by u.id limit 1;
    if v_id is null then
      select u.id into v_id from public.usuarios u
        where pg_catalog.lower(u.nombre_usuario) = v_email
        order by u.id limit 1;
    end if;
    if v_id is null and v_local is not null then
      select u.id into v_id from public.usuarios u
        where pg_catalog.lower(u.nombre_usuario) = v_local
        order by u.id limit 1;
    end if;
  end if;

  if v_id is null then
    return;
  end if;

  -- With the optional setting, a repeat of the stored state newer than this
  -- is read instead of written. Without it, a time no row can be newer than.
  v_skip_after := case
    when p_min_write_interval_s > 0
      then pg_catalog.now() - pg_catalog.make_interval(secs => p_min_write_interval_s)
    else 'infinity'::timestamptz
  end;

  -- The update re-checks the link: a row linked to another identity since
  -- the lookup above (read committed re-evaluates the condition on the
  -- newest row version) is left alone.
  if v_has_link and v_has_logout and p_state = 'offline' then
    update public.usuarios u
      set ultimo_acceso = v_now, presence_state = p_state,
          last_manual_logout_at = v_now
      where u.id = v_id
        and (u.auth_user_id is null or u.auth_user_id = p_user_id)
        and not (u.presence_state = p_state
                 and u.ultimo_acceso is not null
                 and u.ultimo_acceso > v_skip_after)
      returning u.id, u.ultimo_acceso, u.presence_state
      into id, ultimo_acceso, presence_state;
  elsif v_has_link then
    update public.usuarios u
      set ultimo_acceso = v_now, presence_state = p_state
      where u.id = v_id
        and (u.auth_user_id is null or u.auth_user_id = p_user_id)
        and not (u.presence_state = p_state
                 and u.ultimo_acceso is not null
                 and u.ultimo_acceso > v_skip_after)
      returning u.id, u.ultimo_acceso, u.presence_state
      into id, ultimo_acceso, presence_state;
  elsif v_has_logout and p_state = 'offline' then
    update public.usuarios u
      set ultimo_acceso = v_now, presence_state = p_state,
          last_manual_logout_at = v_now
      where u.id = v_id
        and not (u.presence_state = p_state
                 and u.ultimo_acceso is not null
                 and u.ultimo_acceso > v_skip_after)
      returning u.id, u.ultimo_acceso, u.presence_state
      into id, ultimo_acceso, presence_state;
  else
    update public.usuarios u
      set ultimo_acceso = v_now, presence_state = p_state
      where u.id = v_id
        and not (u.presence_state = p_state
                 and u.ultimo_acceso is not null
                 and u.ultimo_acceso > v_skip_after)
      returning u.id, u.ultimo_acceso, u.presence_state
      into id, ultimo_acceso, presence_state;
  end if;

  -- Not written: a fresh repeat of the stored state (answered as stored),
  -- or a row deleted or linked elsewhere since the lookup (no row).
  if not found and p_min_write_interval_s > 0 then
    if v_has_link then
      select u.id, u.ultimo_acceso, u.presence_state
        into id, ultimo_acceso, presence_state
        from public.usuarios u
        where u.id = v_id
          and (u.auth_user_id is null or u.auth_user_id = p_user_id);
    else
      select u.id, u.ultimo_acceso, u.presence_state
        into id, ultimo_acceso, presence_state
        from public.usuarios u
        where u.id = v_id;
    end if;
  end if;
end;
$$;

comment on function presence.record_ping(uuid, uuid, text, text, text[], integer) is
  'presence-ping: finds the identity''s usuarios row by the project''s matching rules and sets its presence; with a session id, first proves the session live and the user neither banned nor deleted. Returns session_ok and the row (id null when none matched).';

revoke execute on function presence.record_ping(uuid, uuid, text, text, text[], integer)
  from public, anon, authenticated;
grant execute on function presence.record_ping(uuid, uuid, text, text, text[], integer)
  to service_role, postgres;
