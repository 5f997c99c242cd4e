/**
 * The presence client kit: keeps the signed-in user's presence fresh the way
 * the service's client guidance asks (a ping every few minutes while the page is
 * used, `offline` when the user leaves), and watches everyone's status
 * through the `presence` read API.
 *
 * No dependency but the supabase-js client it is given, and of that only
 * types, so the same file runs in a browser, Deno and Node. Only erasable
 * TypeScript is used (no enums, namespaces or parameter properties): the
 * local stack serves this very file to the demo page with its types
 * stripped (`local/demo.ts`), no bundler needed.
 *
 * @example
 * ```ts
 * const kit = new PresenceKit(supabase, { url: SUPABASE_URL, anonKey: SUPABASE_ANON_KEY });
 * kit.on("state", (s) => console.log("presence:", s));
 * kit.on("error", (e) => console.warn(e.code, e.message));
 * kit.start();
 * kit.watch((users) => render([...users.values()]));
 * // later: await kit.signOut(); // offline, then supabase.auth.signOut()
 * ```
 *
 * @module
 */
import type { SupabaseClient } from "@supabase/supabase-js";

/** Time as the kit sees it; tests pass a fake one. */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /**
   * Milliseconds on a clock that never goes back (`performance.now()`),
   * for how long ago another tab spoke; without it, `now()`.
   */
  elapsed?(): number;
  /** Calls `fn` once after `ms` milliseconds; returns a handle. */
  setTimeout(fn: () => void, ms: number): unknown;
  /** Cancels a handle of {@linkcode Clock.setTimeout}. */
  clearTimeout(handle: unknown): void;
}

