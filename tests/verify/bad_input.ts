/**
 * Bad input: a seeded generator of malformed requests (methods, missing and
 * repeated headers, Authorization variants, bodies that are not JSON or of
 * the wrong shape, deep or huge JSON, wrong content types, invalid UTF-8,
 * junk in the query string) sent byte for byte to each function, plus odd
 * but valid emails and usernames. Every answer must be JSON with `message`
 * and `code` (or a success), with a documented status that is not a 5xx.
 *
 * @module
 */
import { ERRORS } from "../../supabase/functions/_shared/errors.ts";
import {
  answerOf,
  contractProblem,
  pool,
  type RawRequest,
  rawRequest,
  type Rng,
  type Tally,
} from "./_support.ts";
import { signedInUser, type Target, type User } from "./_target.ts";

/** The functions under test. */
export type FunctionName = "presence-ping" | "auth-sync" | "presence";

/** One generated request and what it tries. */
export interface Generated {
  /** What was broken first, e.g. `authorization`; names the table row. */
  readonly category: string;
  /** Every mutation applied, for the failure report. */
  readonly mutations: readonly string[];
  readonly req: RawRequest;
  /** The request breaks HTTP/1.1 framing: the server itself may refuse it. */
  readonly framing: boolean;
}

/** Codes each function may answer to bad input (besides 200 and 204). */
export const ACCEPTED_CODES: Readonly<Record<FunctionName, readonly string[]>> =
  {
    "presence-ping": [
      "missing_bearer",
      "invalid_token",
      "user_not_found",
      "method_not_allowed",
      "payload_too_large",
    ],
    "auth-sync": [
      "missing_bearer",
      "invalid_token",
      "admin_required",
      "user_not_found",
      "method_not_allowed",
      "payload_too_large",
      "bad_json",
      "validation_failed",
      "target_not_found",
      "email_exists",
      "username_exists",
      "weak_password",
      "target_busy",
    ],
    presence: [
      "missing_bearer",
      "invalid_token",
      "user_not_found",
      "method_not_allowed",
      "payload_too_large",
      "bad_json",
      "validation_failed",
    ],
  };

const _enc = new TextEncoder();

interface _Draft {
  method: string;
  path: string;
  query: string;
  headers: [string, string | Uint8Array][];
  body: Uint8Array | null;
  chunked: boolean;
  framing: boolean;
}

/** Tokens the generator mutates. */
export interface GeneratorTokens {
  /** A valid token of the caller (a user with a row; an administrator for auth-sync). */
  readonly valid: string;
  /** Another valid token, for "several tokens". */
  readonly other: string;
}

type _Mutation = (d: _Draft, rng: Rng, tokens: GeneratorTokens) => string;

const _METHODS = [
  "GET",
  "PUT",
  "PATCH",
  "DELETE",
  "HEAD",
  "OPTIONS",
  "TRACE",
  "PROPFIND",
  "post",
  "Post",
  "FOO",
  "M-SEARCH",
];

function _setHeader(d: _Draft, name: string, value: string | Uint8Array) {
  d.headers = d.headers.filter(([n]) => n.toLowerCase() !== name.toLowerCase());
  d.headers.push([name, value]);
}

function _randomAscii(rng: Rng, n: number): string {
  let s = "";
  for (let i = 0; i < n; i++) s += String.fromCharCode(32 + rng.int(95));
  return s;
}

function _b64url(rng: Rng, n: number): string {
  const abc =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  let s = "";
  for (let i = 0; i < n; i++) s += abc[rng.int(abc.length)];
  return s;
}

