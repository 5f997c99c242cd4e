/**
 * What the benchmark measures: the shapes of its results, shared by the
 * passes, the report and the chart (and written as the JSON file).
 *
 * @module
 */
import type { LoadResult } from "./load.ts";
import type { ProxyCounts } from "./pgproxy.ts";
import type { Background, CpuUse, Environment, PgCounters } from "./stats.ts";

/** Token kinds the benchmark drives. */
export type TokenKind = "es256" | "hs256";

/** Per-ping figures derived from PostgreSQL's counters over a pass. */
export interface PerPing {
  /** Successful pings the gateway served during the pass. */
  pings: number;
  transactions: number;
  tuplesUpdated: number;
  /** Share of `usuarios` updates that were HOT, in percent (null: none). */
  hotPercent: number | null;
  /** Shared buffers touched (hit + read). */
  buffers: number;
  /** Time backends spent executing statements, ms. */
  dbActiveMs: number;
  walBytes: number;
}

/** A presence-ping pass: the load result plus what the server saw. */
export interface PingPass {
  kind: TokenKind;
  variant: string;
  load: LoadResult;
  perPing: PerPing;
  cpu: CpuUse;
  counters: PgCounters;
}

/** The work one ping does, per token kind and handler setting. */
export interface WorkPerPing {
  label: string;
  kind: TokenKind;
  settings: Record<string, string>;
  pings: number;
  errors: number;
  /** Function to Postgres, per ping. */
  functionDb: ProxyCounts;
  /** Auth stand-in to Postgres, per ping. */
  authDb: ProxyCounts;
  /** Requests reaching Auth, by path, per ping. */
  authHttp: Record<string, number>;
  perPing: PerPing;
}

/**
 * The database ceiling at one concurrency: the same work in its cheapest
 * forms on this database, each replayed by pgbench. The ceiling is the
 * faster of the two, so a faster handler cannot raise its own ceiling.
 */
export interface DbCeiling {
  /** The handler's own call of `presence.record_ping`, as it sends it. */
  functionCall: LoadResult;
  /** The inline statement (before the function) with named prepared statements. */
  inlinePrepared: LoadResult;
  /** Which of the two is the ceiling. */
  chosen: "functionCall" | "inlinePrepared";
}

/** One concurrency's presence-ping passes and ceilings. */
export interface ThroughputPoint {
  concurrency: number;
  rows: number;
  ping: Record<TokenKind, PingPass>;
  /** The database ceiling (the faster form of {@linkcode DbCeiling}). */
  db: LoadResult;
  dbForms: DbCeiling;
  http: LoadResult;
  combinedRps: number;
  ratio: Record<TokenKind, number>;
}

/** ES256 pings whose tokens the isolate has never verified, against the same tokens again. */
export interface TokenCachePass {
  concurrency: number;
  tokens: number;
  /** Every request carries a token seen for the first time. */
  firstSeen: PingPass;
  /** The same tokens, in the same order, once more (all verified before). */
  seenBefore: PingPass;
}

/** What the read-cost pass (bench/read_cost.ts) measured. */
export interface ReadCost {
  /** ES256 pings, c=16. */
  ping: PingPass;
  /** An empty changes-since call (one cursor), c=16. */
  emptyChanges: LoadResult;
  /** Distinct watchers, each polling with its own cursor, c=16. */
  watchers: number;
  watcherPolls: LoadResult;
  /** The same two beside an idle transaction holding a write. */
  besideIdle: { emptyChanges: LoadResult; watcherPolls: LoadResult };
}

/** The part of the read side whose write cost is measured. */
export type WritePart = "index" | "trigger";

/** One pgbench pass of the write-cost pass (bench/write_cost.ts). */
export interface WriteCostRow {
  part: WritePart;
  enabled: boolean;
  updatesPerS: number;
  walBytesPerUpdate: number;
  hotPercent: number | null;
}

/** Everything a run measured; written as the JSON file. */
export interface BenchResults {
  /** A poll next to a ping (bench/read_cost.ts). */
  readCost?: ReadCost;
  /** What the index and the change-log trigger cost a write (bench/write_cost.ts). */
  writeCost?: WriteCostRow[];
  environment: Environment;
  /** The machine's load before the run (other sessions share it). */
  background: Background;
  config: {
    quick: boolean;
    durationS: number;
    warmupS: number;
    users: number;
    concurrencies: number[];
    pingsPerCount: number;
    dbPoolMax: string;
    loadTool: string;
    /** Where the functions' per-request log lines went. */
    functionLogLines: number;
    handlerSettings: string[];
    /** The passes this run ran (bench/main.ts's table). */
    passes: string[];
  };
  definitions: Record<string, string>;
  tokenChecks: string[];
  workPerPing: WorkPerPing[];
  throughput: ThroughputPoint[];
  fixedRate: { targetRps: number; peakRps: number; load: LoadResult } | null;
  /** The inline statement as postgres.js sends it (unnamed, planned each time), c=16: the ceiling before the function. */
  dbInlineExtended: LoadResult | null;
  tokenCache: TokenCachePass | null;
  skipWrite: { intervalS: number; off: PingPass; on: PingPass };
  scale: { rows: number; pass: PingPass }[];
  /** The largest size's pass again without the ultimo_acceso index. */
  withoutIndex: PingPass;
  explain: { rows: number; user: number; plan: string } | null;
  fillfactor:
    | { tried: true; fillfactor: number; rows: number; pass: PingPass }
    | { tried: false; reason: string };
  /** The pgbench scripts of the two ceiling forms. */
  pgbenchScripts: { functionCall: string; inline: string };
  targets: { name: string; met: boolean; detail: string }[];
}
