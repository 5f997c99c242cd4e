-- presence.record_ping: a stored ultimo_acceso ahead of the database clock
-- no longer wins. The two order rules of 20261124020100 (ultimo_acceso never
-- moves backwards; an offline older than the online stored is not written)
-- trusted every stored time. A time written ahead of now by something else
-- than a ping (the app's own now() into a naive timestamp column in a
-- database whose TimeZone is east of UTC, a browser's fast clock through
-- the Data API) then held the user online: offline pings answered 200 and
-- wrote nothing, and ultimo_acceso stopped moving until that time passed.
--
-- A stored time more than a minute ahead of this ping's is taken for such a
-- write: the ping stores its own time and its state, whatever the stored
-- state. A minute is far longer than any ping's transaction (statement
-- timeout 3 s by default), which is all a concurrent ping's lead can be;
-- within it the two rules hold as before.
--
-- The rest of the function is as in 20261124020100, with the lock timeout
-- of 20261124030000 in its definition (CREATE OR REPLACE resets the
-- settings an ALTER FUNCTION gave it).
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
set lock_timeout = '1s'
as $$
declare
  v_email text;
  v_has_link boolean;
  v_has_logout boolean;
  v_id bigint;
  v_now timestamptz := pg_catalog.date_trunc('milliseconds', pg_catalog.now());
  -- The ping's time as the column stores it (a timestamp(0) column rounds,
  -- possibly up): comparisons with stored times are then like with like.
  v_now_stored public.usuarios.ultimo_acceso%type := v_now;
  v_skip_after timestamptz;
  -- Stored times past this were not written by a ping (header).
  v_ahead public.usuarios.ultimo_acceso%type := v_now + interval '1 minute';
begin
  if p_state is null or p_state not in ('online', 'offline') then
    raise exception 'presence.record_ping: state must be online or offline'
      using errcode = '22023';
  end if;

  if p_session_id is not null then
    select ls.live, ls.email into session_ok, v_email
    from presence.live_session(p_user_id, p_session_id) ls;
    if not session_ok then
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

  select m.id into v_id
  from presence.match_usuario(p_user_id, v_email, p_username_domains) m;

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
      set ultimo_acceso = case when u.ultimo_acceso > v_ahead then v_now_stored
                            else greatest(u.ultimo_acceso, v_now_stored) end, presence_state = p_state,
          last_manual_logout_at = v_now
      where u.id = v_id
        and (u.auth_user_id is null or u.auth_user_id = p_user_id)
        and not (u.presence_state = p_state
                 and u.ultimo_acceso is not null
                 and u.ultimo_acceso > v_skip_after
                 and u.ultimo_acceso <= v_ahead)
        and not (p_state = 'offline' and u.presence_state = 'online'
                 and u.ultimo_acceso > v_now_stored
                 and u.ultimo_acceso <= v_ahead)
      returning u.id, u.ultimo_acceso, u.presence_state
      into id, ultimo_acceso, presence_state;
  elsif v_has_link then
    update public.usuarios u
      set ultimo_acceso = case when u.ultimo_acceso > v_ahead then v_now_stored
                            else greatest(u.ultimo_acceso, v_now_stored) end, presence_state = p_state
      where u.id = v_id
        and (u.auth_user_id is null or u.auth_user_id = p_user_id)
        and not (u.presence_state = p_state
                 and u.ultimo_acceso is not null
                 and u.ultimo_acceso > v_skip_after
                 and u.ultimo_acceso <= v_ahead)
        and not (p_state = 'offline' and u.presence_state = 'online'
                 and u.ultimo_acceso > v_now_stored
                 and u.ultimo_acceso <= v_ahead)
      returning u.id, u.ultimo_acceso, u.presence_state
      into id, ultimo_acceso, presence_state;
  elsif v_has_logout and p_state = 'offline' then
    update public.usuarios u
      set ultimo_acceso = case when u.ultimo_acceso > v_ahead then v_now_stored
                            else greatest(u.ultimo_acceso, v_now_stored) end, presence_state = p_state,
          last_manual_logout_at = v_now
      where u.id = v_id
        and not (u.presence_state = p_state
                 and u.ultimo_acceso is not null
                 and u.ultimo_acceso > v_skip_after
                 and u.ultimo_acceso <= v_ahead)
        and not (p_state = 'offline' and u.presence_state = 'online'
                 and u.ultimo_acceso > v_now_stored
                 and u.ultimo_acceso <= v_ahead)
      returning u.id, u.ultimo_acceso, u.presence_state
      into id, ultimo_acceso, presence_state;
  else
    update public.usuarios u
      set ultimo_acceso = case when u.ultimo_acceso > v_ahead then v_now_stored
                            else greatest(u.ultimo_acceso, v_now_stored) end, presence_state = p_state
      where u.id = v_id
        and not (u.presence_state = p_state
                 and u.ultimo_acceso is not null
                 and u.ultimo_acceso > v_skip_after
                 and u.ultimo_acceso <= v_ahead)
        and not (p_state = 'offline' and u.presence_state = 'online'
                 and u.ultimo_acceso > v_now_stored
                 and u.ultimo_acceso <= v_ahead)
      returning u.id, u.ultimo_acceso, u.presence_state
      into id, ultimo_acceso, presence_state;
  end if;

  -- Not written: a fresh repeat of the stored state, or an offline older
  -- than the online stored (both answered as stored); or a row deleted or
  -- linked elsewhere since the lookup (no row).
  if not found then
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
  'presence-ping: finds the identity''s usuarios row by the project''s matching rules and sets its presence; with a session id, first proves the session live and the user neither banned nor deleted. ultimo_acceso never moves backwards and an offline older than the stored online is not written, unless the stored time is more than a minute ahead of the database clock (not a ping''s). Returns session_ok and the row as stored (id null when none matched).';

revoke execute on function presence.record_ping(uuid, uuid, text, text, text[], integer)
  from public, anon, authenticated;
grant execute on function presence.record_ping(uuid, uuid, text, text, text[], integer)
  to service_role, postgres;