const _MUTATIONS: Record<string, _Mutation> = {
  method(d, rng) {
    d.method = rng.pick(_METHODS);
    if (d.method === "OPTIONS" && rng.chance(0.5)) {
      d.headers.push(["Access-Control-Request-Method", "POST"]);
      d.headers.push(["Origin", "https://evil.example"]);
    }
    if (d.method === "GET" || d.method === "HEAD") d.body = null;
    return `method ${d.method}`;
  },
  headers(d, rng, tokens) {
    const kind = rng.int(7);
    if (kind === 0) {
      d.headers = d.headers.filter(([n]) => n.toLowerCase() !== "content-type");
      return "no content-type";
    }
    if (kind === 1) {
      d.headers.push(["Content-Type", "application/json"]);
      d.headers.push(["Content-Type", "text/plain"]);
      return "repeated content-type";
    }
    if (kind === 2) {
      d.headers.push(["Authorization", `Bearer ${tokens.other}`]);
      return "repeated authorization";
    }
    if (kind === 3) {
      for (let i = 0; i < 100; i++) d.headers.push([`X-Junk-${i}`, "x"]);
      return "100 junk headers";
    }
    if (kind === 4) {
      d.headers = d.headers.map((
        [n, v],
      ) => [rng.chance(0.5) ? n.toUpperCase() : n.toLowerCase(), v]);
      return "header name case";
    }
    if (kind === 5) {
      d.headers.push(["X-Request-Id", _randomAscii(rng, 1 + rng.int(3000))]);
      return "junk x-request-id";
    }
    d.headers.push(["Cookie", `sb-access-token=${tokens.other}`]);
    d.headers.push(["Origin", "https://evil.example"]);
    return "cookie and foreign origin";
  },
  authorization(d, rng, tokens) {
    const t = tokens.valid;
    const variants: [string, string | Uint8Array | null][] = [
      ["absent", null],
      ["empty", ""],
      ["Bearer only", "Bearer"],
      ["Bearer space", "Bearer "],
      ["lower-case bearer", `bearer ${t}`],
      ["upper-case BEARER", `BEARER ${t}`],
      ["extra spaces", `Bearer   ${t}   `],
      ["tab", `Bearer\t${t}`],
      ["two tokens", `Bearer ${t} ${tokens.other}`],
      ["comma tokens", `Bearer ${t}, Bearer ${tokens.other}`],
      ["Basic", `Basic ${btoa("user:pass")}`],
      ["Token scheme", `Token ${t}`],
      ["huge token", `Bearer ${_b64url(rng, 20_000 + rng.int(40_000))}`],
      [
        "huge JWT-shaped",
        `Bearer ${_b64url(rng, 9000)}.${_b64url(rng, 9000)}.${
          _b64url(rng, 100)
        }`,
      ],
      [
        "non-ASCII Latin-1",
        `Bearer ${t.slice(0, 20)}\u00e9\u00f1${t.slice(20)}`,
      ],
      [
        "non-ASCII UTF-8 bytes",
        new Uint8Array([
          ..._enc.encode("Bearer "),
          ..._enc.encode("tökén☃.x.y"),
        ]),
      ],
      [
        "random JWT shape",
        `Bearer ${_b64url(rng, 36)}.${_b64url(rng, 120)}.${_b64url(rng, 43)}`,
      ],
      ["truncated", `Bearer ${t.slice(0, rng.int(t.length))}`],
      ["two dots only", "Bearer .."],
      ["null", "Bearer null"],
      ["undefined", "Bearer undefined"],
      ["quoted", `Bearer "${t}"`],
      ["segments reversed", `Bearer ${t.split(".").reverse().join(".")}`],
      ["random ascii", `Bearer ${_randomAscii(rng, 1 + rng.int(200))}`],
    ];
    const [name, value] = rng.pick(variants);
    d.headers = d.headers.filter(([n]) => n.toLowerCase() !== "authorization");
    if (value !== null) d.headers.push(["Authorization", value]);
    return `authorization ${name}`;
  },
  "content-type"(d, rng) {
    const ct = rng.pick([
      "text/plain",
      "application/xml",
      "multipart/form-data; boundary=xyz",
      "application/x-www-form-urlencoded",
      "application/json; charset=latin1",
      "application/json; charset=utf-16",
      "application/json, text/html",
      "*/*",
      "",
      "application/" + "j".repeat(4000),
      "application/json\u00e9",
    ]);
    _setHeader(d, "Content-Type", ct);
    return `content-type ${ct.slice(0, 40)}`;
  },
  "body not json"(d, rng) {
    const bodies: [string, Uint8Array][] = [
      ["random bytes", rng.bytes(1 + rng.int(2000))],
      ["open brace", _enc.encode("{")],
      ["open bracket", _enc.encode("[")],
      ["single quotes", _enc.encode("{'state':'offline'}")],
      ["trailing comma", _enc.encode('{"state":"offline",}')],
      ["form encoded", _enc.encode("state=offline&action=update")],
      ["xml", _enc.encode("<state>offline</state>")],
      ["NaN", _enc.encode('{"id": NaN}')],
      ["comment", _enc.encode('{"state":"offline"/* x */}')],
      ["whitespace", _enc.encode(" \n\t ")],
      ["nul bytes", new Uint8Array(64)],
      [
        "BOM",
        new Uint8Array([
          0xef,
          0xbb,
          0xbf,
          ..._enc.encode('{"state":"offline"}'),
        ]),
      ],
    ];
    const [name, body] = rng.pick(bodies);
    d.body = body;
    return `body ${name}`;
  },
  "body wrong shape"(d, rng) {
    const shapes: [string, unknown][] = [
      ["array", ["offline"]],
      ["string", "offline"],
      ["number", 42],
      ["null", null],
      ["true", true],
      ["state number", { state: 1 }],
      ["state object", { state: { state: "offline" } }],
      ["state array", { state: ["offline"] }],
      [
        "proto",
        JSON.parse('{"__proto__":{"state":"offline","action":"sync"}}'),
      ],
      ["constructor", { constructor: { prototype: { admin: true } } }],
      ["action unknown", { action: "drop" }],
      ["action number", { action: 1, id: "1" }],
      ["update no fields", { action: "update", id: 1 }],
      ["update id string", {
        action: "update",
        id: "1 or 1=1",
        nombre_usuario: "x",
      }],
      ["update id float", { action: "update", id: 1.5, nombre_usuario: "x" }],
      ["update id huge", { action: "update", id: 1e300, nombre_usuario: "x" }],
      ["update id negative", { action: "update", id: -1, nombre_usuario: "x" }],
      ["update email number", { action: "update", id: 1, email: 5 }],
      ["update email not email", {
        action: "update",
        id: 1,
        email: "not an email",
      }],
      ["update password object", { action: "update", id: 1, password: {} }],
      ["update nombre empty", { action: "update", id: 1, nombre_usuario: "" }],
      ["sync ids string", { action: "sync", ids: "1,2" }],
      ["sync ids mixed", {
        action: "sync",
        ids: [1, "2", null, -1, 1.5],
        dry_run: true,
      }],
      ["sync ids huge", {
        action: "sync",
        ids: Array.from({ length: 5000 }, (_, i) => i),
        dry_run: true,
      }],
      ["sync limit 0", { action: "sync", limit: 0 }],
      ["sync limit big", { action: "sync", limit: 1e9 }],
      ["sync after_id string", { action: "sync", after_id: "x" }],
      ["sync dry_run string", { action: "sync", dry_run: "yes" }],
      ["extra keys", {
        action: "sync",
        dry_run: true,
        ids: [],
        evil: "x".repeat(100),
      }],
      [
        "duplicate keys",
        '{"state":"offline","state":"online","action":"sync","action":"update"}',
      ],
      ["1e999", '{"state":1e999,"id":1e999,"action":"update"}'],
      ["deep state", { state: { a: { b: { c: "offline" } } } }],
      ["status unknown", { status: ["busy"] }],
      ["status string", { status: "online" }],
      ["ids huge", { ids: Array.from({ length: 501 }, (_, i) => i + 1) }],
      ["ids injection", { ids: ["1) or (1=1"] }],
      ["cursor junk", { cursor: _randomAscii(rng, 1 + rng.int(300)) }],
      ["cursor dotted", { cursor: `${_b64url(rng, 80)}.${_b64url(rng, 43)}` }],
      ["cursor and status", { cursor: "x.y", status: ["online"] }],
      ["limit huge", { limit: 1e9 }],
    ];
    const [name, value] = rng.pick(shapes);
    d.body = _enc.encode(
      name === "duplicate keys" || name === "1e999"
        ? String(value)
        : JSON.stringify(value),
    );
    return `shape ${name}`;
  },
  "body nested"(d, rng) {
    const depth = rng.pick([100, 1000, 10_000, 30_000]);
    const kind = rng.int(3);
    let text: string;
    if (kind === 0) text = "[".repeat(depth) + "]".repeat(depth);
    else if (kind === 1) {
      text = '{"a":'.repeat(depth) + "1" + "}".repeat(depth);
    } else text = '{"state":' + "[".repeat(depth) + "]".repeat(depth) + "}";
    d.body = _enc.encode(text.slice(0, 64 * 1024 + 10));
    return `nested depth ${depth}`;
  },
  "body huge"(d, rng) {
    const size = rng.pick([60_000, 65_536, 65_537, 70_000, 300_000, 2_000_000]);
    const kind = rng.int(3);
    if (kind === 0) {
      d.body = _enc.encode(
        JSON.stringify({ state: "offline", pad: "x".repeat(size) }),
      );
    } else if (kind === 1) {
      d.body = _enc.encode(
        JSON.stringify({
          action: "sync",
          ids: Array.from({ length: Math.floor(size / 8) }, (_, i) => i),
        }),
      );
    } else {
      d.body = rng.bytes(size);
    }
    d.chunked = rng.chance(0.5);
    return `huge ${size}${d.chunked ? " chunked" : ""}`;
  },
  "invalid utf-8"(d, rng) {
    const bad = rng.pick([
      [0xff, 0xfe],
      [0xc0, 0xaf],
      [0xed, 0xa0, 0x80],
      [0xf4, 0x90, 0x80, 0x80],
      [0xe2, 0x82],
      [0x80],
    ]);
    const where = rng.int(3);
    if (where === 0) {
      d.body = new Uint8Array([
        ..._enc.encode('{"state":"off'),
        ...bad,
        ..._enc.encode('line","action":"sync"}'),
      ]);
      return "invalid utf-8 in body";
    }
    if (where === 1) {
      d.headers.push([
        "X-Client-Info",
        new Uint8Array([..._enc.encode("x"), ...bad]),
      ]);
      return "invalid utf-8 in header";
    }
    d.query = `?state=${
      bad.map((b) => "%" + b.toString(16).toUpperCase()).join("")
    }`;
    return "invalid utf-8 in query";
  },
  query(d, rng) {
    d.query = rng.pick([
      "?state=%00",
      "?state=%ZZ",
      "?state=offline&state=online",
      "?state[]=offline",
      "?state=" + "x".repeat(6000),
      "?%E0%A4%A=1",
      "?;;;&&&===",
      "?state=OFFLINE%20%20",
      "?state=off%0Aline",
      "?state=%27%3B%20drop%20table%20usuarios%3B--",
      "?action=update&id=1",
      "?__proto__[state]=offline",
      "?state=%F0%9F%92%A9",
      "?" + "a=1&".repeat(2000),
    ]);
    if (rng.chance(0.2)) d.path = d.path.replace("/functions/v1/", "/api/");
    return `query ${d.query.slice(0, 30)}`;
  },
  framing(d, rng) {
    d.framing = true;
    const kind = rng.int(4);
    if (kind === 0) {
      d.headers.push([
        "Authorization",
        new Uint8Array([..._enc.encode("Bearer a"), 0x01, 0x7f]),
      ]);
      return "control bytes in a header";
    }
    if (kind === 1) {
      d.headers.push(["Bad Header Name", "x"]);
      return "space in a header name";
    }
    if (kind === 2) {
      d.headers.push(["Content-Length", "5"]);
      d.headers.push(["Content-Length", "6"]);
      return "two content-lengths";
    }
    d.headers.push(["X-Huge", "h".repeat(200_000)]);
    return "200 kB header";
  },
};

