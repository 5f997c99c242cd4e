/**
 * The PKCE flow of the Auth stand-in, as Supabase Auth runs it
 * (internal/api/pkce.go, models/flow_state.go, token.go `PKCE`,
 * security/pkce.go): a request that carries a `code_challenge` records a
 * flow state, its mailed token is prefixed `pkce_`, the link's `/verify`
 * redirects with `?code=<auth code>` instead of a session, and
 * `POST /token?grant_type=pkce` exchanges that code and the code verifier
 * for a session. `@supabase/ssr` and `createClient({ auth: { flowType:
 * "pkce" } })` use it.
 *
 * @module
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { AuthContext } from "./context.ts";
import { badRequest, notFound, unprocessable } from "./errors.ts";
import { type Body, stringField } from "./http.ts";
import { type Db, findUserById, iso } from "./store.ts";
import {
  type IssuedTokens,
  issueSession,
  type SessionMethod,
} from "./tokens.ts";

/** A request's PKCE parameters, checked; `null` asks for the implicit flow. */
export interface Pkce {
  readonly challenge: string;
  /** As sent; `s256` or `plain` in any case is a valid one. */
  readonly method: string;
}

/** The prefix of a PKCE flow's mailed token (`PKCEPrefix`). */
export const PKCE_PREFIX = "pkce_";

/** How long a flow state may be exchanged (`FlowStateExpiryDuration`). */
export const FLOW_STATE_EXPIRY_MS = 300_000;

/**
 * The flow a mail's token starts: Supabase Auth's authentication methods
 * (`models.AuthenticationMethod`), which a PKCE session's `amr` carries.
 */
export type FlowMethod =
  | "email/signup"
  | "recovery"
  | "magiclink"
  | "email_change";

/**
 * `code_challenge` and `code_challenge_method` of `body`; `null` when there
 * is no challenge. `checked` (every route but `PUT /user`, which Supabase
 * Auth does not check) applies `validatePKCEParams`. The method is checked
 * only when a flow state is made ({@linkcode createFlowState}).
 */
export function pkceParams(
  body: Body,
  goStruct: string,
  checked = true,
): Pkce | null {
  const challenge = stringField(body, "code_challenge", goStruct);
  const method = stringField(body, "code_challenge_method", goStruct);
  if (checked) _validate(challenge, method);
  return challenge === "" ? null : { challenge, method };
}

function _validate(challenge: string, method: string): void {
  if ((challenge === "") !== (method === "")) {
    throw badRequest(
      "validation_failed",
      "PKCE flow requires code_challenge_method and code_challenge",
    );
  }
  if (challenge === "") return;
  if (challenge.length < 43 || challenge.length > 128) {
    throw badRequest(
      "validation_failed",
      "code challenge has to be between 43 and 128 characters",
    );
  }
  if (!/^[a-zA-Z._~0-9-]+$/.test(challenge)) {
    throw badRequest(
      "validation_failed",
      "code challenge can only contain alphanumeric characters, hyphens, periods, underscores and tildes",
    );
  }
}

/** A mail's token as stored: prefixed in the PKCE flow (`addFlowPrefixToToken`). */
export function flowToken(hash: string, pkce: Pkce | null): string {
  return pkce ? PKCE_PREFIX + hash : hash;
}

/**
 * Records the flow state of `userId` (`generateFlowState`), with a fresh
 * auth code that the link's `/verify` will hand out. A challenge method
 * other than `s256` or `plain` fails as `NewFlowState` does: a 500, before
 * anything is mailed, and inside the caller's transaction.
 */
export async function createFlowState(
  ctx: AuthContext,
  tx: Db,
  userId: string,
  method: FlowMethod,
  pkce: Pkce,
): Promise<void> {
  const challengeMethod = pkce.method.toLowerCase();
  if (challengeMethod !== "s256" && challengeMethod !== "plain") {
    throw new Error(`unsupported code_challenge method "${pkce.method}"`);
  }
  const now = iso(ctx.now());
  await tx`
    insert into auth.flow_state
      (id, user_id, auth_code, code_challenge_method, code_challenge,
       provider_type, authentication_method, created_at, updated_at)
    values (gen_random_uuid(), ${userId}::uuid, ${crypto.randomUUID()}::text,
      ${challengeMethod}::auth.code_challenge_method, ${pkce.challenge}::text,
      ${method}::text, ${method}::text, ${now}::timestamptz,
      ${now}::timestamptz)`;
}

/**
 * The flow method a link's verification `type` names
 * (`ParseAuthenticationMethod`), or `null` for one that names none.
 */