/** The real clock. */
export const systemClock: Clock = {
  now: () => Date.now(),
  // The wall clock may be set back (NTP, the user, a VM resumed).
  elapsed: () => globalThis.performance?.now() ?? Date.now(),
  setTimeout: (fn, ms) => globalThis.setTimeout(fn, ms),
  clearTimeout: (handle) =>
    globalThis.clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/**
 * What the kit needs of the page: whether it is hidden, and its
 * `visibilitychange` and `pagehide` events; optionally the `online` event
 * (the device has a network again). Each `on...` returns a function that
 * removes the listener.
 */
export interface PageLifecycle {
  hidden(): boolean;
  onVisibilityChange(fn: () => void): () => void;
  onPageHide(fn: () => void): () => void;
  /**
   * Called when the network comes back; without it, a kit that failed for
   * want of a network waits out its backoff (up to `backoffMaxMs`).
   */
  onOnline?(fn: () => void): () => void;
}

/**
 * The browser's page lifecycle (`document.visibilityState`, `pagehide`,
 * `online`), or, where there is no `document` (Deno, Node), a page that is
 * never hidden.
 */
export function browserPage(): PageLifecycle {
  const g = globalThis as unknown as {
    document?: _EventSource & { visibilityState?: string };
  } & _EventSource;
  const doc = g.document;
  if (!doc || typeof g.addEventListener !== "function") {
    return {
      hidden: () => false,
      onVisibilityChange: () => () => {},
      onPageHide: () => () => {},
    };
  }
  return {
    hidden: () => doc.visibilityState === "hidden",
    onVisibilityChange: (fn) => _listen(doc, "visibilitychange", fn),
    onPageHide: (fn) => _listen(g, "pagehide", fn),
    onOnline: (fn) => _listen(g, "online", fn),
  };
}

interface _EventSource {
  addEventListener(type: string, fn: () => void): void;
  removeEventListener(type: string, fn: () => void): void;
}

function _listen(target: _EventSource, type: string, fn: () => void) {
  target.addEventListener(type, fn);
  return () => target.removeEventListener(type, fn);
}

/**
 * A channel between the tabs of one browser (same origin): what the kit
 * needs of `BroadcastChannel`. Each `onMessage` returns a function that
 * removes the listener.
 */
export interface TabChannel {
  post(message: TabMessage): void;
  onMessage(fn: (message: TabMessage) => void): () => void;
  /** Lets go of the channel ({@linkcode PresenceKit.dispose}). */
  close?(): void;
}

/**
 * What tabs tell each other: about the tab ({@linkcode TabPresence}), or
 * about watching ({@linkcode TabSync}, {@linkcode TabRead}): one tab per
 * user polls for all of them (see {@linkcode PresenceKit.watch}).
 */
export type TabMessage =
  | TabPresence
  | TabLead
  | TabSync
  | TabReading
  | TabRead
  | TabError;

/**
 * A tab is `here` (running, now and then), says `bye` (closing), or is
 * `out` (signing the user out with {@linkcode PresenceKit.signOut}, its
 * `offline` sent).
 */
export interface TabPresence {
  kind: "here" | "bye" | "out";
  /** The sending tab's random id. */
  tab: string;
  /** The signed-in user (`sub` of the access token), or `null`. */
  user: string | null;
}

/**
 * A tab has just been granted its user's lock and polls from now on: the
 * other tabs' watchers follow it, and no longer the tab that polled
 * before (whose last reads may still be on their way).
 */
export interface TabLead {
  kind: "lead";
  tab: string;
  /** Whose polls (`sub`). */
  user: string;
  /** Its `watchIntervalMs` (see {@linkcode TabSync}). */
  every: number;
}

/**
 * A watcher that does not poll (another tab of its user does) asks the
 * polling one for what it lacks: it has just started watching, has been
 * hidden, or missed a read.
 */
export interface TabSync {
  kind: "sync";
  tab: string;
  /** The watcher's user (`sub`): only that user's polling tab answers. */
  user: string;
  /**
   * The watcher's `watchIntervalMs`: watchers at other intervals share
   * among themselves only, so that none is read for less often than asked.
   */
  every: number;
  /** The asking watcher's id. */
  watcher: string;
  /**
   * The cursor of the map the watcher holds, or `null` for none: the
   * polling tab answers with the changes since it when it has them.
   */
  cursor: string | null;
  /**
   * The polling tab the watcher follows (its `tab`), or `null` for any:
   * only that tab answers.
   */
  holder: string | null;
}

/**
 * The polling tab has sent a read (a page of it) and waits for the answer:
 * the others wait for it as long as a read may take (`requestTimeoutMs`)
 * before they poll for themselves, so that a slow read (a phone's network,
 * a read of many pages) is not taken for a hung tab.
 */
export interface TabReading {
  kind: "reading";
  tab: string;
  /** Whose read it is (`sub`). */
  user: string;
  /** The polling watcher's `watchIntervalMs` (see {@linkcode TabSync}). */
  every: number;
}

/**
 * What the polling tab read: a poll's changes (`to: null`, for every
 * watcher of `user`), or in answer to a {@linkcode TabSync} (`to`: that
 * watcher) the changes since the asker's cursor, or its whole map
 * (`resync: true`) when it does not have them.
 */
export interface TabRead {
  kind: "read";
  tab: string;
  /** Whose read it is (`sub`): another user's is never applied. */
  user: string;
  /** The polling watcher's `watchIntervalMs` (see {@linkcode TabSync}). */
  every: number;
  /** The watcher it answers, or `null`: every watcher of `user`. */
  to: string | null;
  /**
   * The cursor the read went on from, or `null` for a full read (then
   * `resync` is true): a watcher at another cursor missed a read and asks
   * for the map again rather than apply it.
   */
  from: string | null;
  /** The cursor after the read. */
  cursor: string;
  changed: PresenceUser[];
  removed: number[];
  resync: boolean;
  /**
   * The database's time of the map it leads to (the API's `server_time` of
   * its first page, ms since the epoch), or `null`/absent when unknown (an
   * older kit): a whole map older than the one a watcher holds is not
   * applied, so that no tab's map goes back in time.
   */
  asOf?: number | null;
  /**
   * In an answer to a sync: the polling tab's last poll failed, and this
   * is its error, with the wait before its next try. The asking tab
   * reports it and waits with it, instead of showing its map as live.
   */
  error?: KitError;
}

/**
 * The polling tab's poll failed (its {@linkcode KitError}, with the wait
 * before its next try): the other tabs' kits report it too, so that none
 * shows its map as live while the reads are failing.
 */
export interface TabError {
  kind: "error";
  tab: string;
  /** Whose poll it is (`sub`). */
  user: string;
  /** The polling watcher's `watchIntervalMs` (see {@linkcode TabSync}). */
  every: number;
  error: KitError;
}

/**
 * The browser's `BroadcastChannel` named for the project, or `null` where
 * there is none (then every tab acts alone). A tab's presence messages from
 * this page's own kits are not heard: a channel delivers to every other
 * channel object of its name, those of the same page too, and two kits in
 * one page (a form submitted twice, a component mounted twice) are one tab,
 * not two. Watching messages are heard from every kit, this page's too.
 */
export function browserTabs(url: string): TabChannel | null {
  const BC = (globalThis as unknown as {
    BroadcastChannel?: new (name: string) => {
      close(): void;
      postMessage(m: unknown): void;
      addEventListener(t: "message", fn: (e: { data: unknown }) => void): void;
      removeEventListener(
        t: "message",
        fn: (e: { data: unknown }) => void,
      ): void;
    };
  }).BroadcastChannel;
  if (!BC) return null;
  const channel = new BC(`presence-kit:${url}`);
  return {
    post: (message) => channel.postMessage({ ...message, realm: _REALM }),
    onMessage: (fn) => {
      const listener = (e: { data: unknown }) => {
        const m = e.data as (TabMessage & { realm?: string }) | null;
        if (!m || typeof m !== "object") return;
        if (m.kind === "here" || m.kind === "bye" || m.kind === "out") {
          if (m.realm !== _REALM) {
            fn({ kind: m.kind, tab: m.tab, user: m.user });
          }
        } else if (
          m.kind === "lead" || m.kind === "sync" || m.kind === "read" ||
          m.kind === "reading" || m.kind === "error"
        ) {
          const { realm: _, ...message } = m;
          fn(message);
        }
      };
      channel.addEventListener("message", listener);
      return () => channel.removeEventListener("message", listener);
    },
    close: () => channel.close(),
  };
}

/**
 * Locks shared by the tabs of one browser (same origin): what the kit
 * needs of the Web Locks API (`navigator.locks`), which lets go of a tab's
 * locks when the tab closes or crashes.
 */
export interface TabLocks {
  /**
   * Waits for the lock `name`, then calls `held` and keeps the lock until
   * the promise `held` returns settles. A `signal` aborted while waiting
   * leaves the queue (the returned promise rejects); once held, it does
   * nothing.
   */
  request(
    name: string,
    options: { signal: AbortSignal },
    held: () => Promise<void>,
  ): Promise<unknown>;
}

/**
 * The page's Web Locks (`navigator.locks`), or `null` where there are none
 * or no page (then every watcher polls for itself). Deno has Web Locks but
 * no `document`: a server's kits (where a `BroadcastChannel` may reach
 * other isolates, which the locks do not) poll as they did.
 */
export function browserLocks(): TabLocks | null {
  const g = globalThis as unknown as {
    document?: unknown;
    navigator?: { locks?: TabLocks };
  };
  const locks = g.navigator?.locks;
  if (!g.document || !locks || typeof locks.request !== "function") {
    return null;
  }
  return {
    request: (name, options, held) => locks.request(name, options, held),
  };
}

// This page (realm): its kits' tab messages carry it, and are not heard by
// its own kits.
const _REALM = `${Date.now().toString(36)}-${
  Math.random().toString(36).slice(2)
}`;

/**
 * Where a page can leave a note for the next page of the same tab
 * (`sessionStorage`), so that a navigation is told from a close.
 */
export interface TabNotes {
  get(key: string): string | null;
  set(key: string, value: string): void;
}

/** Options of {@linkcode PresenceKit}. */
export interface PresenceKitOptions {
  /**
   * The project URL (`SUPABASE_URL`), for the kit's own offline pings (tab
   * close, stop, sign-out).
   */
  url: string;
  /**
   * The project's publishable key (`sb_publishable_…`), sent as `apikey` by
   * the kit's own offline pings. This or `anonKey` is required.
   */
  publishableKey?: string;
  /** The legacy anon key, in place of `publishableKey`. */
  anonKey?: string;
  /**
   * Time between pings (default 180 000, 3 minutes; the guidance: 2 to 5).
   * At least {@linkcode MIN_INTERVAL_MS}.
   */
  intervalMs?: number;
  /**
   * Time between polls of {@linkcode PresenceKit.watch} (default 15 000).
   * At least {@linkcode MIN_WATCH_INTERVAL_MS}.
   */
  watchIntervalMs?: number;
  /**
   * Spread of each wait, as a fraction (default 0.2: ±10 %), so that
   * clients started together do not ping together. From 0 to 1.
   */
  jitter?: number;
  /**
   * First wait after a 503 or a network failure (default 1 000). At least
   * {@linkcode MIN_BACKOFF_MS}.
   */
  backoffBaseMs?: number;
  /**
   * Longest wait after failures (default 300 000). At least
   * `backoffBaseMs`.
   */
  backoffMaxMs?: number;
  /**
   * Longest wait for any answer (default 10 000), after which the call
   * counts as a network failure. At least {@linkcode MIN_REQUEST_TIMEOUT_MS}.
   */
  requestTimeoutMs?: number;
  /** Users per read of the `presence` API (1..500, default 500). */
  pageSize?: number;
  clock?: Clock;
  /** Uniform in [0, 1); defaults to `Math.random`. */
  random?: () => number;
  page?: PageLifecycle;
  /**
   * The `fetch` of the kit's own offline pings (default `globalThis.fetch`).
   */
  fetch?: typeof fetch;
  /**
   * The channel to the user's other tabs (default: a `BroadcastChannel`
   * where there is one; `null`: this tab acts alone).
   */
  tabs?: TabChannel | null;
  /**
   * Locks between the user's tabs, so that one tab polls for all their
   * watchers (default: {@linkcode browserLocks}, the page's
   * `navigator.locks`; `null`, or no `tabs`: every watcher polls for
   * itself).
   */
  locks?: TabLocks | null;
  /** Notes for the next page of this tab (default: `sessionStorage`). */
  notes?: TabNotes | null;
}

/** How often a running tab tells the others it is there. */
export const TAB_HEARTBEAT_MS = 10_000;

/**
 * How long a tab counts as open after its last word. Longer than a
 * background tab's throttled timers (once a minute in Chrome), so that a
 * hidden tab still counts; a tab that crashed counts this long at most.
 */
export const TAB_ALIVE_MS = 90_000;

/**
 * A page that starts within this long after the previous page of its tab
 * sent `offline` (a navigation, not a close) pings `online` once more soon
 * after, in case the two pings crossed on the way.
 */
export const NAVIGATION_WINDOW_MS = 10_000;

/**
 * Shortest `intervalMs`. A floor against a loop of pings (`0`), not a
 * recommendation: a ping is a write, and the guidance is 2 to 5 minutes.
 */
export const MIN_INTERVAL_MS = 1_000;

/** Shortest `watchIntervalMs`: a floor against a loop of polls. */
export const MIN_WATCH_INTERVAL_MS = 250;

/** Shortest `backoffBaseMs`, so a failing API is never hammered. */
export const MIN_BACKOFF_MS = 100;

/** Shortest `requestTimeoutMs`. */
export const MIN_REQUEST_TIMEOUT_MS = 1_000;

/**
 * Longest `intervalMs`, `watchIntervalMs`, `backoffBaseMs`, `backoffMaxMs`
 * and `requestTimeoutMs` (about 11.5 days), and longest `Retry-After`
 * honoured. A browser runs a timer set beyond 2^31 - 1 ms at once; with
 * `jitter` at most 1, no wait of the kit comes near that.
 */
export const MAX_WAIT_MS = 1_000_000_000;

/**
 * How many times an `offline` that must land (stop, sign-out, a session
 * ended) is sent when the API answers 5xx (a gateway's, or the function's
 * own 500 after a dropped database connection) or not at all.
 */
export const OFFLINE_TRIES = 3;

/**
 * Every {@linkcode KitState}, each of which the kit reaches.
 *
 * @example
 * ```ts
 * const known = (s: string): s is KitState => (KIT_STATES as readonly string[]).includes(s);
 * ```
 */
export const KIT_STATES = [
  "starting",
  "online",
  "paused",
  "retrying",
  "stopped",
  "not_found",
] as const;

/**
 * Where the kit is: `starting` until the first answer; `online` after a
 * successful ping; `paused` while the page is hidden; `retrying` while it
 * waits after a 503 or a network failure; `stopped` after
 * {@linkcode PresenceKit.stop}, sign-out or a session that ended (the
 * `offline` sent then is told by a `ping` event with `state: "offline"`);
 * `not_found` when the user has no `usuarios` row (pings stop).
 */
export type KitState = typeof KIT_STATES[number];

/** A failure the kit reports; it never carries a token. */
export interface KitError {
  /** What failed: a ping or a watch poll. */
  source: "ping" | "watch";
  /**
   * The API's `code` (`invalid_token`, `user_not_found`,
   * `idp_unavailable`, ...), `network` when no answer came, `callback`
   * when the poll succeeded (status 200) but the `watch` callback threw, or
   * `no_session` when an offline could not be sent for want of a token.
   */
  code: string;
  /** HTTP status, or 0 when no answer came. */
  status: number;
  message: string;
  /** When the kit tries again, if it does. */
  retryInMs?: number;
}

/** A user as the `presence` read API lists it. */
export interface PresenceUser {
  id: number;
  nombre_usuario: string | null;
  presence_state: "online" | "offline" | null;
  ultimo_acceso: string | null;
  status: "online" | "away" | "offline";
}

/** The caller's row as presence-ping returns it. */
export interface PingResult {
  id: number;
  /** `null` only where the app's own trigger stores no time. */
  ultimo_acceso: string | null;
  presence_state: "online" | "offline";
}

/** Events of {@linkcode PresenceKit.on}. */
export interface KitEvents {
  state: KitState;
  error: KitError;
  /** Every successful ping, with the state sent. */
  ping: { state: "online" | "offline"; user: PingResult };
}

/**
 * The map {@linkcode PresenceKit.watch} hands to its callback (a new one
 * after each poll), with what this poll changed: users listed again, ids
 * deleted from the table, and whether the map was rebuilt from a full read.
 */
export type OnPresenceChange = (
  users: ReadonlyMap<number, PresenceUser>,
  change: { changed: PresenceUser[]; removed: number[]; resync: boolean },
) => void;

type _Answer = {
  status: number;
  body: Record<string, unknown>;
  retryAfterS: number | null;
};

/**
 * Keeps one user's presence fresh and watches everyone's.
 *
 * Never more than one ping in flight, nor more than one poll per watch. The
 * one exception is the `pagehide` ping, which cannot wait: the page is
 * going away.
 */
export class PresenceKit {
  readonly #client: SupabaseClient;
  readonly #url: string;
  readonly #anonKey: string;
  readonly #intervalMs: number;
  readonly #watchIntervalMs: number;
  readonly #jitter: number;
  readonly #backoffBaseMs: number;
  readonly #backoffMaxMs: number;
  readonly #requestTimeoutMs: number;
  readonly #pageSize: number;
  readonly #clock: Clock;
  readonly #random: () => number;
  readonly #page: PageLifecycle;
  readonly #fetch: typeof fetch;
  readonly #listeners: {
    [K in keyof KitEvents]: Set<(v: KitEvents[K]) => void>;
  } = {
    state: new Set(),
    error: new Set(),
    ping: new Set(),
  };
  #state: KitState = "stopped";
  #running = false;
  #timer: unknown = null;
  #failures = 0;
  // The last failure was a network one: the `online` event ends its wait.
  #offlineFailure = false;
  // One ping at a time: each waits for the one before it.
  #chain: Promise<void> = Promise.resolve();
  // The last access token seen, for the offline ping after SIGNED_OUT, when
  // the session is already gone.
  #token: string | null = null;
  // Closed by pagehide, but the page may come back from the back/forward
  // cache: it resumes when shown.
  #resumeOnShow = false;
  #pageListening = false;
  #disposed = false;
  // Another tab's kit.signOut() sent this user's offline (`out`): when.
  #siblingOut: { user: string | null; at: number } | null = null;
  readonly #ownsTabs: boolean;
  #unsubscribe: Array<() => void> = [];
  #watchers = new Set<_Watcher>();
  readonly #tabs: TabChannel | null;
  readonly #locks: TabLocks | null;
  #watchersMade = 0;
  readonly #notes: TabNotes | null;
  readonly #tabId: string;
  // Other tabs of this origin: when each last spoke, and as whom.
  #peers = new Map<string, { at: number; user: string | null }>();
  #heartbeat: unknown = null;
  // A navigation just replaced this tab's page: confirm online soon.
  #confirmSoon = false;

  /**
   * @param client a supabase-js client; the kit signs in with nothing, it
   * uses the client's session.
   */
  constructor(client: SupabaseClient, options: PresenceKitOptions) {
    this.#client = client;
    this.#url = options.url.replace(/\/+$/, "");
    const key = options.publishableKey ?? options.anonKey;
    if (!key) {
      throw new TypeError(
        "PresenceKit: publishableKey (or anonKey) is required",
      );
    }
    this.#anonKey = key;
    this.#intervalMs = _between(
      "intervalMs",
      options.intervalMs ?? 180_000,
      MIN_INTERVAL_MS,
    );
    this.#watchIntervalMs = _between(
      "watchIntervalMs",
      options.watchIntervalMs ?? 15_000,
      MIN_WATCH_INTERVAL_MS,
    );
    // Above 1 a spread wait can come out negative; NaN makes every wait
    // NaN: both run at once in a browser, a loop of requests.
    this.#jitter = _between("jitter", options.jitter ?? 0.2, 0, 1);
    this.#backoffBaseMs = _between(
      "backoffBaseMs",
      options.backoffBaseMs ?? 1_000,
      MIN_BACKOFF_MS,
    );
    this.#backoffMaxMs = _between(
      "backoffMaxMs",
      options.backoffMaxMs ?? 300_000,
      this.#backoffBaseMs,
    );
    this.#requestTimeoutMs = _between(
      "requestTimeoutMs",
      options.requestTimeoutMs ?? 10_000,
      MIN_REQUEST_TIMEOUT_MS,
    );
    // The read API's own bounds: a larger page is refused (400) on every
    // poll, and the map would never fill.
    this.#pageSize = options.pageSize ?? 500;
    if (
      !Number.isInteger(this.#pageSize) || this.#pageSize < 1 ||
      this.#pageSize > 500
    ) {
      throw new RangeError(
        "PresenceKit: pageSize must be a whole number from 1 to 500",
      );
    }
    this.#clock = options.clock ?? systemClock;
    this.#random = options.random ?? Math.random;
    this.#page = options.page ?? browserPage();
    this.#fetch = options.fetch ?? ((input, init) => fetch(input, init));
    this.#ownsTabs = options.tabs === undefined;
    this.#tabs = this.#ownsTabs ? browserTabs(this.#url) : options.tabs ?? null;
    // By default only over the kit's own channel: an app's channel may
    // carry only the tab messages it was written for, and followers that
    // never hear a read would never poll either.
    this.#locks = options.locks !== undefined
      ? options.locks
      : this.#ownsTabs
      ? browserLocks()
      : null;
    this.#notes = options.notes === undefined ? _sessionNotes() : options.notes;
    this.#tabId = `${this.#clock.now().toString(36)}-${
      Math.floor(this.#random() * 2 ** 32).toString(36)
    }-${Math.random().toString(36).slice(2, 8)}`;
    if (this.#tabs) {
      this.#unsubscribe.push(this.#tabs.onMessage((m) => this.#heard(m)));
    }
    const offOnline = this.#page.onOnline?.(() => this.#networkBack());
    if (offOnline) this.#unsubscribe.push(offOnline);
    const { data } = client.auth.onAuthStateChange((event, session) => {
      const before = this.#token;
      if (session) this.#token = session.access_token;
      // Not awaited: supabase-js holds its auth lock while it calls back,
      // and the ping needs that lock for the token.
      if (event === "SIGNED_OUT") void this.#signedOut(before);
      else if (
        session && before !== null &&
        _subject(before) !== _subject(session.access_token)
      ) {
        // Another user signed in without a sign-out (an account switch).
        void this.#switched(before);
      }
    });
    this.#unsubscribe.push(() => data.subscription.unsubscribe());
  }

  /** The current state. */
  get state(): KitState {
    return this.#state;
  }

  /**
   * Listens to an event; returns a function that stops listening.
   *
   * @example
   * ```ts
   * const off = kit.on("error", (e) => banner(e.code === "network" ? "API down" : e.message));
   * ```
   */
  on<K extends keyof KitEvents>(
    event: K,
    fn: (value: KitEvents[K]) => void,
  ): () => void {
    this.#listeners[event].add(fn);
    return () => this.#listeners[event].delete(fn);
  }

  /**
   * Pings `online` now (unless the page is hidden) and then every interval;
   * pauses while the page is hidden and pings as soon as it shows again;
   * pings `offline` when the page is closed.
   */
  start(): void {
    this.#alive("start");
    if (this.#running) return;
    this.#running = true;
    this.#failures = 0;
    // Once per kit: they stay through stop() and do nothing while stopped.
    if (!this.#pageListening) {
      this.#pageListening = true;
      this.#unsubscribe.push(
        this.#page.onVisibilityChange(() => this.#visibilityChanged()),
        this.#page.onPageHide(() => this.#pageHidden()),
      );
    }
    const offlineAt = Number(this.#notes?.get(_OFFLINE_NOTE) ?? NaN);
    this.#confirmSoon = this.#clock.now() - offlineAt < NAVIGATION_WINDOW_MS;
    this.#sayHere();
    if (this.#page.hidden()) {
      this.#setState("paused");
    } else {
      this.#setState("starting");
      this.#tick();
    }
  }

  /**
   * Stops pinging and watching (every watcher ends: call
   * {@linkcode PresenceKit.watch} again after a new start) and pings
   * `offline`; resolves when that ping has been answered (or has failed,
   * which is reported). The offline goes by the kit's own `fetch` with the
   * token it holds, never behind supabase-js's auth lock, and every wait in
   * it is bounded by `requestTimeoutMs`.
   */
  async stop(): Promise<void> {
    const wasRunning = this.#running;
    this.#halt("stopped");
    this.#stopWatchers();
    if (wasRunning) await this.#enqueue(() => this.#offline());
  }

  /**
   * Pings `offline`, then signs out with `client.auth.signOut(options)`:
   * the order that works, since a signed-out session's token is refused.
   * The offline is bounded (see {@linkcode PresenceKit.stop});
   * `client.auth.signOut` itself waits for supabase-js's auth lock, which the
   * kit cannot bound.
   * Resolves to supabase-js's answer: with an `error` (no network, Auth
   * down) the session is kept and still valid, and the kit stays stopped;
   * the app says so and may call `signOut()` again.
   *
   * @example
   * ```ts
   * const { error } = await kit.signOut();
   * if (error) alert(`Not signed out: ${error.message}`);
   * ```
   */
  async signOut(
    options?: Parameters<SupabaseClient["auth"]["signOut"]>[0],
  ): Promise<{ error: Error | null }> {
    const wasRunning = this.#running;
    await this.stop();
    // The other tabs of a shared session get SIGNED_OUT from supabase-js
    // next: the offline is sent, theirs would only be refused (401).
    if (wasRunning) {
      this.#tabs?.post({ kind: "out", tab: this.#tabId, user: this.#user() });
    }
    const { error } = await this.#client.auth.signOut(options);
    return { error };
  }

  /**
   * Polls the `presence` read API's changes-since cursor and keeps a live
   * map of users by id: deltas are applied, a `resync` answer replaces the
   * map. Pauses with the page. Returns a function that stops watching.
   *
   * With several tabs of one signed-in user (same browser, same project),
   * one visible tab polls and hands each read to the others' watchers over
   * `tabs`, who get the same map and change as if they had polled (a
   * watcher that starts while another tab polls first gets that tab's whole
   * map, `resync: true`; one shown again, or that missed a read, gets the
   * changes since its cursor, or the whole map when the polling tab no
   * longer keeps them: after 100 of its reads). The polling tab holds a
   * lock (`locks`): when it stops watching, hides, signs out, closes or
   * crashes, a visible tab that watches takes over at once. Only the polling
   * tab backs off; every tab reports its poll's errors. Without `tabs` or
   * `locks`, or before a session, every watcher polls for itself.
   *
   * @example
   * ```ts
   * const unwatch = kit.watch((users, { changed }) => console.log(users.size, changed));
   * ```
   */
  watch(onChange: OnPresenceChange): () => void {
    this.#alive("watch");
    const w: _Watcher = {
      id: `${this.#tabId}/${++this.#watchersMade}`,
      onChange,
      users: new Map(),
      cursor: null,
      timer: null,
      watch: null,
      busy: false,
      failures: 0,
      offlineFailure: false,
      partial: null,
      stopped: false,
      epoch: 0,
      off: () => {},
      joining: this.#tabs !== null && this.#locks !== null,
      share: null,
      holder: null,
      took: null,
      history: [],
      asOf: null,
      lastFailure: null,
    };
    this.#watchers.add(w);
    if (w.joining) void this.#share(w);
    else if (!this.#page.hidden()) void this.#poll(w);
    w.off = this.#page.onVisibilityChange(() => {
      if (w.stopped || w.joining) return;
      if (this.#page.hidden()) {
        this.#clearWatch(w);
        // A hidden tab pauses: a visible one polls instead.
        this.#leave(w);
      } else if (w.share) this.#join(w);
      else if (!w.busy) void this.#poll(w);
    });
    return () => {
      this.#endWatch(w);
      this.#watchers.delete(w);
    };
  }

  /**
   * Stops everything (no `offline` is sent: call
   * {@linkcode PresenceKit.stop} first for one) and lets go of the page,
   * the tabs and the client's auth listener. For good: `start()` and
   * `watch()` then throw; make a new kit.
   */
  dispose(): void {
    this.#disposed = true;
    this.#halt("stopped");
    this.#stopWatchers();
    for (const off of this.#unsubscribe.splice(0)) off();
    // Only a channel the kit opened itself.
    if (this.#ownsTabs) this.#tabs?.close?.();
  }

  // A disposed kit has no page, tab or auth listener left: running again it
  // would ping through hidden pages, never send the tab-close offline and
  // miss sign-outs.
  #alive(method: string): void {
    if (this.#disposed) {
      throw new Error(
        `PresenceKit: ${method}() after dispose(); make a new PresenceKit`,
      );
    }
  }

  #stopWatchers(): void {
    for (const w of this.#watchers) this.#endWatch(w);
    this.#watchers.clear();
  }

  #endWatch(w: _Watcher): void {
    w.stopped = true;
    w.off();
    this.#clearWatch(w);
    this.#leave(w);
  }

  // ---- pings ------------------------------------------------------------

  #tick(): void {
    // Also called early (page shown again): the pending tick is replaced,
    // never doubled.
    if (this.#timer !== null) this.#clock.clearTimeout(this.#timer);
    this.#timer = null;
    if (!this.#running || this.#page.hidden()) return;
    void this.#enqueue(() => this.#ping());
  }

  #schedule(ms: number): void {
    if (this.#timer !== null) this.#clock.clearTimeout(this.#timer);
    this.#timer = this.#clock.setTimeout(() => this.#tick(), ms);
  }

  #visibilityChanged(): void {
    if (!this.#running && this.#resumeOnShow && !this.#page.hidden()) {
      this.#resumeOnShow = false;
      this.#running = true;
      this.#failures = 0;
      // Its `bye` made the other tabs forget it: say it is back.
      this.#sayHere();
    }
    if (!this.#running) return;
    if (this.#page.hidden()) {
      if (this.#timer !== null) this.#clock.clearTimeout(this.#timer);
      this.#timer = null;
      this.#setState("paused");
      // The token the tab-close offline will carry: the session as it is
      // now, which a server route may have refreshed without an event.
      void this.#session();
    } else {
      // Shown again: ping at once rather than at the next tick.
      this.#tick();
    }
  }

  // The page is going away: a normal request may be cancelled with it;
  // `keepalive` lets it outlive the page and, unlike `sendBeacon`, carries
  // the Authorization header.
  #pageHidden(): void {
    if (!this.#running || this.#token === null) return;
    this.#halt("stopped");
    this.#resumeOnShow = true;
    // Another tab of this user is open: it keeps the user online, and the
    // row must not say offline while it does.
    if (this.#othersOpen()) return;
    this.#notes?.set(_OFFLINE_NOTE, String(this.#clock.now()));
    this.#sendOffline(this.#token, { keepalive: true }).catch(() => {});
  }

  // POST presence-ping {state: "offline"} by the kit's own fetch, with
  // `token` and the project's key: the tab-close offline (`keepalive`) and
  // the offline that must land (`signal`, see #post).
  #sendOffline(token: string, init: RequestInit): Promise<Response> {
    return this.#fetch(`${this.#url}/functions/v1/presence-ping`, {
      ...init,
      method: "POST",
      headers: {
        authorization: `Bearer ${token}`,
        apikey: this.#anonKey,
        "content-type": "application/json",
      },
      body: JSON.stringify({ state: "offline" }),
    });
  }

  // ---- tabs -------------------------------------------------------------

  #user(): string | null {
    return this.#token === null ? null : _subject(this.#token);
  }

  #othersOpen(): boolean {
    const me = this.#user();
    const now = this.#elapsed();
    for (const [tab, peer] of this.#peers) {
      if (now - peer.at > TAB_ALIVE_MS) this.#peers.delete(tab);
      else if (peer.user === me) return true;
    }
    return false;
  }

  #offlineSentBySibling(token: string): boolean {
    const out = this.#siblingOut;
    return out !== null && out.user === _subject(token) &&
      this.#elapsed() - out.at <= TAB_ALIVE_MS;
  }

  #elapsed(): number {
    return this.#clock.elapsed?.() ?? this.#clock.now();
  }

  #heard(m: TabMessage): void {
    if (m.tab === this.#tabId) return;
    if (
      m.kind === "lead" || m.kind === "sync" || m.kind === "read" ||
      m.kind === "reading" || m.kind === "error"
    ) {
      this.#heardWatch(m);
      return;
    }
    if (m.kind === "out") {
      this.#siblingOut = { user: m.user, at: this.#elapsed() };
    }
    if (m.kind === "bye" || m.kind === "out") {
      this.#peers.delete(m.tab);
      return;
    }
    const known = this.#peers.has(m.tab);
    this.#peers.set(m.tab, { at: this.#elapsed(), user: m.user });
    // A newcomer learns at once who is already there.
    if (!known && this.#running) {
      this.#tabs?.post({ kind: "here", tab: this.#tabId, user: this.#user() });
    }
  }

  #sayHere(): void {
    if (this.#heartbeat !== null) this.#clock.clearTimeout(this.#heartbeat);
    this.#heartbeat = null;
    if (!this.#running || !this.#tabs) return;
    this.#tabs.post({ kind: "here", tab: this.#tabId, user: this.#user() });
    this.#heartbeat = this.#clock.setTimeout(
      () => this.#sayHere(),
      TAB_HEARTBEAT_MS,
    );
  }

  // `token`: the ended session's last access token.
  async #signedOut(token: string | null): Promise<void> {
    // Watchers read as the signed-out user: they end with the session.
    this.#stopWatchers();
    if (!this.#running) return;
    this.#halt("stopped");
    // Best effort: Auth may already have revoked the session the token
    // belongs to, which is why PresenceKit.signOut pings first. Not sent
    // when another tab's kit.signOut() has just sent it.
    if (token !== null && !this.#offlineSentBySibling(token)) {
      await this.#enqueue(() => this.#offline(token));
    }
    // Unless another user's session has taken its place meanwhile.
    if (this.#token === token) this.#token = null;
  }

  // An account switch: the previous user's session ended, and this tab has
  // a signed-in user still. The previous user goes offline (with its own
  // last token) and a running kit goes on for the new one, whatever the
  // order of the app's auth listeners (an app's `start()` on SIGNED_IN may
  // run before this). Watchers end, as on SIGNED_OUT.
  async #switched(token: string): Promise<void> {
    this.#stopWatchers();
    if (!this.#running) return;
    // The other tabs hear the new user at once.
    this.#sayHere();
    // A hidden page stays paused: the new user's first ping waits for it.
    if (!this.#page.hidden()) this.#setState("starting");
    const offline = this.#enqueue(() => this.#offline(token));
    this.#failures = 0;
    this.#tick();
    await offline;
  }

  #halt(state: KitState): void {
    this.#running = false;
    this.#resumeOnShow = false;
    if (this.#timer !== null) this.#clock.clearTimeout(this.#timer);
    this.#timer = null;
    if (this.#heartbeat !== null) this.#clock.clearTimeout(this.#heartbeat);
    this.#heartbeat = null;
    // The other tabs stop counting this one as open at once, not 90 s on.
    this.#tabs?.post({ kind: "bye", tab: this.#tabId, user: this.#user() });
    // Page listeners belong to start(); the auth listener stays.
    this.#setState(state);
  }

  // One ping at a time, in order: an offline never overtakes an online
  // still on its way.
  #enqueue(work: () => Promise<void>): Promise<void> {
    const run = this.#chain.then(work);
    this.#chain = run.catch(() => {});
    return run;
  }

  // A scheduled online ping. Every wait in it is bounded (requestTimeoutMs)
  // and it gives up as soon as the kit has stopped, so that the offline
  // queued behind it goes on.
  async #ping(): Promise<void> {
    // It may have waited behind another and been overtaken by stop() or a
    // hidden page.
    if (!this.#running || this.#page.hidden()) return;
    let refreshed = false;
    await this.#session();
    for (;;) {
      if (!this.#running || this.#page.hidden()) return;
      let answer: _Answer;
      try {
        answer = await this.#invoke("presence-ping", { state: "online" });
      } catch (error) {
        answer = _noAnswer(error);
      }
      // An answer that arrives after stop() or a hidden page says nothing
      // about the kit any more: no state, no event.
      if (!this.#running || this.#page.hidden()) return;
      if (answer.status === 200) {
        this.#failures = 0;
        this.#setState("online");
        // Just after a navigation the previous page's offline may land
        // after this online: say online again shortly.
        const confirm = this.#confirmSoon;
        this.#confirmSoon = false;
        this.#schedule(confirm ? _CONFIRM_MS : this.#spread(this.#intervalMs));
        this.#emit("ping", {
          state: "online",
          user: answer.body.user as PingResult,
        });
        return;
      }
      if (_tokenExpired(answer) && !refreshed) {
        refreshed = true;
        if (await this.#refresh()) continue;
      }
      if (await this.#sessionOver(answer)) {
        this.#failed("online", false, answer);
        await this.#sessionEnded(answer);
        return;
      }
      this.#failed("online", true, answer);
      return;
    }
  }

  // The offline that must land (stop, sign-out, a session that ended),
  // sent by the kit's own fetch with the token it holds (`token`: the ended
  // session's). Never through supabase-js: each of its requests, a
  // functions.invoke with its own Authorization too, first waits for the
  // session behind supabase-js's auth lock, which a session refresh holds
  // for as long as it retries (half a minute), or for ever if Auth hangs.
  // Every wait here is bounded: the session (for a fresher token) and each
  // try by requestTimeoutMs, up to OFFLINE_TRIES tries.
  async #offline(token?: string): Promise<void> {
    // A token the device's clock says is good for a minute yet goes at
    // once: supabase-js may make the kit wait (a refresh under way), and
    // then at most requestTimeoutMs.
    if (token === undefined && !this.#lasts(this.#token, 60_000)) {
      await this.#session();
    }
    let bearer = token ?? this.#token;
    let refreshed = false;
    for (let tries = 1;; tries++) {
      if (bearer === null) {
        this.#emit("error", {
          source: "ping",
          code: "no_session",
          status: 0,
          message: "no access token: no offline sent",
        });
        return;
      }
      const answer = await this.#post(bearer);
      if (answer.status === 200) {
        this.#emit("ping", {
          state: "offline",
          user: answer.body.user as PingResult,
        });
        return;
      }
      if (tries < OFFLINE_TRIES && _transient(answer)) {
        // Tried again after Retry-After (1 s without one, 5 s at most).
        const wait = Math.min((answer.retryAfterS ?? 1) * 1000, 5_000);
        await new Promise<void>((r) => this.#clock.setTimeout(() => r(), wait));
        continue;
      }
      if (_tokenExpired(answer) && !refreshed && token === undefined) {
        // The token expired meanwhile (a laptop back from sleep).
        refreshed = true;
        if (await this.#refresh() && this.#token !== bearer) {
          bearer = this.#token;
          continue;
        }
      }
      this.#failed("offline", false, answer);
      return;
    }
  }

  #lasts(token: string | null, ms: number): boolean {
    const exp = token === null ? undefined : _claims(token)?.exp;
    return typeof exp === "number" && exp * 1000 - this.#clock.now() > ms;
  }

  // One try of the offline that must land, bounded by requestTimeoutMs.
  async #post(token: string): Promise<_Answer> {
    const abort = new AbortController();
    try {
      return await this.#deadline((async () => {
        const res = await this.#sendOffline(token, { signal: abort.signal });
        return await _answerOf(res);
      })());
    } catch (error) {
      abort.abort();
      return _noAnswer(error);
    }
  }

  // supabase-js's refreshSession, bounded; whether it gave a new session.
  async #refresh(): Promise<boolean> {
    try {
      const { data, error } = await this.#deadline(
        this.#client.auth.refreshSession(),
      );
      if (data?.session) this.#token = data.session.access_token;
      return !error;
    } catch {
      return false; // No answer in time: the failure is reported as it is.
    }
  }

  // Whether a 401 says the session is over for good, which the kit ends as
  // on SIGNED_OUT: Auth no longer knows the session or its user (the
  // `error_code` the API passes on from Auth: a sign-out on another device,
  // supabase-js's default `global` one included, a password change, an
  // admin's sign-out; a deleted or banned user), or supabase-js holds no
  // session any more (signed out where no event reaches this page: a server
  // route cleared the session's cookies). Any other 401 (`JWT expired`, a
  // misconfigured key) is reported and tried again at the interval.
  async #sessionOver(answer: _Answer): Promise<boolean> {
    if (answer.status !== 401) return false;
    if (_SESSION_OVER.has(String(answer.body.error_code))) return true;
    return !(await this.#session());
  }

  // The kit stops first, so that no offline goes with a token Auth refuses;
  // then, for a session Auth no longer knows, supabase-js is asked for the
  // user, which makes it drop that session and tell the app (SIGNED_OUT),
  // rather than keep it until its next refresh fails (up to an hour).
  async #sessionEnded(answer: _Answer): Promise<void> {
    await this.#signedOut(null);
    if (answer.body.error_code === "session_not_found") {
      await this.#deadline(this.#client.auth.getUser()).catch(() => {});
    }
  }

  // Whether supabase-js holds a session now; its access token becomes the
  // one the kit's own requests (the offline pings) carry. Bounded: a
  // refresh stuck behind supabase-js's auth lock leaves the token as it was.
  async #session(): Promise<boolean> {
    try {
      const { data } = await this.#deadline(this.#client.auth.getSession());
      if (data.session) this.#token = data.session.access_token;
      return data.session !== null;
    } catch {
      return true; // Unknown: nothing is concluded from it.
    }
  }

  #failed(state: string, scheduled: boolean, answer: _Answer): void {
    const code = String(answer.body.code ?? "http_error");
    const error: KitError = {
      source: "ping",
      code,
      status: answer.status,
      message: String(answer.body.error ?? answer.body.message ?? code),
    };
    // An offline's 404 (the previous user of an account switch has no row)
    // says nothing about the kit, which may be running for another user.
    if (answer.status === 404 && state === "online") {
      this.#halt("not_found");
      this.#emit("error", error);
      return;
    }
    if (state === "online" && scheduled && this.#running) {
      if (_transient(answer)) {
        this.#failures++;
        this.#offlineFailure = answer.status === 0;
        error.retryInMs = this.#backoff(answer.retryAfterS);
        this.#setState("retrying");
      } else {
        error.retryInMs = this.#spread(this.#intervalMs);
      }
      this.#schedule(error.retryInMs);
    }
    this.#emit("error", error);
  }

  // Exponential from backoffBaseMs, never sooner than Retry-After, capped,
  // with jitter on top so that clients an outage stopped together do not
  // come back together.
  #backoff(retryAfterS: number | null): number {
    const exp = this.#backoffBaseMs * 2 ** Math.min(this.#failures - 1, 30);
    const floor = retryAfterS === null ? 0 : retryAfterS * 1000;
    const wait = Math.min(Math.max(exp, floor), this.#backoffMaxMs);
    return Math.max(
      Math.round(wait * (1 + this.#jitter * this.#random())),
      floor,
    );
  }

  // The device has a network again: a ping or a watch that is waiting out
  // its backoff after a network failure tries now, not minutes later. A
  // wait set by the API (a 503, Retry-After) is kept.
  #networkBack(): void {
    if (this.#page.hidden()) return;
    if (this.#running && this.#state === "retrying" && this.#offlineFailure) {
      this.#tick();
    }
    for (const w of this.#watchers) {
      if (w.offlineFailure && !w.busy && !w.stopped && this.#polls(w)) {
        void this.#poll(w);
      }
    }
  }

  #spread(ms: number): number {
    return Math.round(ms * (1 + this.#jitter * (this.#random() - 0.5)));
  }

  // ---- watching ---------------------------------------------------------

  #clearWatch(w: _Watcher): void {
    if (w.timer !== null) this.#clock.clearTimeout(w.timer);
    w.timer = null;
    w.watch = null;
  }

  // `solo`: a watcher that follows another tab polls once for itself, its
  // watchdog having fired (see #watchdog).
  async #poll(w: _Watcher, solo = false): Promise<void> {
    if (w.stopped || w.busy || (!solo && !this.#polls(w))) return;
    this.#clearWatch(w);
    w.busy = true;
    let wait = this.#spread(this.#watchIntervalMs);
    // A full read (or a changes-since read) may take several pages; the
    // first page's cursor is the earliest, so keeping it misses nothing,
    // also when a failed read goes on from its next page at the next poll
    // (a read of thousands of pages is not started over for one lost page).
    const from = w.partial;
    w.partial = null;
    // A map handed by the polling tab meanwhile (#follow) is newer than
    // what this poll reads from: its answer, or failure, is then dropped.
    // So is that of a poll made for the other tabs by a watcher that has
    // let go of the lock since (hidden): the tab polling now goes on from
    // the cursor they share, which this answer would take it off.
    const epoch = w.epoch;
    const forOthers = !solo && w.share?.leading === true;
    const current = () =>
      w.epoch === epoch && !(forOthers && !w.share?.leading);
    let since = from ? from.since : w.cursor;
    let resync = from ? from.resync : since === null;
    let cursor: string | null = from?.cursor ?? null;
    let asOf: number | null = from?.asOf ?? null;
    let afterId: number | null = from?.afterId ?? null;
    const users: PresenceUser[] = from?.users ?? [];
    const removed: number[] = from?.removed ?? [];
    // A full read, from the first page, instead of what was read so far.
    const startOver = () => {
      since = null;
      resync = true;
      cursor = null;
      asOf = null;
      afterId = null;
      users.length = 0;
      removed.length = 0;
    };
    try {
      let refreshed = false;
      for (;;) {
        const body: Record<string, unknown> = { limit: this.#pageSize };
        if (since !== null) body.cursor = since;
        if (afterId !== null) body.after_id = afterId;
        if (forOthers && w.share) this.#tellReading(w.share);
        const answer = await this.#invoke("presence", body);
        if (w.stopped) return;
        if (_tokenExpired(answer) && !refreshed) {
          // Once per poll, as pings do; a second one is reported.
          refreshed = true;
          if (await this.#refresh()) continue;
        }
        if (answer.status === 400 && since !== null) {
          // The cursor was refused (a deploy that changed its format, a
          // tampered store): drop it and start over with a full read now,
          // never resend it.
          w.cursor = null;
          startOver();
          continue;
        }
        if (answer.status !== 200) throw answer;
        if (answer.body.resync === true && since !== null) {
          // The cursor cannot be continued, on whichever page (it may go
          // stale between two): this answer is the first page of a full
          // read, `after_id` ignored. Start over from it, without the
          // cursor; following its pages with the cursor would be answered
          // with this same first page, for ever.
          startOver();
        }
        if (cursor === null) asOf = _serverTime(answer.body);
        cursor ??= String(answer.body.cursor);
        users.push(...(answer.body.users as PresenceUser[]));
        removed.push(...((answer.body.removed ?? []) as number[]));
        const next = answer.body.next_after_id as number | null;
        if (next !== null && afterId !== null && next <= afterId) {
          // Pages go up by id; one that does not would be read for ever.
          // Reported, and read again at the next interval.
          throw {
            status: answer.status,
            body: { code: "bad_page", error: "next_after_id did not go up" },
            retryAfterS: null,
          };
        }
        afterId = next;
        if (afterId === null || w.stopped) break;
      }
      if (w.stopped) return;
      if (current()) {
        // A new map each time, so that an app comparing maps (React's state)
        // sees every change.
        const map = resync ? new Map<number, PresenceUser>() : new Map(w.users);
        for (const u of users) map.set(u.id, u);
        for (const id of removed) map.delete(id);
        w.users = map;
        w.cursor = cursor;
        w.asOf = asOf;
        _record(w, resync ? null : since, users, removed);
        w.failures = 0;
        w.offlineFailure = false;
        w.lastFailure = null;
        // The user's other watchers read it from here; told before this
        // watcher's callback, which may change the arrays it is handed.
        if (w.share?.leading) {
          this.#tell({
            kind: "read",
            tab: this.#tabId,
            user: w.share.user,
            every: w.share.every,
            to: null,
            from: resync ? null : since,
            cursor: w.cursor,
            changed: users,
            removed,
            resync,
            asOf,
          });
        }
        this.#changed(w, { changed: users, removed, resync });
      }
    } catch (failure) {
      if (w.stopped) return;
      if (current()) {
        const answer = _isAnswer(failure) ? failure : _noAnswer(failure);
        // Pages already read are kept for the next poll, unless the pages
        // themselves were wrong.
        if (afterId !== null && answer.body.code !== "bad_page") {
          w.partial = {
            since,
            resync,
            cursor,
            asOf,
            afterId,
            users,
            removed,
          };
        }
        w.failures++;
        w.offlineFailure = answer.status === 0;
        if (_transient(answer)) {
          const saved = this.#failures;
          this.#failures = w.failures;
          wait = this.#backoff(answer.retryAfterS);
          this.#failures = saved;
        }
        const over = await this.#sessionOver(answer);
        const error: KitError = {
          source: "watch",
          code: String(answer.body.code ?? "http_error"),
          status: answer.status,
          message: String(answer.body.error ?? answer.body.message ?? ""),
        };
        if (!over) error.retryInMs = wait;
        this.#emit("error", error);
        if (!over && w.share?.leading) {
          w.lastFailure = { error, until: this.#elapsed() + wait };
          this.#tell({
            kind: "error",
            tab: this.#tabId,
            user: w.share.user,
            every: w.share.every,
            error,
          });
        }
        if (over) await this.#sessionEnded(answer);
      }
    } finally {
      w.busy = false;
    }
    if (!w.stopped && !this.#page.hidden()) {
      if (this.#polls(w)) {
        w.timer = this.#clock.setTimeout(() => void this.#poll(w), wait);
      } else {
        // A poll of its own (the watchdog's) waits as that poll was told
        // (a Retry-After, its backoff) before the next.
        this.#watchdog(w, wait);
      }
    }
  }

  // A visible watcher that follows another tab and hears nothing from it
  // for three of its intervals (or, after the polling tab's announced
  // backoff or a read it announced on its way, that wait and one interval
  // more) polls once for itself: whatever keeps the polling tab's word from
  // it (a hung tab, a channel of the app's that does not carry every
  // message, lock and channel partitioned apart), it is never left without
  // reads and without errors. Each read or error heard from the polling
  // tab winds it again, and `reading`, which the polling tab posts at each
  // page it sends, lets it wait for that read (#awaitRead), which a read
  // slower than two intervals (a phone's network) would otherwise outlast.
  #watchdog(w: _Watcher, retryInMs = 0): void {
    const wait = Math.max(
      3 * this.#watchIntervalMs,
      retryInMs + this.#watchIntervalMs,
    );
    const now = this.#elapsed();
    this.#armWatch(w, { wound: now, due: now + wait });
  }

  // The polling tab announced a read (a page) on its way: the watchdog
  // waits for it as long as it may take (requestTimeoutMs, and an
  // interval), but never longer past its last winding than a next read
  // started an interval after it and answered within requestTimeoutMs
  // takes. So a follower of a tab whose reads it cannot apply (all older
  // than its map) still reads for itself, and a read of many slow pages
  // makes it read once for itself too (load only: its answer is dropped
  // when the polling tab's read lands).
  #awaitRead(w: _Watcher): void {
    const now = this.#elapsed();
    if (!w.watch) {
      this.#watchdog(w, this.#requestTimeoutMs);
      return;
    }
    const due = Math.min(
      now + this.#requestTimeoutMs + this.#watchIntervalMs,
      w.watch.wound + 2 * this.#watchIntervalMs + this.#requestTimeoutMs,
    );
    if (due > w.watch.due) this.#armWatch(w, { wound: w.watch.wound, due });
  }

  #armWatch(w: _Watcher, watch: { wound: number; due: number }): void {
    this.#clearWatch(w);
    if (w.stopped || !w.share || w.share.leading || this.#page.hidden()) {
      return;
    }
    w.watch = watch;
    w.timer = this.#clock.setTimeout(() => {
      w.watch = null;
      if (!w.share || w.share.leading) return;
      // Its polling tab fell silent: it follows whichever polls next.
      w.holder = null;
      void this.#poll(w, true);
    }, Math.max(0, watch.due - this.#elapsed()));
  }

  #changed(w: _Watcher, change: Parameters<OnPresenceChange>[1]): void {
    try {
      w.onChange(w.users, change);
    } catch (error) {
      // The app's bug, not the API's: reported as such, and the poll
      // keeps its interval (never the backoff of a failed read, which
      // would poll every second while the app throws).
      this.#emit("error", {
        source: "watch",
        code: "callback",
        status: 200,
        message: _message(error),
      });
    }
  }

  // ---- one poller per user and browser ----------------------------------
  //
  // The watchers of one user in one browser queue for one lock; the one
  // that holds it polls and tells the others what it read. The browser's
  // Web Locks rather than heartbeats of our own: it lets go of a closed or
  // crashed tab's lock at once, where a heartbeat would leave the other
  // tabs without reads until it timed out, and it never grants the lock to
  // two tabs (a heartbeat's election can, with clocks of throttled
  // background tabs).

  // Whether `w` polls: alone, or holding its user's lock.
  #polls(w: _Watcher): boolean {
    return !w.joining && (w.share === null || w.share.leading);
  }

  // Who the watcher reads as decides whom it shares with: the API's answer
  // depends on the caller, so never across users. No session: alone.
  async #share(w: _Watcher): Promise<void> {
    if (this.#token === null) await this.#session();
    w.joining = false;
    if (w.stopped) return;
    const user = this.#user();
    if (user !== null) {
      w.share = {
        user,
        every: this.#watchIntervalMs,
        leading: false,
        leave: null,
      };
    }
    if (this.#page.hidden()) return; // Joins when shown.
    if (w.share) this.#join(w);
    else void this.#poll(w);
  }

  // Queues for the user's lock, polls once it holds it, and meanwhile asks
  // the tab that holds it for its map.
  #join(w: _Watcher): void {
    const share = w.share;
    if (!share || share.leave || w.stopped) return;
    const abort = new AbortController();
    let release = () => {};
    const held = new Promise<void>((resolve) => release = resolve);
    const leave = () => {
      abort.abort();
      release();
    };
    share.leave = leave;
    this.#locks!.request(
      `presence-kit:watch:${this.#url}:${share.user}:${share.every}`,
      { signal: abort.signal },
      () => {
        // Granted after it left: let go at once.
        if (share.leave !== leave || w.stopped) return Promise.resolve();
        share.leading = true;
        w.took = w.holder;
        this.#tell({
          kind: "lead",
          tab: this.#tabId,
          user: share.user,
          every: share.every,
        });
        // At once: the tab before may have been gone for a while (hidden,
        // crashed), and the map's cursor makes this read a short one.
        void this.#poll(w);
        return held;
      },
    ).catch(() => {
      // Left the queue; or refused (a sandboxed frame's SecurityError, a
      // browser without storage): then this watcher polls alone, as where
      // there are no locks, never waiting for a turn that cannot come.
      if (abort.signal.aborted || w.share !== share) return;
      w.share = null;
      if (!w.stopped && !this.#page.hidden()) void this.#poll(w);
    });
    // The tab it followed answers (or the one that took the lock from it);
    // where the locks are partitioned and the channel is not, another
    // partition's polling tab, which cannot go on from this one's cursor,
    // does not post its whole map for nothing. Its watchdog is wound
    // first: the answer may be that a read is on its way (`reading`).
    this.#watchdog(w);
    this.#askSince(w, share.user, share.every);
  }

  // Out of the queue, or lets go of the lock: the next watcher in the
  // queue polls.
  #leave(w: _Watcher): void {
    const share = w.share;
    if (!share) return;
    share.leave?.();
    share.leave = null;
    share.leading = false;
  }

  // To the other tabs, and to this kit's own other watchers (a channel
  // does not deliver to the object that posts).
  // The polling tab's read (a page of it) is on its way (`TabReading`).
  #tellReading(share: _Share): void {
    this.#tell({
      kind: "reading",
      tab: this.#tabId,
      user: share.user,
      every: share.every,
    });
  }

  #tell(m: _WatchMessage): void {
    this.#tabs?.post(m);
    this.#heardWatch(structuredClone(m));
  }

  #heardWatch(m: _WatchMessage): void {
    let reported = false;
    for (const w of this.#watchers) {
      const share = w.share;
      // Another user's messages are never read, nor another interval's; a
      // watcher out of the queue (hidden) is paused, and asks again when
      // shown, of the tab that polls by then (it hears who took the lock).
      if (
        !share || share.user !== m.user || share.every !== m.every ||
        w.stopped
      ) {
        continue;
      }
      if (m.kind === "lead") {
        if (!share.leading) {
          w.holder = m.tab;
          if (share.leave) this.#watchdog(w);
        }
        continue;
      }
      if (!share.leave) continue;
      if (m.kind === "reading") {
        if (!share.leading && (w.holder === null || m.tab === w.holder)) {
          this.#awaitRead(w);
        }
      } else if (m.kind === "error") {
        // Reported once per kit, and not again by the kit that polled; its
        // backoff holds every follower's watchdog, this kit's own too.
        if (!share.leading && (w.holder === null || m.tab === w.holder)) {
          this.#watchdog(w, m.error.retryInMs ?? 0);
          if (!reported && m.tab !== this.#tabId) {
            this.#emit("error", { ...m.error });
          }
          reported = true;
        }
      } else if (m.kind === "sync") {
        if (
          share.leading && w.cursor !== null && m.watcher !== w.id &&
          // A tab with an older kit (a deploy meanwhile) names none.
          (m.holder == null || m.holder === this.#tabId ||
            m.holder === w.took)
        ) {
          this.#answer(w, share, m);
        }
        // A watcher that has just come (or asks again) while a read is on
        // its way: told so, after the answer (which winds its watchdog), so
        // that it waits for the read.
        if (share.leading && w.busy && m.watcher !== w.id) {
          this.#tellReading(share);
        }
      } else if (!share.leading && (m.to === null || m.to === w.id)) {
        // One polling tab is followed: the one heard first, until another
        // says it took the lock. Where the browser partitions the locks but
        // not the channel (the app embedded in another site's page and
        // open at top level), two tabs poll, and their reads, which go on
        // from different cursors, are never mixed.
        w.holder ??= m.tab;
        if (m.tab !== w.holder) {
          // A read that goes on from this watcher's own cursor, or an
          // answer to its own sync, is applied whoever sent it, and its
          // sender followed from then on: a tab of an older kit (tabs open
          // across a deploy) takes the lock without a `lead`, and answers
          // a sync that names another tab. Reads from other cursors stay
          // unmixed.
          if (m.to !== w.id && (m.from === null || m.from !== w.cursor)) {
            continue;
          }
          w.holder = m.tab;
        }
        const taken = this.#follow(w, m);
        // An answer that carries the polling tab's failure: reported here
        // too, and waited out with it.
        if (m.error && m.to === w.id) {
          this.#emit("error", { ...m.error });
          this.#watchdog(w, m.error.retryInMs ?? 0);
        } else if (taken) this.#watchdog(w);
        // A read it could not apply (missed, so asked again; or refused as
        // older) does not wind the watchdog: if it never catches up (every
        // map the polling tab has is older, the database's clock having
        // gone back in a failover), it polls for itself after its
        // intervals and goes on from what it reads.
      }
    }
  }

  // The polling watcher `w` answers a follower's sync: the changes since
  // the follower's cursor where it has them (a tab shown again after a
  // while, a missed read), else its whole map. Every tab of the origin
  // deserializes what is posted, and a whole map of 10,000 users is about
  // 1.2 MB; it also tells the app `resync`.
  #answer(w: _Watcher, share: _Share, m: TabSync): void {
    const changes = _changesSince(w, m.cursor ?? null);
    this.#tell({
      kind: "read",
      tab: this.#tabId,
      user: share.user,
      every: share.every,
      to: m.watcher,
      from: changes ? m.cursor : null,
      cursor: w.cursor!,
      changed: changes ? changes.changed : [...w.users.values()],
      removed: changes ? changes.removed : [],
      resync: changes === null,
      asOf: w.asOf,
      // Its failure while it still waits to try again (one from a turn it
      // held before is over).
      ...(w.lastFailure && w.lastFailure.until > this.#elapsed() && {
        error: {
          ...w.lastFailure.error,
          retryInMs: w.lastFailure.until - this.#elapsed(),
        },
      }),
    });
  }

  // Asks the polling tab `w` follows for the changes since `w`'s cursor
  // (a `sync`; see #answer).
  #askSince(w: _Watcher, user: string, every: number): void {
    this.#tell({
      kind: "sync",
      tab: this.#tabId,
      user,
      every,
      watcher: w.id,
      cursor: w.cursor,
      holder: w.holder,
    });
  }

  // A read of the polling tab, applied as if this watcher had polled;
  // one that does not go on from this watcher's cursor (a read missed)
  // is not, the polling tab is asked for the changes since it instead.
  // True when this watcher's map is as new as the read (applied, or had):
  // only then does it wind the watchdog (see #heardWatch).
  #follow(w: _Watcher, m: TabRead): boolean {
    // A second answer to its asking (it asked twice), or one it has.
    if (m.to !== null && m.cursor === w.cursor) return true;
    if (!m.resync && m.from !== w.cursor) {
      this.#askSince(w, m.user, m.every);
      return false;
    }
    // A whole map older than the one held (a tab that took the lock with
    // an older map, its first read still on its way or failing) is not
    // applied: the polling tab's next read leads here again.
    if (m.resync && m.asOf != null && w.asOf !== null && m.asOf < w.asOf) {
      return false;
    }
    const map = m.resync ? new Map<number, PresenceUser>() : new Map(w.users);
    for (const u of m.changed) map.set(u.id, u);
    for (const id of m.removed) map.delete(id);
    w.users = map;
    w.cursor = m.cursor;
    w.asOf = m.asOf ?? (m.resync ? null : w.asOf);
    _record(w, m.resync ? null : m.from, m.changed, m.removed);
    w.partial = null;
    w.epoch++;
    this.#changed(w, {
      changed: m.changed,
      removed: m.removed,
      resync: m.resync,
    });
    return true;
  }

  // ---- plumbing ---------------------------------------------------------

  // supabase.functions.invoke, as apps call the functions; an error answer
  // comes back as a value with its status, body and Retry-After. Throws
  // only when no answer came.
  async #invoke(
    name: string,
    body: Record<string, unknown>,
  ): Promise<_Answer> {
    const { data, error } = await this.#deadline(
      this.#client.functions.invoke(name, {
        body,
        timeout: this.#requestTimeoutMs,
      }),
    );
    if (!error) {
      return { status: 200, body: data ?? {}, retryAfterS: null };
    }
    const res = (error as { context?: unknown }).context;
    if (!(res instanceof Response)) throw error;
    return await _answerOf(res);
  }

  // supabase-js's `timeout` aborts the request; this also bounds the wait
  // for the session's token before it is sent (supabase-js's auth lock),
  // which no signal reaches, and the kit's own calls of supabase-js's auth
  // (getSession, refreshSession), which wait on that lock too. A stuck call
  // would otherwise hold every later ping, poll and sign-out behind it.
  async #deadline<T>(work: Promise<T>): Promise<T> {
    let timer: unknown = null;
    const late = new Promise<never>((_, reject) => {
      timer = this.#clock.setTimeout(
        () => reject(new Error(`no answer in ${this.#requestTimeoutMs} ms`)),
        this.#requestTimeoutMs,
      );
    });
    try {
      return await Promise.race([work, late]);
    } finally {
      this.#clock.clearTimeout(timer);
    }
  }

  #setState(state: KitState): void {
    if (state === this.#state) return;
    this.#state = state;
    this.#emit("state", state);
  }

  #emit<K extends keyof KitEvents>(event: K, value: KitEvents[K]): void {
    for (const fn of this.#listeners[event]) {
      try {
        fn(value);
      } catch {
        // A listener's bug must not stop the pings.
      }
    }
  }
}

