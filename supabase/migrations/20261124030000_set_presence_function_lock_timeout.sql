-- A ping calls presence.record_ping outside any transaction of its own, so
-- the function itself carries the lock timeout: a row locked elsewhere (an
-- open transaction in the SQL editor, a long batch update) fails the ping
-- after 1 s with lock_not_available (55P03), which the function answers as
-- 503 db_timeout with Retry-After, instead of holding one of the isolate's
-- few connections for as long as the other transaction lasts.
--
-- A function attribute, because the transaction pooler allows it (nothing
-- outlives the call) where a session SET would leak to other clients.
-- statement_timeout is not set here: set on a function it does not arm the
-- timer of the statement that calls it; the functions bound each statement
-- themselves (supabase/functions/_shared/db.ts, LOCK_TIMEOUT_MS is this
-- value).
--
-- The two functions the functions call (record_ping for a ping, reader for
-- a read), whatever their signature. Not the change-log trigger function:
-- it runs inside the app's own writes, whose lock waits are the app's.
do $$
declare
  _fn regprocedure;
begin
  for _fn in
    select p.oid::regprocedure from pg_proc p
    where p.pronamespace = 'presence'::regnamespace and p.prokind = 'f'
      and p.proname in ('record_ping', 'reader')
  loop
    execute format('alter function %s set lock_timeout = %L', _fn, '1s');
  end loop;
end
$$;