const _WEIGHTS: [string, number][] = [
  ["method", 8],
  ["headers", 10],
  ["authorization", 18],
  ["content-type", 8],
  ["body not json", 12],
  ["body wrong shape", 14],
  ["body nested", 6],
  ["body huge", 6],
  ["invalid utf-8", 8],
  ["query", 8],
  ["framing", 2],
];

function _pickMutation(rng: Rng): string {
  const total = _WEIGHTS.reduce((n, [, w]) => n + w, 0);
  let r = rng.int(total);
  for (const [name, w] of _WEIGHTS) {
    if (r < w) return name;
    r -= w;
  }
  return _WEIGHTS[0][0];
}

/**
 * Generates one malformed request for `fn`: a valid request with one to
 * three random mutations; the first names the category.
 */
export function generateRequest(
  rng: Rng,
  fn: FunctionName,
  tokens: GeneratorTokens,
  safeBody: unknown,
): Generated {
  const d: _Draft = {
    method: "POST",
    path: `/functions/v1/${fn}`,
    query: "",
    headers: [
      ["Authorization", `Bearer ${tokens.valid}`],
      ["Content-Type", "application/json"],
    ],
    body: _enc.encode(JSON.stringify(safeBody)),
    chunked: false,
    framing: false,
  };
  const first = _pickMutation(rng);
  const mutations = [_MUTATIONS[first](d, rng, tokens)];
  const more = rng.int(3);
  for (let i = 0; i < more; i++) {
    const name = _pickMutation(rng);
    if (name === "framing") continue;
    mutations.push(_MUTATIONS[name](d, rng, tokens));
  }
  // More header lines than HTTP servers accept (hyper: 100) is framing too.
  if (d.headers.length > 100) d.framing = true;
  return {
    category: first,
    mutations,
    framing: d.framing,
    req: {
      method: d.method,
      target: d.path + d.query,
      headers: d.headers,
      body: d.body,
      chunked: d.chunked,
    },
  };
}