interface _Watcher {
  /** Its id among the user's watchers in this browser. */
  id: string;
  onChange: OnPresenceChange;
  users: Map<number, PresenceUser>;
  cursor: string | null;
  timer: unknown;
  /**
   * While it follows: when its watchdog was last wound by the polling
   * tab's read or error, and when it fires (`#elapsed()` time).
   */
  watch: { wound: number; due: number } | null;
  busy: boolean;
  failures: number;
  /** The last failure was a network one (see `#networkBack`). */
  offlineFailure: boolean;
  /** A read that failed after some pages: the next poll goes on from it. */
  partial: _PartialRead | null;
  stopped: boolean;
  /** Removes its visibility listener. */
  off: () => void;
  /** Counts the maps handed to it (#follow): a poll started before is stale. */
  epoch: number;
  /** Finding out (the session) whether it shares its user's polls. */
  joining: boolean;
  /** Shared with the user's other watchers in this browser, or alone. */
  share: _Share | null;
  /** The polling tab it follows (its `tab`), or `null` for the next heard. */
  holder: string | null;
  /**
   * The polling tab it followed when it took the lock: a sync naming that
   * tab (from a watcher hidden meanwhile) is this one's to answer.
   */
  took: string | null;
  /**
   * The reads that led to its map, oldest first, each going on from the
   * one before and the last ending at `cursor` (see {@linkcode _record}).
   */
  history: _Step[];
  /** The database's time of its map (see {@linkcode TabRead.asOf}). */
  asOf: number | null;
  /**
   * Its last poll's failure while it polls for the other tabs, and until
   * when (on `#elapsed()`) it waits before its next try; `null` after a read.
   */
  lastFailure: { error: KitError; until: number } | null;
}

