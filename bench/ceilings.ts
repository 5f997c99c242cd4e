/**
 * The two ceilings a ping is held against, each measured alone with the
 * same concurrency:
 *
 * - the database: the same work in its cheapest forms on this database,
 *   replayed by pgbench: the handler's own call of `presence.record_ping`
 *   (as it sends it: unnamed, in one flight), and the inline statement the
 *   handler used before the function (kept as its fallback) with named
 *   prepared statements, i.e. planned once per connection. The ceiling is
 *   the faster of the two, so a faster implementation cannot raise its own
 *   ceiling;
 * - HTTP: a bare Deno handler returning the same JSON (bench/stack.ts).
 *
 * @module
 */
import postgres from "postgres";
import { inlinePresenceForSession } from "./inline_ping.ts";
import { LOCAL_USERNAME_MATCH_DOMAINS } from "../local/fixture.ts";
import { type BenchContext, withCpu } from "./context.ts";
import type { LoadResult } from "./load.ts";
import {
  type ReplayStatement,
  replayStatements,
  runPgbench,
  typeNames,
} from "./pgbench.ts";
import type { SeenStatement } from "./pgproxy.ts";
import type { DbCeiling } from "./types.ts";
import { USER_NAMING } from "./users.ts";

/** The two forms of a ping's database work, ready for pgbench. */
export interface CeilingStatements {
  /** The handler's call of the function, as captured. */
  functionCall: ReplayStatement[];
  /** The inline statement, as the fallback path builds it. */
  inline: ReplayStatement[];
  /** The texts as sent, for the report. */
  raw: { functionCall: string; inline: string };
}

/**
 * Both forms: the captured per-ping statements of the fast path, and the
 * inline statement built by the handler's own code for user 1 (run once,
 * with the text and parameters postgres.js sends caught on the way).
 */
export async function ceilingStatements(
  ctx: BenchContext,
  captured: readonly SeenStatement[],
  sampleUser: number,
): Promise<CeilingStatements> {
  const functionCall = await _replayable(ctx.sql, captured, sampleUser);
  const sent: SeenStatement[] = [];
  const spy = postgres(ctx.stack.dbUrl, {
    max: 1,
    prepare: false,
    onnotice: () => {},
    debug: (_conn, text, params) => {
      if (/update public\.usuarios/.test(text)) {
        sent.push({
          text,
          paramTypes: [],
          count: 1,
          sampleParams: (params as unknown[]).map(_pgText),
        });
      }
    },
  });
  try {
    await inlinePresenceForSession(
      spy,
      {
        sub: USER_NAMING.id(1),
        sessionId: USER_NAMING.sessionId(1),
      },
      "online",
      // The setting the bench pins on every variant (bench/setup.ts).
      {
        rules: {
          usernameDomains: new Set(LOCAL_USERNAME_MATCH_DOMAINS.split(",")),
        },
      },
    );
  } finally {
    await spy.end({ timeout: 5 });
  }
  if (sent.length !== 1) {
    throw new Error(`Expected one inline statement, saw ${sent.length}`);
  }
  const inline = await _replayable(ctx.sql, sent, 1);
  return {
    functionCall,
    inline,
    raw: {
      functionCall: captured.map((s) => s.text.trim()).join(";\n"),
      inline: sent[0].text.trim(),
    },
  };
}

/** A pgbench script of the statements (users rotating through `:n`). */
export function pgbenchScript(
  statements: readonly ReplayStatement[],
  users: number,
): string {
  return `\\set n random(1, ${users})\n` +
    statements.map((s) => `${s.pgbench.trim()};`).join("\n");
}

/**
 * The database ceiling at concurrency `c`: both forms, each after a
 * warm-up, the faster one chosen.
 */
export async function dbCeiling(
  ctx: BenchContext,
  forms: CeilingStatements,
  c: number,
): Promise<{ db: LoadResult; forms: DbCeiling }> {
  const run = async (
    statements: ReplayStatement[],
    protocol: "extended" | "prepared",
  ) => {
    const pass = (d: number) =>
      runPgbench({
        databaseUrl: ctx.stack.dbUrl,
        statements,
        users: ctx.users,
        concurrency: c,
        durationS: d,
        protocol,
      });
    await pass(ctx.warmupS);
    await ctx.stack.quiesce();
    return await withCpu(ctx, () => pass(ctx.durationS));
  };
  ctx.log(`Concurrency ${c}: pgbench, function call`);
  const functionCall = await run(forms.functionCall, "extended");
  ctx.log(`Concurrency ${c}: pgbench, inline statement prepared`);
  const inlinePrepared = await run(forms.inline, "prepared");
  const chosen = functionCall.rps >= inlinePrepared.rps
    ? "functionCall"
    : "inlinePrepared";
  return {
    db: chosen === "functionCall" ? functionCall : inlinePrepared,
    forms: { functionCall, inlinePrepared, chosen },
  };
}

/**
 * The inline statement as postgres.js sends it without the function
 * (unnamed, planned every time): the database ceiling before the function.
 */
export async function inlineExtended(
  ctx: BenchContext,
  forms: CeilingStatements,
  c: number,
): Promise<LoadResult> {
  ctx.log(`Concurrency ${c}: pgbench, inline statement unprepared`);
  const pass = (d: number) =>
    runPgbench({
      databaseUrl: ctx.stack.dbUrl,
      statements: forms.inline,
      users: ctx.users,
      concurrency: c,
      durationS: d,
    });
  await pass(ctx.warmupS);
  await ctx.stack.quiesce();
  return await withCpu(ctx, () => pass(ctx.durationS));
}

async function _replayable(
  sql: postgres.Sql,
  seen: readonly SeenStatement[],
  sampleUser: number,
): Promise<ReplayStatement[]> {
  const described = await Promise.all(seen.map(async (s) => {
    const d = await sql.unsafe(s.text).describe();
    return { ...s, paramTypes: d.types };
  }));
  return replayStatements(
    described,
    sampleUser,
    await typeNames(sql, described.flatMap((s) => s.paramTypes)),
  );
}

// A parameter as Postgres reads it in text form: postgres.js hands its
// debug hook JavaScript values, arrays included.
function _pgText(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  if (Array.isArray(value)) {
    return `{${
      value.map((v) => `"${String(v).replace(/(["\\])/g, "\\$1")}"`).join(",")
    }}`;
  }
  return String(value);
}
