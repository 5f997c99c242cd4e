/**
 * Concurrency: many users pinging with random states from many concurrent
 * clients; afterwards every user's stored state and time must be those of
 * its last acknowledged ping, with no error and no deadlock.
 *
 * @module
 */
import { post, type Rng, type Tally } from "./_support.ts";
import { bulkUsers, type Target } from "./_target.ts";

/** Options of {@linkcode runPingLoad}. */
export interface PingLoadOptions {
  readonly users: number;
  readonly pingsPerUser: number;
  readonly clients: number;
  readonly rng: Rng;
}

/**
 * Each client repeatedly takes a random user that has pings left and is not
 * in flight, and pings it with a random state; a user's pings are therefore
 * sequential, so "its last acknowledged ping" is well defined, while all
 * users interleave across the clients.
 */
export async function runPingLoad(
  t: Target,
  tally: Tally,
  o: PingLoadOptions,
): Promise<void> {
  const category = "concurrency: pings";
  const setupStarted = performance.now();
  const users = await bulkUsers(
    t,
    o.users,
    `load${crypto.randomUUID().slice(0, 6)}-`,
  );
  tally.figure(
    "concurrency: users created (bulk SQL + ES256 tokens)",
    `${users.length} in ${(performance.now() - setupStarted).toFixed(0)} ms`,
  );
  const left = users.map(() => o.pingsPerUser);
  const busy = new Set<number>();
  const last = new Map<number, { state: string; at: string }>();
  const latencies: number[] = [];
  let open = users.length;
  const started = performance.now();
  const client = async () => {
    while (open > 0) {
      const candidates: number[] = [];
      for (let i = 0; i < users.length && candidates.length < 64; i++) {
        const j = (i + o.rng.int(users.length)) % users.length;
        if (left[j] > 0 && !busy.has(j)) candidates.push(j);
      }
      if (!candidates.length) {
        await new Promise((r) => setTimeout(r, 1));
        continue;
      }
      const j = o.rng.pick(candidates);
      busy.add(j);
      left[j]--;
      if (left[j] === 0) open--;
      const state = o.rng.pick(["online", "offline", " OFFLINE ", "Online"]);
      const viaQuery = o.rng.chance(0.2);
      const t0 = performance.now();
      tally.count(category);
      try {
        const a = await post(t.apiUrl, "presence-ping", {
          headers: { Authorization: `Bearer ${users[j].token}` },
          body: viaQuery ? undefined : JSON.stringify({ state }),
          query: viaQuery ? `?state=${encodeURIComponent(state)}` : "",
          signal: AbortSignal.timeout(30_000),
        });
        latencies.push(performance.now() - t0);
        const expected = state.trim().toLowerCase();
        if (
          tally.check(
            category,
            a.status === 200 && a.body.user.id === users[j].rowId &&
              a.body.user.presence_state === expected,
            () => `user ${j}: ${a.status} ${a.text.slice(0, 160)}`,
          )
        ) {
          last.set(j, { state: expected, at: a.body.user.ultimo_acceso });
        }
      } catch (error) {
        tally.fail(category, `user ${j}: ${error}`);
      } finally {
        busy.delete(j);
      }
    }
  };
  await Promise.all(Array.from({ length: o.clients }, client));
  const elapsed = performance.now() - started;
  latencies.sort((a, b) => a - b);
  const pct = (p: number) =>
    latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))]
      ?.toFixed(0);
  tally.figure(
    "concurrency: pings",
    `${latencies.length} from ${o.clients} clients in ${
      (elapsed / 1000).toFixed(1)
    } s (${(latencies.length / elapsed * 1000).toFixed(0)}/s), p50 ${
      pct(0.5)
    } ms, p99 ${pct(0.99)} ms, max ${pct(1)} ms`,
  );

  const rows = await t.sql`
    select id, presence_state,
      to_char(ultimo_acceso at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as at
    from public.usuarios where id = any(${
    users.map((u) => u.rowId!)
  }::bigint[])`;
  const byId = new Map(rows.map((r) => [Number(r.id), r]));
  const check = "concurrency: last acknowledged ping stored";
  for (const [j, u] of users.entries()) {
    tally.count(check);
    const want = last.get(j);
    const got = byId.get(u.rowId!);
    tally.check(
      check,
      want !== undefined && got?.presence_state === want.state &&
        got?.at === want.at,
      () =>
        `user ${j} row ${u.rowId}: stored ${got?.presence_state} ${got?.at}, last acknowledged ${want?.state} ${want?.at}`,
    );
  }
}