// A read applied to a watcher's map: the changes from cursor `from` to
// cursor `cursor`.
interface _Step {
  from: string;
  cursor: string;
  changed: PresenceUser[];
  removed: number[];
}

// Most reads a watcher keeps (a tab hidden for 100 intervals gets its
// polling tab's whole map when shown), and most users and ids in them
// beyond its map's size (more changes than the map holds: the map is no
// bigger).
const _HISTORY_READS = 100;
const _HISTORY_ENTRIES = 1_000;

// Keeps the read just applied to `w` (from cursor `from`, now at
// `w.cursor`); `from` null (a whole map) starts over. Copies: the app's
// callback is handed the arrays and may change them.
function _record(
  w: _Watcher,
  from: string | null,
  changed: readonly PresenceUser[],
  removed: readonly number[],
): void {
  if (from === null || w.history.at(-1)?.cursor !== from) w.history = [];
  if (from === null || w.cursor === null) return;
  w.history.push({
    from,
    cursor: w.cursor,
    changed: [...changed],
    removed: [...removed],
  });
  const most = Math.max(_HISTORY_ENTRIES, w.users.size);
  let entries = 0;
  for (const step of w.history) {
    entries += step.changed.length + step.removed.length;
  }
  while (w.history.length > _HISTORY_READS || entries > most) {
    const gone = w.history.shift()!;
    entries -= gone.changed.length + gone.removed.length;
  }
}

