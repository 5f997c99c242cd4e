/**
 * Test harness for the Auth stand-in: a bootstrapped throw-away database,
 * the API served on a free loopback port, a settable clock and supabase-js
 * clients. Used by the `*_test.ts` files of this folder only.
 *
 * @module
 */
import postgres from "postgres";
import { createClient, type SupabaseClient } from "@supabase/supabase-js";
import { bootstrapDatabase } from "../db/bootstrap.ts";
import { createTestDatabase } from "../testing/database.ts";
import { type AuthApiOptions, createAuthApi } from "./api.ts";
import { Inbox, type MailTemplate, type MailType } from "./mailer.ts";
import {
  generateSigningKey,
  LOCAL_ANON_KEY,
  LOCAL_JWT_SECRET,
  LOCAL_SERVICE_ROLE_KEY,
  type SigningKey,
} from "./keys.ts";

/** A running stand-in with everything a test needs. */
export interface Harness {
  /** e.g. `http://127.0.0.1:43210` (the API lives under `/auth/v1`). */
  baseUrl: string;
  /** `${baseUrl}/auth/v1`. */
  authUrl: string;
  /** Client on the test database. */
  sql: postgres.Sql;
  /** The key signing access tokens. */
  signingKey: SigningKey;
  /** Where the stand-in's mails went. */
  inbox: Inbox;
  /** The stand-in's request log lines. */
  logs: string[];
  /** Moves the server's clock by `ms`. */
  advance(ms: number): void;
  /**
   * A supabase-js client with the anon key and no persistence (its PKCE
   * code verifiers kept in memory), in the implicit flow unless asked.
   */
  anon(flowType?: "implicit" | "pkce"): SupabaseClient;
  /** A supabase-js client with the service_role key. */
  admin(): SupabaseClient;
  /** Plain fetch against `/auth/v1${path}` with the anon apikey. */
  fetch(path: string, init?: RequestInit): Promise<Response>;
  /** Stops the server, closes the client and drops the database. */
  close(): Promise<void>;
}

/**
 * Starts a fresh stand-in on a fresh database; `mailerAutoconfirm: false`
 * makes sign-ups wait for confirmation; `emailTemplates`: the project's own
 * mails (config.toml `[auth.email.template.*]`); other settings as
 * config.toml's.
 */
export async function startHarness(
  options:
    & Pick<
      AuthApiOptions,
      | "mailerAutoconfirm"
      | "phoneAutoconfirm"
      | "signupEnabled"
      | "minPasswordLength"
      | "siteUrl"
      | "additionalRedirectUrls"
    >
    & { emailTemplates?: Partial<Record<MailType, MailTemplate>> } = {},
): Promise<Harness> {
  const { emailTemplates, ...apiOptions } = options;
  const db = await createTestDatabase();
  await bootstrapDatabase(db.url);
  const sql = postgres(db.url, {
    max: 4,
    prepare: false,
    onnotice: () => {},
  });
  const signingKey = await generateSigningKey();
  let offset = 0;
  const inbox = new Inbox(() => {}, { templates: emailTemplates });
  const logs: string[] = [];
  // Bound first, so mail links can point at this server.
  let handler: (req: Request) => Promise<Response> = () =>
    Promise.resolve(new Response(null, { status: 503 }));
  const server = Deno.serve(
    { port: 0, hostname: "127.0.0.1", onListen() {} },
    (req) => handler(req),
  );
  const baseUrl = `http://127.0.0.1:${server.addr.port}`;
  handler = createAuthApi({
    sql,
    jwtSecret: LOCAL_JWT_SECRET,
    signingKey,
    jwtExpiry: 3600,
    issuer: "http://127.0.0.1:54321/auth/v1",
    anonKey: LOCAL_ANON_KEY,
    serviceRoleKey: LOCAL_SERVICE_ROLE_KEY,
    externalUrl: `${baseUrl}/auth/v1`,
    now: () => Date.now() + offset,
    inbox,
    log: (line) => logs.push(line),
    ...apiOptions,
  });
  const clients: SupabaseClient[] = [];
  const client = (key: string, flowType: "implicit" | "pkce" = "implicit") => {
    const c = createClient(baseUrl, key, {
      auth: { persistSession: false, autoRefreshToken: false, flowType },
    });
    clients.push(c);
    return c;
  };
  return {
    baseUrl,
    authUrl: `${baseUrl}/auth/v1`,
    sql,
    signingKey,
    inbox,
    logs,
    advance(ms) {
      offset += ms;
    },
    anon: (flowType) => client(LOCAL_ANON_KEY, flowType),
    admin: () => client(LOCAL_SERVICE_ROLE_KEY),
    fetch(path, init = {}) {
      const headers = new Headers(init.headers);
      if (!headers.has("apikey")) headers.set("apikey", LOCAL_ANON_KEY);
      return fetch(`${baseUrl}/auth/v1${path}`, { ...init, headers });
    },
    async close() {
      for (const c of clients) await c.auth.stopAutoRefresh();
      await server.shutdown();
      await sql.end();
      await db.close();
    },
  };
}

/** A unique address for one test. */
export function freshEmail(tag = "user"): string {
  return `${tag}-${crypto.randomUUID().slice(0, 8)}@example.com`;
}

/** JSON body of a response (consumes it). */
export async function json(res: Response): Promise<Record<string, unknown>> {
  return await res.json() as Record<string, unknown>;
}

/**
 * Runs `fn` on a fresh harness ({@linkcode startHarness} with `options`)
 * and closes it, whatever `fn` does.
 */
export async function withHarness(
  fn: (h: Harness) => Promise<void>,
  options: Parameters<typeof startHarness>[0] = {},
): Promise<void> {
  const h = await startHarness(options);
  try {
    await fn(h);
  } finally {
    await h.close();
  }
}

/** Part `i` of a JWT (0 header, 1 claims), decoded. */
export function jwtPart(token: string, i: 0 | 1): Record<string, unknown> {
  const b64 = token.split(".")[i].replaceAll("-", "+").replaceAll("_", "/");
  return JSON.parse(atob(b64 + "=".repeat((4 - b64.length % 4) % 4)));
}

/** A confirmed account made through the admin API, with its password. */
export async function confirmedUser(h: Harness, password = "secret123") {
  const email = freshEmail();
  const { data, error } = await h.admin().auth.admin.createUser({
    email,
    password,
    email_confirm: true,
  });
  if (error) throw error;
  return { email, password, user: data.user! };
}
