-- presence.record_ping writes only a row that is still the caller's when
-- it writes it. It found the row in one statement (presence.match_usuario)
-- and updated it by id in the next, re-checking only the link: a row the
-- app moved to another person in between (a new correo or nombre_usuario,
-- or unlinked as it moved) got the old account's ping, and the ping's
-- answer carried that row's id (field review ping H1; on a table without
-- auth_user_id there was no re-check at all).
--
-- Now a row matched by an email (levels 2 to 4) is locked and matched again
-- by match_usuario, the rules' one home, before the update; a row matched
-- by its link (level 1) must still be linked to the caller when the update
-- re-evaluates it (read committed's re-check of the newest row version),
-- and so must the row read back when nothing was written. The linked path,
-- the common one, costs no more statements than before.
--
-- Signature, grants and settings as in 20261125010000 (CREATE OR REPLACE
-- keeps the grants and resets the settings, restated here); the rest of
-- the body as there.

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
  v_email_confirmed boolean;
  v_has_link boolean;
  v_has_logout boolean;
  v_id bigint;
  v_level integer;
  v_again bigint;
  -- Matched by its link (level 1): only a row still linked to the caller.
  -- By an email (levels 2 to 4): the row is locked and matched again.
  v_linked_only boolean;
  v_now timestamptz := pg_catalog.date_trunc('milliseconds', pg_catalog.now());
  -- The ping's time as the column stores it (a timestamp(0) column rounds,
  -- possibly up): comparisons with stored times are then like with like.
  v_now_stored public.usuarios.ultimo_acceso%type := v_now;
  v_skip_after timestamptz;
  -- Stored times past this were not written by a ping (20261124060000).
  v_ahead public.usuarios.ultimo_acceso%type := v_now + interval '1 minute';
begin
  if p_state is null or p_state not in ('online', 'offline') then
    raise exception 'presence.record_ping: state must be online or offline'
      using errcode = '22023';
  end if;

  if p_session_id is not null then
    select ls.live, ls.email, ls.email_confirmed
      into session_ok, v_email, v_email_confirmed
    from presence.live_session(p_user_id, p_session_id) ls;
    if not session_ok then
      return;
    end if;
  else
    -- Auth's email, given only when Auth confirmed it (header).
    v_email := pg_catalog.lower(p_email);
    v_email_confirmed := true;
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

  select m.id, m.level into v_id, v_level
  from presence.match_usuario(p_user_id, v_email, v_email_confirmed,
                              p_username_domains) m;

  -- A row matched by an email may be moved to another person (the app
  -- changes its correo or nombre_usuario, or unlinks it) between this
  -- statement and the update: read committed would then re-check only
  -- u.id on the newest version and write the other person's row. So it is
  -- locked, then matched again by the same rules on a fresh snapshot, which
  -- sees every change committed before the lock was granted: the same row
  -- is the caller's, and the lock keeps it so until this ping commits. A
  -- row that moved meanwhile is followed to the caller's new match, a few
  -- times at most; one that never settles is answered as none.
  for attempt in 1..3 loop
    exit when v_id is null or v_level = 1;
    perform 1 from public.usuarios u where u.id = v_id for update;
    select m.id, m.level into v_again, v_level
    from presence.match_usuario(p_user_id, v_email, v_email_confirmed,
                                p_username_domains) m;
    if v_again is not distinct from v_id then
      exit;
    end if;
    v_id := v_again;
    if attempt = 3 then
      v_id := null;
    end if;
  end loop;

  if v_id is null then
    return;
  end if;
  v_linked_only := v_level = 1;

  -- With the optional setting, a repeat of the stored state newer than this
  -- is read instead of written. Without it, a time no row can be newer than.
  v_skip_after := case
    when p_min_write_interval_s > 0
      then pg_catalog.now() - pg_catalog.make_interval(secs => p_min_write_interval_s)
    else 'infinity'::timestamptz
  end;

  -- The update re-checks the link: a row linked to another identity since
  -- the lookup above, or (matched by its link) unlinked since, is left
  -- alone (read committed re-evaluates the condition on the newest row
  -- version).
  if v_has_link and v_has_logout and p_state = 'offline' then
    update public.usuarios u
      set ultimo_acceso = case when u.ultimo_acceso > v_ahead then v_now_stored
                            else greatest(u.ultimo_acceso, v_now_stored) end, presence_state = p_state,
          last_manual_logout_at = v_now
      where u.id = v_id
        and (u.auth_user_id = p_user_id
             or (u.auth_user_id is null and not v_linked_only))
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
        and (u.auth_user_id = p_user_id
             or (u.auth_user_id is null and not v_linked_only))
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
          and (u.auth_user_id = p_user_id
             or (u.auth_user_id is null and not v_linked_only));
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
  'presence-ping: finds the identity''s usuarios row by the project''s matching rules and sets its presence; with a session id, first proves the session live and the user neither banned nor deleted (and matches by email only if auth.users has it confirmed); without, p_email is Auth''s email, given only when confirmed. ultimo_acceso never moves backwards and an offline older than the stored online is not written, unless the stored time is more than a minute ahead of the database clock (not a ping''s). Returns session_ok and the row as stored (id null when none matched).';

revoke execute on function presence.record_ping(uuid, uuid, text, text, text[], integer)
  from public, anon, authenticated;
grant execute on function presence.record_ping(uuid, uuid, text, text, text[], integer)
  to service_role, postgres;