// The changes that take a map at `cursor` to `w`'s, as one read (each id
// in `changed` or `removed`, as its last read left it), or `null` when
// `w` has not kept them.
function _changesSince(
  w: _Watcher,
  cursor: string | null,
): { changed: PresenceUser[]; removed: number[] } | null {
  if (cursor === null) return null;
  if (cursor === w.cursor) return { changed: [], removed: [] };
  const first = w.history.findIndex((step) => step.from === cursor);
  if (first < 0 || w.history.at(-1)!.cursor !== w.cursor) return null;
  const changed = new Map<number, PresenceUser>();
  const removed = new Set<number>();
  for (const step of w.history.slice(first)) {
    for (const u of step.changed) {
      changed.set(u.id, u);
      removed.delete(u.id);
    }
    for (const id of step.removed) {
      removed.add(id);
      changed.delete(id);
    }
  }
  return { changed: [...changed.values()], removed: [...removed] };
}

// What the kit posts to the other tabs about watching.
type _WatchMessage = TabLead | TabSync | TabReading | TabRead | TabError;

interface _Share {
  /** The user (`sub`) it reads as. */
  user: string;
  /** Its `watchIntervalMs`: it shares with watchers at the same only. */
  every: number;
  /** Holds the user's lock: polls for every watcher of the user. */
  leading: boolean;
  /** In the lock's queue or holding it: leaves; `null` while out. */
  leave: (() => void) | null;
}

