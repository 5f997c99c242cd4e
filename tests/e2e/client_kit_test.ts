/**
 * The client kit (client/presence.ts) end to end: real supabase-js clients
 * against the local stack (PGlite, or PostgreSQL with TEST_DATABASE_URL),
 * real time; the rows are read back from the database.
 */
import assert from "node:assert/strict";
import { createClient, type SupabaseClient } from "@supabase/supabase-js";
import {
  type KitError,
  type KitEvents,
  type PageLifecycle,
  PresenceKit,
  type PresenceUser,
} from "../../client/presence.ts";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { startTestStack, type TestStack } from "../support/stack.ts";
import { hs256Token } from "../support/tokens.ts";

const stack: TestStack = await startTestStack();

async function row(id: number) {
  const [r] = await stack.sql`
    select presence_state, ultimo_acceso from public.usuarios where id = ${id}`;
  return r;
}

async function member(name: string) {
  return await stack.createUser({
    row: {
      nombre_usuario: `${name}-${crypto.randomUUID()}`,
      auth_user_id: true,
    },
  });
}

function kitFor(
  client: SupabaseClient,
  options: { page?: PageLifecycle; apiUrl?: string } = {},
) {
  return new PresenceKit(client, {
    url: options.apiUrl ?? stack.apiUrl,
    anonKey: stack.anonKey,
    watchIntervalMs: 250,
    backoffBaseMs: 100,
    page: options.page,
  });
}

/** The next event of `kit` that `match` accepts (10 s at most). */
function next<K extends keyof KitEvents>(
  kit: PresenceKit,
  event: K,
  match: (value: KitEvents[K]) => boolean = () => true,
): Promise<KitEvents[K]> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off();
      reject(new Error(`no matching "${event}" event within 10 s`));
    }, 10_000);
    const off = kit.on(event, (value) => {
      if (!match(value)) return;
      clearTimeout(timer);
      off();
      resolve(value);
    });
  });
}

/** Waits until the watched map satisfies `match` (10 s at most). */
function watchUntil(
  kit: PresenceKit,
  match: (users: ReadonlyMap<number, PresenceUser>) => boolean,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      unwatch();
      reject(new Error("the watched map never matched within 10 s"));
    }, 10_000);
    const unwatch = kit.watch((users) => {
      if (!match(users)) return;
      clearTimeout(timer);
      // Not from inside the callback's own poll.
      queueMicrotask(unwatch);
      resolve();
    });
  });
}

e2eTest("client kit: start pings online and the row says so", async () => {
  const ana = await member("ana");
  const kit = kitFor(ana.client);
  const pinged = next(kit, "ping");
  kit.start();
  const { state, user } = await pinged;
  assert.equal(state, "online");
  assert.equal(user.id, ana.rowId);
  assert.equal(kit.state, "online");
  assert.equal((await row(ana.rowId!)).presence_state, "online");
  kit.dispose();
});

e2eTest(
  "client kit: a watcher sees another user online, then offline after signOut",
  async () => {
    const ana = await member("ana");
    const bruno = await member("bruno");
    const anaKit = kitFor(ana.client);
    const brunoKit = kitFor(bruno.client);
    const online = next(anaKit, "ping");
    anaKit.start();
    await online;
    await watchUntil(
      brunoKit,
      (users) => users.get(ana.rowId!)?.status === "online",
    );
    await anaKit.signOut();
    assert.equal(anaKit.state, "stopped");
    assert.equal((await row(ana.rowId!)).presence_state, "offline");
    const { data } = await ana.client.auth.getSession();
    assert.equal(data.session, null);
    await watchUntil(
      brunoKit,
      (users) => users.get(ana.rowId!)?.status === "offline",
    );
    anaKit.dispose();
    brunoKit.dispose();
  },
);

