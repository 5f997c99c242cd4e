-- The part of Supabase Auth's `auth` schema that the local Auth stand-in
-- (local/auth) stores users and sessions in, and that the project's SQL reads
-- (auth.sessions, auth.users.banned_until / deleted_at, auth.uid()).
--
-- Names, column names and column types follow supabase/auth's migrations so
-- that the same queries work here and on a real Supabase database. Every
-- object is created only where it is missing: on a real Supabase database the
-- auth schema belongs to supabase_auth_admin and must be left untouched, which
-- is why each table (with its indexes) is created inside one guarded block
-- rather than with per-index `if not exists`.

do $$
begin
  if not exists (select 1 from pg_namespace where nspname = 'auth') then
    create schema auth;
    -- Supabase lets the API roles resolve auth.uid() and friends in RLS.
    grant usage on schema auth to anon, authenticated, service_role;
  end if;
end
$$;

do $$
begin
  if not exists (
    select 1 from pg_type t join pg_namespace n on n.oid = t.typnamespace
    where n.nspname = 'auth' and t.typname = 'aal_level'
  ) then
    create type auth.aal_level as enum ('aal1', 'aal2', 'aal3');
  end if;
end
$$;

do $$
begin
  if to_regclass('auth.users') is null then
    create table auth.users (
      instance_id uuid null,
      id uuid not null unique,
      aud varchar(255) null,
      "role" varchar(255) null,
      email varchar(255) null,
      encrypted_password varchar(255) null,
      email_confirmed_at timestamptz null,
      invited_at timestamptz null,
      confirmation_token varchar(255) null,
      confirmation_sent_at timestamptz null,
      recovery_token varchar(255) null,
      recovery_sent_at timestamptz null,
      email_change_token_new varchar(255) null,
      email_change varchar(255) null,
      email_change_sent_at timestamptz null,
      last_sign_in_at timestamptz null,
      raw_app_meta_data jsonb null,
      raw_user_meta_data jsonb null,
      is_super_admin bool null,
      created_at timestamptz null,
      updated_at timestamptz null,
      phone text null unique default null,
      phone_confirmed_at timestamptz null default null,
      phone_change text null default '',
      phone_change_token varchar(255) null default '',
      phone_change_sent_at timestamptz null default null,
      confirmed_at timestamptz generated always as (
        least(email_confirmed_at, phone_confirmed_at)
      ) stored,
      email_change_token_current varchar(255) null default '',
      email_change_confirm_status smallint default 0
        check (email_change_confirm_status >= 0 and email_change_confirm_status <= 2),
      banned_until timestamptz null,
      reauthentication_token varchar(255) null default '',
      reauthentication_sent_at timestamptz null default null,
      is_sso_user boolean not null default false,
      deleted_at timestamptz null,
      is_anonymous boolean not null default false,
      constraint users_pkey primary key (id)
    );
    create index users_instance_id_idx on auth.users using btree (instance_id);
    create index users_instance_id_email_idx
      on auth.users using btree (instance_id, lower(email));
    create unique index users_email_partial_key
      on auth.users (email) where (is_sso_user = false);
    create index users_is_anonymous_idx on auth.users using btree (is_anonymous);
  end if;
end
$$;

do $$
begin
  if to_regclass('auth.identities') is null then
    create table auth.identities (
      provider_id text not null,
      user_id uuid not null,
      identity_data jsonb not null,
      provider text not null,
      last_sign_in_at timestamptz null,
      created_at timestamptz null,
      updated_at timestamptz null,
      email text generated always as (lower(identity_data ->> 'email')) stored,
      id uuid not null default gen_random_uuid() primary key,
      constraint identities_provider_id_provider_unique unique (provider_id, provider),
      constraint identities_user_id_fkey foreign key (user_id)
        references auth.users (id) on delete cascade
    );
    create index identities_user_id_idx on auth.identities using btree (user_id);
    create index identities_email_idx on auth.identities (email text_pattern_ops);
  end if;
end
$$;

do $$
begin
  if to_regclass('auth.sessions') is null then
    create table auth.sessions (
      id uuid not null,
      user_id uuid not null,
      created_at timestamptz null,
      updated_at timestamptz null,
      factor_id uuid null,
      aal auth.aal_level null,
      not_after timestamptz null,
      refreshed_at timestamp without time zone null,
      user_agent text null,
      ip inet null,
      tag text null,
      oauth_client_id uuid null,
      refresh_token_hmac_key text null,
      refresh_token_counter bigint null,
      scopes text null check (char_length(scopes) <= 4096),
      constraint sessions_pkey primary key (id),
      constraint sessions_user_id_fkey foreign key (user_id)
        references auth.users (id) on delete cascade
    );
    create index sessions_user_id_idx on auth.sessions (user_id);
    create index sessions_not_after_idx on auth.sessions (not_after desc);
  end if;
end
$$;

