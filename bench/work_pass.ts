/**
 * Pass 1, the work of one ping: the minted tokens checked against the
 * stand-in, then statements and round trips to Postgres and requests to
 * Auth per ping, counted by proxies, per token kind and verification
 * setting. The per-ping statement the fast path sends is kept for the
 * database ceiling.
 *
 * @module
 */
import type postgres from "postgres";
import { type BenchContext, perPing } from "./context.ts";
import { runDenoClient } from "./load.ts";
import type { ProxyCounts, SeenStatement } from "./pgproxy.ts";
import type { Variant } from "./stack.ts";
import { delta, readCounters } from "./stats.ts";
import type { TokenKind, WorkPerPing } from "./types.ts";
import { type BenchTokens, compareWithIssued, USER_NAMING } from "./users.ts";

/** What pass 1 found. */
export interface WorkFindings {
  tokenChecks: string[];
  workPerPing: WorkPerPing[];
  /** The statements the ES256 fast path sends on every ping. */
  perPingStatements: SeenStatement[];
  /** A user whose values the captured statements carry. */
  sampleUser: number;
}

/**
 * Checks the tokens and counts the work per ping of each path.
 *
 * @example
 * ```ts
 * const work = await measureWork(ctx, defaults, 2000);
 * ```
 */
export async function measureWork(
  ctx: BenchContext,
  defaults: Record<string, string>,
  pings: number,
): Promise<WorkFindings> {
  const { stack } = ctx;
  const tokenChecks = await _checkTokens(
    stack.variants.main,
    stack.anonKey,
    ctx.tokens,
    ctx.users,
  );
  for (const line of tokenChecks) ctx.log(`Token check: ${line}`);
  const workPerPing: WorkPerPing[] = [];
  const counted: [string, Variant, TokenKind][] = [
    ["ES256 (as Auth issues)", stack.variants.count, "es256"],
    ["HS256", stack.variants.count, "hs256"],
  ];
  if (stack.variants["count-auth"]) {
    counted.push([
      "ES256, PRESENCE_VERIFY=auth",
      stack.variants["count-auth"],
      "es256",
    ]);
  }
  let perPingStatements: SeenStatement[] = [];
  for (const [label, variant, kind] of counted) {
    ctx.log(`Counting the work of ${pings} pings: ${label}`);
    const work = await _countWork(
      ctx.sql,
      () => stack.quiesce(),
      variant,
      ctx.tokens[kind],
      pings,
    );
    workPerPing.push({
      label,
      kind,
      settings: variant === stack.variants.count
        ? defaults
        : { ...defaults, PRESENCE_VERIFY: "auth" },
      ...work.figures,
    });
    if (kind === "es256" && variant === stack.variants.count) {
      // Statements run at least once per two pings are the ping's own;
      // one-off lookups are left out.
      perPingStatements = work.statements.filter((s) =>
        s.count >= work.figures.pings / 2
      );
    }
  }
  if (!perPingStatements.length) {
    throw new Error("No per-ping statement captured");
  }
  return {
    tokenChecks,
    workPerPing,
    perPingStatements,
    sampleUser: _sampleUserOf(perPingStatements[0], ctx.users),
  };
}

async function _checkTokens(
  variant: Variant,
  anonKey: string,
  tokens: BenchTokens,
  users: number,
): Promise<string[]> {
  const lines: string[] = [];
  const sample = [1, Math.ceil(users / 2), users];
  for (const n of sample) {
    for (const kind of ["es256", "hs256"] as const) {
      const token = tokens[kind][n - 1];
      const user = await fetch(`${variant.apiUrl}/auth/v1/user`, {
        headers: { apikey: anonKey, Authorization: `Bearer ${token}` },
      });
      const body = await user.json();
      if (user.status !== 200 || body.id !== USER_NAMING.id(n)) {
        throw new Error(
          `GET /auth/v1/user refused the ${kind} token of user ${n}: ${user.status}`,
        );
      }
      const ping = await fetch(variant.pingUrl, {
        method: "POST",
        headers: {
          Authorization: `Bearer ${token}`,
          "Content-Type": "application/json",
        },
        body: '{"state":"online"}',
      });
      const pinged = await ping.json();
      if (ping.status !== 200 || pinged.user?.presence_state !== "online") {
        throw new Error(
          `presence-ping refused the ${kind} token of user ${n}: ${ping.status} ${
            JSON.stringify(pinged)
          }`,
        );
      }
    }
  }
  lines.push(
    `users ${
      sample.join(", ")
    }: GET /auth/v1/user 200 with the right id and presence-ping 200, for ES256 and HS256`,
  );
  const differences = await compareWithIssued(
    variant.apiUrl,
    anonKey,
    users,
    tokens.es256[users - 1],
  );
  if (differences.length) {
    throw new Error(
      `Minted claims differ from the stand-in's: ${differences.join("; ")}`,
    );
  }
  lines.push(
    `user ${users}: minted ES256 claims equal those of a password-grant token (names, order, values; times and session aside)`,
  );
  return lines;
}

async function _countWork(
  sql: postgres.Sql,
  quiesce: () => Promise<void>,
  variant: Variant,
  tokens: readonly string[],
  pings: number,
): Promise<{
  figures: Omit<WorkPerPing, "label" | "kind" | "settings">;
  statements: ReturnType<
    NonNullable<Variant["proxies"]>["functions"]["statements"]
  >;
}> {
  const proxies = variant.proxies!;
  // Warm-up: pools connected, optional columns and JWKS cached, so the
  // figures are the steady state of a warm isolate.
  await runDenoClient({
    url: variant.pingUrl,
    tokens,
    mode: "count",
    count: 50,
    concurrency: 4,
  });
  await quiesce();
  variant.reset();
  const before = await readCounters(sql);
  const load = await runDenoClient({
    url: variant.pingUrl,
    tokens,
    mode: "count",
    count: pings,
    concurrency: 8,
  });
  await quiesce();
  const counters = delta(before, await readCounters(sql));
  const served = variant.counts();
  const ok = served.pings[200] ?? 0;
  const per = (c: ProxyCounts): ProxyCounts => {
    const out = {} as ProxyCounts;
    for (const k of Object.keys(c) as (keyof ProxyCounts)[]) {
      out[k] = ok ? c[k] / ok : 0;
    }
    return out;
  };
  return {
    figures: {
      pings: ok,
      errors: load.errors,
      functionDb: per(proxies.functions.counts()),
      authDb: per(proxies.auth.counts()),
      authHttp: Object.fromEntries(
        Object.entries(served.auth).map(([k, v]) => [k, ok ? v / ok : 0]),
      ),
      perPing: perPing(counters, ok),
    },
    statements: proxies.functions.statements(),
  };
}

// The user whose id or session the statement carries, as a parameter or
// written into its text.
function _sampleUserOf(s: SeenStatement, users: number): number {
  const values = [...(s.sampleParams ?? []), s.text];
  for (let n = 1; n <= users; n++) {
    const names = [USER_NAMING.id(n), USER_NAMING.sessionId(n)];
    if (
      values.some((v) =>
        v !== null &&
        names.some((name) => v === name || v.includes(`'${name}'`))
      )
    ) return n;
  }
  return 1;
}