/** Options of {@linkcode runBadInput}. */
export interface BadInputOptions {
  readonly fn: FunctionName;
  /** Requests to send. */
  readonly count: number;
  readonly rng: Rng;
  readonly tokens: GeneratorTokens;
  /** The body a valid request carries (must change nothing harmful). */
  readonly safeBody: unknown;
  /** Requests in flight at once (default 8). */
  readonly concurrency?: number;
  /** The seed, for the failure report. */
  readonly seed: number;
}

/**
 * Sends `count` generated requests and checks every answer. HTTP-layer
 * refusals (the server rejecting broken framing before any function runs)
 * are counted apart and allowed only for requests that break framing.
 */
export async function runBadInput(
  t: Target,
  tally: Tally,
  o: BadInputOptions,
): Promise<{ refusedByHttp: number; statuses: Map<number, number> }> {
  const generated = Array.from(
    { length: o.count },
    () => generateRequest(o.rng, o.fn, o.tokens, o.safeBody),
  );
  const statuses = new Map<number, number>();
  let refusedByHttp = 0;
  const accepted = new Set(ACCEPTED_CODES[o.fn]);
  await pool(generated.length, o.concurrency ?? 8, async (i) => {
    const g = generated[i];
    const category = `bad input ${o.fn}: ${g.category}`;
    tally.count(category);
    const res = await rawRequest(t.apiUrl, g.req);
    statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
    const a = answerOf(res);
    const where = () =>
      `seed ${o.seed} request #${i} [${
        g.mutations.join("; ")
      }] ${g.req.method} ${g.req.target.slice(0, 60)} -> ${a.status} ${
        a.text.slice(0, 160)
      }`;
    const fromHttpLayer = a.status === 0 ||
      (!a.headers.has("access-control-allow-origin") && a.text === "" &&
        [400, 413, 414, 431, 505].includes(a.status));
    if (fromHttpLayer) {
      refusedByHttp++;
      tally.check(
        category,
        g.framing,
        () => `refused by the HTTP layer: ${where()}`,
      );
      return;
    }
    const problem = contractProblem(a, t.secrets, {
      head: g.req.method === "HEAD",
    });
    if (
      !tally.check(category, problem === null, () => `${problem}: ${where()}`)
    ) {
      return;
    }
    if (a.status === 200 || a.status === 204) return;
    const code = a.body?.code as string | undefined;
    if (g.req.method === "HEAD") {
      tally.check(
        category,
        a.status === 405,
        () => `HEAD answered: ${where()}`,
      );
      return;
    }
    const documented = code !== undefined && code in ERRORS &&
      ERRORS[code as keyof typeof ERRORS].status === a.status;
    tally.check(
      category,
      documented && accepted.has(code!),
      () => `undocumented or not allowed for bad input: ${where()}`,
    );
  });
  return { refusedByHttp, statuses };
}