-- How each session was authenticated (the access token's `amr` claim):
-- Supabase Auth's own table, one row per session and method.
do $$
begin
  if to_regclass('auth.mfa_amr_claims') is null then
    create table auth.mfa_amr_claims (
      session_id uuid not null,
      created_at timestamptz not null,
      updated_at timestamptz not null,
      authentication_method text not null,
      id uuid not null,
      constraint amr_id_pk primary key (id),
      constraint mfa_amr_claims_session_id_authentication_method_pkey
        unique (session_id, authentication_method),
      constraint mfa_amr_claims_session_id_fkey foreign key (session_id)
        references auth.sessions (id) on delete cascade
    );
  end if;
end
$$;

do $$
begin
  if to_regclass('auth.refresh_tokens') is null then
    -- user_id really is varchar(255) in Supabase Auth (a relic of its first
    -- migration); queries joining it to users.id need a cast there too.
    create table auth.refresh_tokens (
      instance_id uuid null,
      id bigserial not null,
      "token" varchar(255) null,
      user_id varchar(255) null,
      revoked bool null,
      created_at timestamptz null,
      updated_at timestamptz null,
      parent varchar(255) null,
      session_id uuid null,
      constraint refresh_tokens_pkey primary key (id),
      constraint refresh_tokens_token_unique unique ("token"),
      constraint refresh_tokens_session_id_fkey foreign key (session_id)
        references auth.sessions (id) on delete cascade
    );
    create index refresh_tokens_instance_id_idx on auth.refresh_tokens using btree (instance_id);
    create index refresh_tokens_instance_id_user_id_idx
      on auth.refresh_tokens using btree (instance_id, user_id);
    create index refresh_tokens_parent_idx on auth.refresh_tokens using btree (parent);
    create index refresh_tokens_session_id_revoked_idx
      on auth.refresh_tokens (session_id, revoked);
    create index refresh_tokens_updated_at_idx on auth.refresh_tokens (updated_at desc);
  end if;
end
$$;

-- The PKCE flow's state (a sign-up, recovery, magic link or email change
-- asked for with a code_challenge): its auth code, given back by the mailed
-- link, is exchanged with the code verifier for a session.
do $$
begin
  if not exists (
    select 1 from pg_type t join pg_namespace n on n.oid = t.typnamespace
    where n.nspname = 'auth' and t.typname = 'code_challenge_method'
  ) then
    create type auth.code_challenge_method as enum ('s256', 'plain');
  end if;
  if to_regclass('auth.flow_state') is null then
    create table auth.flow_state (
      id uuid primary key,
      user_id uuid null,
      auth_code text null,
      code_challenge_method auth.code_challenge_method null,
      code_challenge text null,
      provider_type text not null,
      provider_access_token text null,
      provider_refresh_token text null,
      created_at timestamptz null,
      updated_at timestamptz null,
      authentication_method text not null,
      auth_code_issued_at timestamptz null,
      invite_token text null,
      referrer text null,
      oauth_client_state_id uuid null,
      linking_target_id uuid null,
      email_optional boolean not null default false
    );
    create index idx_auth_code on auth.flow_state (auth_code);
    create index idx_user_id_auth_method
      on auth.flow_state (user_id, authentication_method);
    create index flow_state_created_at_idx on auth.flow_state (created_at desc);
  end if;
end
$$;

-- The helpers read the claims PostgREST (or the local stand-in for it) puts
-- in request.jwt.claims; the older per-claim settings are still honoured as
-- Supabase does.
do $$
begin
  if not exists (
    select 1 from pg_proc p join pg_namespace n on n.oid = p.pronamespace
    where n.nspname = 'auth' and p.proname = 'uid'
  ) then
    create function auth.uid() returns uuid language sql stable as $f$
      select coalesce(
        nullif(current_setting('request.jwt.claim.sub', true), ''),
        (nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'sub')
      )::uuid
    $f$;
  end if;
  if not exists (
    select 1 from pg_proc p join pg_namespace n on n.oid = p.pronamespace
    where n.nspname = 'auth' and p.proname = 'role'
  ) then
    create function auth.role() returns text language sql stable as $f$
      select coalesce(
        nullif(current_setting('request.jwt.claim.role', true), ''),
        (nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'role')
      )::text
    $f$;
  end if;
  if not exists (
    select 1 from pg_proc p join pg_namespace n on n.oid = p.pronamespace
    where n.nspname = 'auth' and p.proname = 'email'
  ) then
    create function auth.email() returns text language sql stable as $f$
      select coalesce(
        nullif(current_setting('request.jwt.claim.email', true), ''),
        (nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'email')
      )::text
    $f$;
  end if;
  if not exists (
    select 1 from pg_proc p join pg_namespace n on n.oid = p.pronamespace
    where n.nspname = 'auth' and p.proname = 'jwt'
  ) then
    create function auth.jwt() returns jsonb language sql stable as $f$
      select coalesce(
        nullif(current_setting('request.jwt.claim', true), ''),
        nullif(current_setting('request.jwt.claims', true), '')
      )::jsonb
    $f$;
  end if;
end
$$;
