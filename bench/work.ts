/**
 * Pass `work`: every minted token checked by a ping, then the work of one
 * ping, one ping in flight at a time (with more, the pool pipelines several
 * pings' statements into one flight), counted by proxies: statements and
 * round trips to
 * Postgres and requests to Auth, for ES256 (what Auth issues), HS256 and
 * `PRESENCE_VERIFY=auth`. The statement the ES256 fast path sends on every
 * ping is kept for the database ceiling (bench/pgbench.ts).
 *
 * @module
 */
import { countLoad, type PerPing, pingPass } from "./measure.ts";
import type { ProxyCounts } from "./pgproxy.ts";
import type { BenchContext, Variant } from "./stack.ts";
import type { BenchTokens } from "./users.ts";

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
  const tokenChecks: string[] = [];
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
    // figures are those of a warm isolate; and the tokens' check: every
    // user's token once, each answered 200 (through Auth on count-auth).
    const warm = await countLoad(variant.pingUrl, tokens, tokens.length, 4);
    if (warm.errors) {
      throw new Error(
        `${label}: ${warm.errors} of ${tokens.length} tokens refused: ${
          JSON.stringify(warm.errorKinds)
        }`,
      );
    }
    tokenChecks.push(`${label}: every user's token answered 200`);
    const pass = await pingPass(
      ctx,
      variant,
      kind,
      () => countLoad(variant.pingUrl, tokens, pings, 1),
    );
    const ok = pass.perPing.pings;
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
      errors: pass.load.errors,
      functionDb: per(proxies.functions.counts()),
      authDb: per(proxies.auth.counts()),
      authHttp: per(variant.counts().auth),
      perPing: pass.perPing,
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