/** Odd but valid emails: each must sign in and its ping find its row. */
export const ODD_EMAILS: readonly string[] = [
  "o'brien+tag@example.com",
  "First.Last@Example.COM",
  "user%percent@example.com",
  "x_y-z@sub.domain.example.org",
  "a@b.co",
  "very.long.local.part.with.many.dots.and-dashes-0123456789abcdefg@example.com",
  "1234567890@example.com",
  "user+@example.com",
  "sql'--@example.com",
  "semi;colon@example.com",
  "d.o.t.s@example.com",
  "UPPER@EXAMPLE.ORG",
  "admin+x@example.net",
  "_under_@example.com",
  "x@xn--bcher-kva.example",
  "tilde~hat^@example.com",
];

/**
 * The domains of {@linkcode ODD_EMAILS}, as `USERNAME_MATCH_DOMAINS` for the
 * stacks these run against: the odd identities matched by the part before
 * the `@` need their domain listed (the attack suite's outsiders use other
 * domains, and must still reach no row).
 */
export const ODD_EMAIL_DOMAINS: string = [
  ...new Set(
    ODD_EMAILS.map((e) => e.slice(e.lastIndexOf("@") + 1).toLowerCase()),
  ),
].join(",");

/**
 * presence-ping with odd but valid emails and usernames: each identity the
 * provider accepts gets a row matched by `correo` (in another case) or by
 * its username, pings `rounds` times, and must get 200 with its row.
 */
