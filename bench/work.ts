/**
 * Pass `work`: the minted tokens checked against the stand-in, then the
 * work of one ping, counted by proxies: statements and round trips to
 * Postgres and requests to Auth, for ES256 (what Auth issues), HS256 and
 * `PRESENCE_VERIFY=auth`. The statement the ES256 fast path sends on every
 * ping is kept for the database ceiling (bench/pgbench.ts).
 *
 * @module
 */
import { LOCAL_ANON_KEY } from "../local/auth/mod.ts";
import {
  countLoad,
  delta,
  type PerPing,
  perPing,
  readCounters,
} from "./measure.ts";
import type { ProxyCounts } from "./pgproxy.ts";
import type { BenchContext, Variant } from "./stack.ts";
import { type BenchTokens, compareWithIssued, USER_NAMING } from "./users.ts";

/** The work one ping does, per path, per ping. */
export interface WorkPerPing {
  label: string;
  kind: keyof BenchTokens;
  settings: Record<string, string>;
  pings: number;
  errors: number;
  /** Function to Postgres. */
  functionDb: ProxyCounts;
  /** Auth stand-in to Postgres. */
  authDb: ProxyCounts;
  /** Requests reaching Auth, by path. */
  authHttp: Record<string, number>;
  perPing: PerPing;
}

/** Checks the tokens, counts each path's work; returns the ES256 per-ping statement too. */
export async function measureWork(ctx: BenchContext, pings: number): Promise<{
  tokenChecks: string[];
  workPerPing: WorkPerPing[];
  perPingStatement: string;
}> {
  const tokenChecks = await _checkTokens(ctx);
  tokenChecks.forEach((line) => ctx.log(`Token check: ${line}`));
  const { count, "count-auth": countAuth } = ctx.variants;
  const paths: [string, Variant, keyof BenchTokens][] = [
    ["ES256 (as Auth issues)", count, "es256"],
    ["HS256", count, "hs256"],
    ["ES256, PRESENCE_VERIFY=auth", countAuth, "es256"],
  ];
  const workPerPing: WorkPerPing[] = [];
  let perPingStatement = "";
  for (const [label, variant, kind] of paths) {
    ctx.log(`Counting the work of ${pings} pings: ${label}`);
    const tokens = ctx.tokens[kind];
    // Warm-up: pools connected, optional columns and JWKS cached, so the
    // figures are those of a warm isolate.
    await countLoad(variant.pingUrl, tokens, 50, 4);
    await ctx.quiesce();
    variant.reset();
    const before = await readCounters(ctx.sql);
    const load = await countLoad(variant.pingUrl, tokens, pings, 8);
    await ctx.quiesce();
    const counters = delta(before, await readCounters(ctx.sql));
    const served = variant.counts();
    const ok = served.pings[200] ?? 0;
    const per = <T extends object>(counts: T) =>
      Object.fromEntries(
        Object.entries(counts).map(([k, v]) => [k, ok ? v / ok : 0]),
      ) as T;
    const proxies = variant.proxies!;
    workPerPing.push({
      label,
      kind,
      settings: { ...ctx.variants.main.settings, ...variant.settings },
      pings: ok,
      errors: load.errors,
      functionDb: per(proxies.functions.counts()),
      authDb: per(proxies.auth.counts()),
      authHttp: per(served.auth),
      perPing: perPing(counters, ok),
    });
    if (!perPingStatement) {
      // The statement parsed on (nearly) every ping; one-off lookups are not.
      const [top] = proxies.functions.statements();
      if (!top || top.count < ok / 2) {
        throw new Error("No per-ping statement captured");
      }
      perPingStatement = top.text.trim();
    }
  }
  return { tokenChecks, workPerPing, perPingStatement };
}

// Users 1, N/2 and N: Auth's GET /user and a ping accept each kind of
// token; and the ES256 claims equal those of a token the stand-in issues.
async function _checkTokens(ctx: BenchContext): Promise<string[]> {
  const { apiUrl, pingUrl } = ctx.variants.main;
  const sample = [1, Math.ceil(ctx.users / 2), ctx.users];
  for (const n of sample) {
    for (const kind of ["es256", "hs256"] as const) {
      const auth = { Authorization: `Bearer ${ctx.tokens[kind][n - 1]}` };
      const user = await fetch(`${apiUrl}/auth/v1/user`, {
        headers: { apikey: LOCAL_ANON_KEY, ...auth },
      }).then((r) => r.json());
      const ping = await fetch(pingUrl, {
        method: "POST",
        headers: { ...auth, "Content-Type": "application/json" },
        body: '{"state":"online"}',
      }).then((r) => r.json());
      if (
        user.id !== USER_NAMING.id(n) || ping.user?.presence_state !== "online"
      ) {
        throw new Error(
          `The ${kind} token of user ${n} was refused: ${
            JSON.stringify({ user, ping })
          }`,
        );
      }
    }
  }
  const differences = await compareWithIssued(
    apiUrl,
    LOCAL_ANON_KEY,
    ctx.users,
    ctx.tokens.es256[ctx.users - 1],
  );
  if (differences.length) {
    throw new Error(
      `Minted claims differ from the stand-in's: ${differences.join("; ")}`,
    );
  }
  return [
    `users ${
      sample.join(", ")
    }: GET /auth/v1/user 200 with the right id and presence-ping 200, for ES256 and HS256`,
    `user ${ctx.users}: minted ES256 claims equal those of a password-grant token (names, order, values; times and session aside)`,
  ];
}