// A poll's read so far: the cursor of its first page, the page to read
// next, and what the pages gave.
interface _PartialRead {
  since: string | null;
  resync: boolean;
  cursor: string | null;
  asOf: number | null;
  afterId: number;
  users: PresenceUser[];
  removed: number[];
}

// Auth's `error_code`s (frozen: supabase/auth `errorcode.go`) that say a
// token is refused for good: its session was ended, its user deleted or
// banned. `bad_jwt` is not one: it also says an expired token.
const _SESSION_OVER = new Set([
  "session_not_found",
  "user_not_found",
  "user_banned",
]);

const _OFFLINE_NOTE = "presence-kit:offline-at";
const _CONFIRM_MS = 2_000;

function _sessionNotes(): TabNotes | null {
  // Reading sessionStorage itself can throw (sandboxed frames).
  const store = _safe(() =>
    (globalThis as unknown as {
      sessionStorage?: {
        getItem(key: string): string | null;
        setItem(key: string, value: string): void;
      };
    }).sessionStorage
  );
  if (!store) return null;
  return {
    get: (key) => _safe(() => store.getItem(key)),
    set: (key, value) => void _safe(() => store.setItem(key, value)),
  };
}

function _safe<T>(fn: () => T): T | null {
  try {
    return fn();
  } catch {
    return null;
  }
}