export async function runOddIdentities(
  t: Target,
  tally: Tally,
  rounds: number,
): Promise<{ accepted: number; refusedByProvider: string[] }> {
  const category = "bad input presence-ping: odd valid emails";
  const refused: string[] = [];
  const users: User[] = [];
  for (const [i, raw] of ODD_EMAILS.entries()) {
    const email = raw.replace("@", `.${crypto.randomUUID().slice(0, 4)}@`);
    const local = email.slice(0, email.lastIndexOf("@"));
    const row = i % 3 === 0
      ? { correo: email.toUpperCase() }
      : i % 3 === 1
      ? { nombre_usuario: local.toUpperCase() }
      : { nombre_usuario: email };
    try {
      users.push(await signedInUser(t, { email, row }));
    } catch {
      refused.push(raw);
    }
  }
  for (let r = 0; r < rounds; r++) {
    for (const u of users) {
      tally.count(category);
      const state = r % 2 ? "offline" : "online";
      const res = answerOf(
        await rawRequest(t.apiUrl, {
          method: "POST",
          target: "/functions/v1/presence-ping",
          headers: [["Authorization", `Bearer ${u.token}`], [
            "Content-Type",
            "application/json",
          ]],
          body: _enc.encode(JSON.stringify({ state })),
        }),
      );
      tally.check(
        category,
        res.status === 200 && res.body?.user?.id === u.rowId &&
          res.body.user.presence_state === state,
        () =>
          `${u.email}: expected 200 row ${u.rowId} ${state}, got ${res.status} ${
            res.text.slice(0, 160)
          }`,
      );
    }
  }
  return { accepted: users.length, refusedByProvider: refused };
}
