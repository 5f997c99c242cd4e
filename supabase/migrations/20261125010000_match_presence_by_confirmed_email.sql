-- presence.match_usuario matches by email (strategies 2 to 4: correo,
-- nombre_usuario = email, nombre_usuario = local part) only an email Auth
-- has confirmed. Before, an account holding an address it never proved
-- reached the unlinked row of that address: with confirmations on, Supabase
-- Auth's identity unlink promotes an IdP's unverified email to the account's
-- email, nulls email_confirmed_at and keeps the session
-- (models/user.go UpdateUserEmailFromIdentities). Under autoconfirm nothing
-- changes: Auth confirms every address at sign-up.
--
-- The rule has one home, match_usuario, which takes whether the email is
-- confirmed as a parameter of its own (a new signature; the old one stays,
-- at the end, as a wrapper that reads the confirmation from auth.users, for
-- functions deployed before this migration). Its callers feed it:
-- presence.reader and the fast path of presence.record_ping with what
-- presence.live_session reads from auth.users; the functions' findUsuario
-- with what Auth said (_shared/match_user.ts). The slow path of record_ping
-- (p_session_id null) takes p_email from Auth only when Auth confirmed it,
-- null otherwise (presence-ping's handler).
--
-- reader and record_ping keep their signatures, grants and settings; their
-- lock_timeout is in their definitions (CREATE OR REPLACE resets what an
-- ALTER FUNCTION gave, 20261124030000). Everything else in them is as in
-- 20261124020100 and 20261124060000.

create or replace function presence.match_usuario(
  p_user_id uuid,
  p_email text,
  p_email_confirmed boolean,
  p_username_domains text[],
  out id bigint,
  out level integer
)
language plpgsql
stable
security invoker
set search_path = ''
as $$
declare
  -- An email Auth has not confirmed matches nothing (header).
  v_email text := case when p_email_confirmed then p_email end;
  v_local text;
  v_has_link boolean;
  v_id bigint;
begin
  select coalesce(bool_or(a.attname = 'auth_user_id'), false)
    into v_has_link
  from pg_catalog.pg_attribute a
  where a.attrelid = 'public.usuarios'::pg_catalog.regclass
    and a.attname = 'auth_user_id'
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
    level := 1;
    select u.id into v_id from public.usuarios u
      where u.auth_user_id = p_user_id
      order by u.id limit 1;
    if v_id is null then
      level := 2;
      select u.id into v_id from public.usuarios u
        where pg_catalog.lower(u.correo) = v_email
          and (u.auth_user_id is null or u.auth_user_id = p_user_id)
        order by u.id limit 1;
    end if;
    if v_id is null then
      level := 3;
      select u.id into v_id from public.usuarios u
        where pg_catalog.lower(u.nombre_usuario) = v_email
          and (u.auth_user_id is null or u.auth_user_id = p_user_id)
        order by u.id limit 1;
    end if;
    if v_id is null and v_local is not null then
      level := 4;
      select u.id into v_id from public.usuarios u
        where pg_catalog.lower(u.nombre_usuario) = v_local
          and (u.auth_user_id is null or u.auth_user_id = p_user_id)
        order by u.id limit 1;
    end if;
  else
    level := 2;
    select u.id into v_id from public.usuarios u
      where pg_catalog.lower(u.correo) = v_email
      order by u.id limit 1;
    if v_id is null then
      level := 3;
      select u.id into v_id from public.usuarios u
        where pg_catalog.lower(u.nombre_usuario) = v_email
        order by u.id limit 1;
    end if;
    if v_id is null and v_local is not null then
      level := 4;
      select u.id into v_id from public.usuarios u
        where pg_catalog.lower(u.nombre_usuario) = v_local
        order by u.id limit 1;
    end if;
  end if;

  id := v_id;
  if v_id is null then
    level := null;
  end if;
end;
$$;

comment on function presence.match_usuario(uuid, text, boolean, text[]) is
  'The usuarios row of an identity by the project''s matching rules (auth_user_id > correo > nombre_usuario = email > nombre_usuario = local part for listed domains; the email ones only for an email Auth has confirmed), and which rule matched (1 to 4).';

revoke execute on function presence.match_usuario(uuid, text, boolean, text[])
  from public, anon, authenticated;
grant execute on function presence.match_usuario(uuid, text, boolean, text[])
  to service_role, postgres;

create or replace function presence.reader(
  p_user_id uuid,
  p_session_id uuid,
  p_username_domains text[],
  out session_ok boolean,
  out email text,
  out email_confirmed boolean,
  out id bigint,
  out rol text,
  out level integer
)
language plpgsql
stable
security invoker
set search_path = ''
set lock_timeout = '1s'
as $$
declare
  v_id bigint;
  v_level integer;
begin
  select ls.live, ls.email, ls.email_confirmed
    into session_ok, email, email_confirmed
  from presence.live_session(p_user_id, p_session_id) ls;
  if not session_ok then
    email := null;
    return;
  end if;
  select m.id, m.level into v_id, v_level
  from presence.match_usuario(p_user_id, email, email_confirmed,
                              p_username_domains) m;
  if v_id is not null then
    select u.rol::text into rol from public.usuarios u where u.id = v_id;
    id := v_id;
    level := v_level;
  end if;
end;
$$;

comment on function presence.reader(uuid, uuid, text[]) is
  'presence: proves a locally verified session live (user neither banned nor deleted) and finds the reader''s usuarios row and role.';

revoke execute on function presence.reader(uuid, uuid, text[])
  from public, anon, authenticated;
grant execute on function presence.reader(uuid, uuid, text[])
  to service_role, postgres;

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

  select m.id into v_id
  from presence.match_usuario(p_user_id, v_email, v_email_confirmed,
                              p_username_domains) m;

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
  'presence-ping: finds the identity''s usuarios row by the project''s matching rules and sets its presence; with a session id, first proves the session live and the user neither banned nor deleted (and matches by email only if auth.users has it confirmed); without, p_email is Auth''s email, given only when confirmed. ultimo_acceso never moves backwards and an offline older than the stored online is not written, unless the stored time is more than a minute ahead of the database clock (not a ping''s). Returns session_ok and the row as stored (id null when none matched).';

revoke execute on function presence.record_ping(uuid, uuid, text, text, text[], integer)
  from public, anon, authenticated;
grant execute on function presence.record_ping(uuid, uuid, text, text, text[], integer)
  to service_role, postgres;

-- The earlier signature stays for the functions deployed before this
-- migration: `supabase db push` comes before `supabase functions deploy`,
-- and in between their findUsuario (the presence read's and auth-sync's
-- lookup of the caller) still calls it. Those callers do not say whether
-- the email is confirmed: it is read from auth.users, the account's own
-- email confirmed. Nothing of this repository calls it any more; a later
-- migration may drop it.
create or replace function presence.match_usuario(
  p_user_id uuid,
  p_email text,
  p_username_domains text[],
  out id bigint,
  out level integer
)
language sql
stable
security invoker
set search_path = ''
as $$
  select m.id, m.level
  from presence.match_usuario(
    p_user_id,
    p_email,
    exists (
      select 1 from auth.users au
      where au.id = p_user_id
        and au.email_confirmed_at is not null
        and pg_catalog.lower(au.email::text) = p_email
    ),
    p_username_domains
  ) m
$$;

comment on function presence.match_usuario(uuid, text, text[]) is
  'For functions deployed before 20261125010000 only: presence.match_usuario with the email counted as confirmed when auth.users holds it confirmed for that account.';

revoke execute on function presence.match_usuario(uuid, text, text[])
  from public, anon, authenticated;
grant execute on function presence.match_usuario(uuid, text, text[])
  to service_role, postgres;