// The `sub` of an access token, read without verifying it: it only tells
// this user's tabs from another user's on the same browser.
function _subject(token: string): string | null {
  const sub = _claims(token)?.sub;
  return typeof sub === "string" ? sub : null;
}

// An access token's payload, read without verifying it.
function _claims(token: string): Record<string, unknown> | null {
  try {
    const part = token.split(".")[1].replaceAll("-", "+").replaceAll("_", "/");
    const claims = JSON.parse(atob(part));
    return claims && typeof claims === "object" ? claims : null;
  } catch {
    return null;
  }
}

function _between(
  name: string,
  value: number,
  min: number,
  max = MAX_WAIT_MS,
): number {
  if (typeof value !== "number" || !(value >= min && value <= max)) {
    throw new RangeError(
      `PresenceKit: ${name} must be a number from ${min} to ${max}`,
    );
  }
  return value;
}

// An answer as the kit reads it: its status, its JSON body (empty when it
// is not JSON: a proxy's page, whose status says enough) and Retry-After.
async function _answerOf(res: Response): Promise<_Answer> {
  let parsed: Record<string, unknown> = {};
  try {
    const value = await res.json();
    if (value && typeof value === "object") parsed = value;
  } catch {
    // Not JSON.
  }
  const retry = Number(res.headers.get("retry-after"));
  return {
    status: res.status,
    body: parsed,
    retryAfterS: Number.isFinite(retry) && retry > 0
      ? Math.min(retry, MAX_WAIT_MS / 1000)
      : null,
  };
}

// The API's `server_time` of an answer, ms since the epoch; `null` when it
// has none (an older API) or it does not parse.
function _serverTime(body: Record<string, unknown>): number | null {
  const at = typeof body.server_time === "string"
    ? Date.parse(body.server_time)
    : NaN;
  return Number.isFinite(at) ? at : null;
}

// What a call that got no answer (a network failure, the deadline) counts as.
function _noAnswer(error: unknown): _Answer {
  return {
    status: 0,
    body: { code: "network", error: _message(error) },
    retryAfterS: null,
  };
}

// The functions' answer to an expired access token (docs/api.md: `error`
// is exactly `JWT expired`): worth one refresh of the session.
function _tokenExpired(answer: _Answer): boolean {
  return answer.status === 401 && answer.body.error === "JWT expired";
}

// No answer, or the API or a gateway failing: worth trying again later.
function _transient(answer: _Answer): boolean {
  return answer.status === 0 || answer.status >= 500;
}

function _isAnswer(value: unknown): value is _Answer {
  return typeof value === "object" && value !== null && "status" in value &&
    "body" in value;
}

// Only the message: an error object from fetch may hold the request.
function _message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