e2eTest(
  "client kit: pagehide sends offline by keepalive fetch, accepted with apikey",
  async () => {
    const ana = await member("ana");
    let hide = () => {};
    const page: PageLifecycle = {
      hidden: () => false,
      onVisibilityChange: () => () => {},
      onPageHide: (fn) => {
        hide = fn;
        return () => {};
      },
    };
    const kit = kitFor(ana.client, { page });
    const online = next(kit, "ping");
    kit.start();
    await online;
    const before = (await row(ana.rowId!)).ultimo_acceso;
    hide();
    assert.equal(kit.state, "stopped");
    for (let i = 0; i < 100; i++) {
      if ((await row(ana.rowId!)).presence_state === "offline") break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const after = await row(ana.rowId!);
    assert.equal(after.presence_state, "offline");
    assert.ok(after.ultimo_acceso >= before);
    kit.dispose();
  },
);

e2eTest(
  "client kit: a session ended on another device (supabase-js's default global sign-out) stops this device's kit and its watcher, and supabase-js drops the session",
  async () => {
    const ana = await member("ana");
    // The laptop: the same user signed in on another device.
    const laptop = createClient(stack.apiUrl, stack.anonKey, {
      auth: { persistSession: false, autoRefreshToken: false },
    });
    const signIn = await laptop.auth.signInWithPassword({
      email: ana.email,
      password: ana.password,
    });
    assert.equal(signIn.error, null);
    const kit = kitFor(laptop);
    const errors: KitError[] = [];
    kit.on("error", (e) => errors.push(e));
    const online = next(kit, "ping");
    kit.start();
    await online;
    let polls = 0;
    kit.watch(() => polls++);
    const stopped = next(kit, "state", (s) => s === "stopped");
    const dropped = new Promise<void>((resolve) => {
      const { data } = laptop.auth.onAuthStateChange((event) => {
        if (event !== "SIGNED_OUT") return;
        data.subscription.unsubscribe();
        resolve();
      });
    });
    // The phone signs out: every session of the user ends, the laptop's
    // token is unexpired and still held.
    const out = await ana.client.auth.signOut();
    assert.equal(out.error, null);
    await stopped;
    const refused = errors.find((e) => e.status === 401);
    assert.equal(refused?.code, "invalid_token");
    assert.equal(refused?.retryInMs, undefined);
    // supabase-js was asked, dropped the session Auth no longer knows and
    // told the app.
    await dropped;
    assert.equal((await laptop.auth.getSession()).data.session, null);
    assert.equal(kit.state, "stopped");
    assert.ok(polls >= 1);
    kit.dispose();
  },
);

e2eTest(
  "client kit: 401 JWT expired refreshes the session and the retry succeeds",
  async () => {
    const ana = await member("ana");
    const expired = await hs256Token(stack.apiUrl, ana, { exp: 1 });
    let swapped = 0;
    // The first ping goes out with an expired token, as after a laptop
    // wakes up: the server's real 401, then the client's real refresh.
    const client = createClient(stack.apiUrl, stack.anonKey, {
      auth: { persistSession: false, autoRefreshToken: false },
      global: {
        fetch: (input, init) => {
          const url = String(input instanceof Request ? input.url : input);
          if (url.endsWith("/functions/v1/presence-ping") && swapped === 0) {
            swapped++;
            const headers = new Headers(init?.headers);
            headers.set("authorization", `Bearer ${expired}`);
            return fetch(input, { ...init, headers });
          }
          return fetch(input, init);
        },
      },
    });
    const signIn = await client.auth.signInWithPassword({
      email: ana.email,
      password: ana.password,
    });
    assert.equal(signIn.error, null);
    const kit = kitFor(client);
    const errors: KitError[] = [];
    kit.on("error", (e) => errors.push(e));
    const tokens: string[] = [];
    client.auth.onAuthStateChange((event) => tokens.push(event));
    const pinged = next(kit, "ping");
    kit.start();
    await pinged;
    assert.equal(swapped, 1);
    assert.ok(tokens.includes("TOKEN_REFRESHED"));
    assert.deepEqual(errors, []);
    assert.equal((await row(ana.rowId!)).presence_state, "online");
    kit.dispose();
  },
);

e2eTest(
  "client kit: 404 stops pinging and reports user_not_found",
  async () => {
    const nobody = await stack.createUser();
    const kit = kitFor(nobody.client);
    const failed = next(kit, "error");
    kit.start();
    const error = await failed;
    assert.equal(error.code, "user_not_found");
    assert.equal(error.status, 404);
    assert.equal(kit.state, "not_found");
    kit.dispose();
  },
);

e2eTest(
  "client kit: 503 idp_unavailable waits at least Retry-After before retrying",
  async () => {
    const ana = await member("ana");
    // Functions whose identity provider is a closed port.
    const served = await stack.withFunctionEnv({
      SUPABASE_URL: "http://127.0.0.1:9",
    });
    try {
      const client = createClient(served.apiUrl, stack.anonKey, {
        auth: { persistSession: false, autoRefreshToken: false },
      });
      await client.auth.setSession({
        access_token: ana.token,
        refresh_token: "unused",
      });
      const kit = kitFor(client, { apiUrl: served.apiUrl });
      const failed = next(kit, "error");
      kit.start();
      const error = await failed;
      assert.equal(error.code, "idp_unavailable");
      assert.equal(error.status, 503);
      assert.equal(kit.state, "retrying");
      const res = await fetch(`${served.apiUrl}/functions/v1/presence-ping`, {
        method: "POST",
        headers: { authorization: `Bearer ${ana.token}` },
      });
      await res.body?.cancel();
      const retryAfterS = Number(res.headers.get("retry-after"));
      assert.ok(retryAfterS > 0);
      assert.ok(error.retryInMs! >= retryAfterS * 1000);
      kit.dispose();
    } finally {
      await served.close();
    }
  },
);

closeStackAfterAll("client kit", stack);