export function flowMethodOf(type: string): FlowMethod | null {
  if (type.endsWith("signup")) return "email/signup";
  if (type === "recovery" || type === "magiclink" || type === "email_change") {
    return type;
  }
  return null;
}

/**
 * The auth code of the latest flow state of `userId` for `method`, dated
 * now (`issueAuthCode`). None: 400 `flow_state_not_found`, inside the
 * verification's transaction, so the link is not spent.
 */
export async function issueAuthCode(
  ctx: AuthContext,
  tx: Db,
  userId: string,
  method: FlowMethod,
): Promise<string> {
  const rows = await tx<{ id: string; auth_code: string | null }[]>`
    select id::text, auth_code from auth.flow_state
    where user_id = ${userId}::uuid and authentication_method = ${method}::text
    order by created_at desc limit 1`;
  const flow = rows[0];
  if (!flow || !flow.auth_code) {
    const detail = flow
      ? "422: Flow state does not have an auth code (not a PKCE flow)."
      : "422: No valid flow state found for user.";
    throw badRequest(
      "flow_state_not_found",
      `No associated flow state found. ${detail}`,
    );
  }
  await tx`
    update auth.flow_state
    set auth_code_issued_at = ${iso(ctx.now())}::timestamptz,
        updated_at = ${iso(ctx.now())}::timestamptz
    where id = ${flow.id}::uuid`;
  return flow.auth_code;
}

/**
 * `POST /token?grant_type=pkce`: the auth code and its verifier for a
 * session whose `amr` is the flow's method. The flow state is spent in the
 * same transaction, so a code is exchanged once.
 */
export async function pkceGrant(
  ctx: AuthContext,
  body: Body,
  client: { userAgent: string | null; ip: string | null },
): Promise<IssuedTokens> {
  const s = "PKCEGrantParams";
  const authCode = stringField(body, "auth_code", s);
  const verifier = stringField(body, "code_verifier", s);
  if (authCode === "" || verifier === "") {
    throw badRequest(
      "validation_failed",
      "invalid request: both auth code and code verifier should be non-empty",
    );
  }
  const notFoundError = () =>
    notFound(
      "flow_state_not_found",
      "invalid flow state, no valid flow state found",
    );
  return await ctx.sql.begin(async (tx) => {
    const rows = await tx<_FlowRow[]>`
      select id::text, user_id::text, authentication_method,
             code_challenge, code_challenge_method::text,
             (extract(epoch from created_at) * 1000)::float8 as created_ms,
             (extract(epoch from auth_code_issued_at) * 1000)::float8
               as issued_ms
      from auth.flow_state where auth_code = ${authCode}::text
      limit 1 for update`;
    const flow = rows[0];
    if (!flow || !flow.user_id) throw notFoundError();
    // IsExpired: a magic link's from when its code was handed out, any
    // other flow's from when it began (a sign-up's code therefore expires
    // 5 minutes after the sign-up, however long its link is valid).
    const since = flow.issued_ms !== null &&
        flow.authentication_method === "magiclink"
      ? flow.issued_ms
      : flow.created_ms;
    if (since + FLOW_STATE_EXPIRY_MS < ctx.now()) {
      throw unprocessable(
        "flow_state_expired",
        "invalid flow state, flow state has expired",
      );
    }
    if (!(await findUserById(tx, flow.user_id))) throw notFoundError();
    if (!_verifies(flow, verifier)) {
      throw badRequest(
        "bad_code_verifier",
        "code challenge does not match previously saved code verifier",
      );
    }
    await tx`delete from auth.flow_state where id = ${flow.id}::uuid`;
    return await issueSession(
      ctx,
      tx,
      flow.user_id,
      client,
      undefined,
      flow.authentication_method as SessionMethod,
    );
  });
}

interface _FlowRow {
  id: string;
  user_id: string | null;
  authentication_method: string;
  code_challenge: string | null;
  code_challenge_method: string | null;
  created_ms: number;
  issued_ms: number | null;
}

// VerifyPKCEChallenge: base64url(sha256(verifier)) for s256, the verifier
// itself for plain, compared in constant time.
function _verifies(flow: _FlowRow, verifier: string): boolean {
  if (!flow.code_challenge) return false;
  const expected = flow.code_challenge_method === "s256"
    ? createHash("sha256").update(verifier).digest("base64url")
    : verifier;
  const a = new TextEncoder().encode(flow.code_challenge);
  const b = new TextEncoder().encode(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}
