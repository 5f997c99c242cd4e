/**
 * The changes-since cursor: what the next call needs to know about the
 * answer that issued it, sealed so that a client can neither read nor forge
 * it.
 *
 * Text form: `base64url(JSON payload) "." base64url(HMAC-SHA256)`, the HMAC
 * key derived from the service role key (never the key itself), so every
 * isolate of a project agrees on it and rotating the key invalidates old
 * cursors. Anything that does not verify is 400 `validation_failed` with an
 * issue at `["cursor"]`, never a 500.
 *
 * @module
 */
import { z } from "zod";
import { validationFailed } from "../_shared/validation.ts";

/** What a cursor remembers of the answer that issued it. */
export interface CursorState {
  /** `now()` of the answer's statement, in microseconds since the epoch. */
  readonly time: bigint;
  /**
   * A time no later than the start of any transaction the answer could not
   * see (microseconds since the epoch): pings of such transactions store
   * their start as `ultimo_acceso`, so the next call looks back to here.
   */
  readonly horizon: bigint;
  /** The answer's snapshot, `pg_current_snapshot()` as text. */
  readonly snapshot: string;
  /** `PRESENCE_AWAY_AFTER_S` the statuses were computed with. */
  readonly awayS: number;
  /** `PRESENCE_OFFLINE_AFTER_S` the statuses were computed with. */
  readonly offlineS: number;
}

// `xmin:xmax:xip,...` as pg_snapshot prints it, the xip list ascending and
// within [xmin, xmax), so the cast back to pg_snapshot cannot fail.
const _SNAPSHOT = /^(\d{1,20}):(\d{1,20}):((?:\d{1,20})(?:,\d{1,20})*)?$/;
const _Micros = z.string().regex(/^\d{1,18}$/);

const _Payload = z.strictObject({
  v: z.literal(1),
  t: _Micros,
  h: _Micros,
  s: z.string().max(7000).refine(_validSnapshot),
  a: z.int().positive(),
  o: z.int().positive(),
});

const _INVALID = "Invalid cursor: pass the cursor of a previous answer as is";

/**
 * Seals a cursor.
 *
 * @example
 * ```ts
 * const text = await sealCursor(state, env.serviceRoleKey);
 * ```
 */
export async function sealCursor(
  state: CursorState,
  secret: string,
): Promise<string> {
  const payload = _b64(
    new TextEncoder().encode(JSON.stringify({
      v: 1,
      t: String(state.time),
      h: String(state.horizon),
      s: state.snapshot,
      a: state.awayS,
      o: state.offlineS,
    })),
  );
  const mac = await crypto.subtle.sign(
    "HMAC",
    await _key(secret),
    new TextEncoder().encode(payload),
  );
  return `${payload}.${_b64(new Uint8Array(mac))}`;
}

/**
 * Opens a sealed cursor, or throws 400 `validation_failed` when it is not
 * one this project issued (malformed, altered, or sealed with another key).
 */
export async function openCursor(
  text: string,
  secret: string,
): Promise<CursorState> {
  const [payload, mac, extra] = text.split(".");
  const macBytes = mac === undefined ? null : _unb64(mac);
  if (extra !== undefined || !payload || !macBytes) throw _invalid();
  const ok = await crypto.subtle.verify(
    "HMAC",
    await _key(secret),
    macBytes,
    new TextEncoder().encode(payload),
  );
  if (!ok) throw _invalid();
  let json: unknown;
  try {
    json = JSON.parse(new TextDecoder().decode(_unb64(payload) ?? undefined));
  } catch {
    throw _invalid();
  }
  const parsed = _Payload.safeParse(json);
  if (!parsed.success) throw _invalid();
  const p = parsed.data;
  return {
    time: BigInt(p.t),
    horizon: BigInt(p.h),
    snapshot: p.s,
    awayS: p.a,
    offlineS: p.o,
  };
}

function _invalid() {
  return validationFailed([{ path: ["cursor"], message: _INVALID }]);
}

function _validSnapshot(text: string): boolean {
  const m = _SNAPSHOT.exec(text);
  if (!m) return false;
  const xmin = BigInt(m[1]), xmax = BigInt(m[2]);
  if (xmin < 1n || xmin > xmax) return false;
  let previous = xmin - 1n;
  for (const part of m[3]?.split(",") ?? []) {
    const xid = BigInt(part);
    if (xid <= previous || xid >= xmax) return false;
    previous = xid;
  }
  return true;
}

/**
 * The cursor key's bytes: HMAC-SHA256(service role key, a fixed label). The
 * service role key itself never signs anything a client sees, and another
 * purpose would take another label. Exported so that the reliability suite
 * can look for it in logs, where it must never appear.
 */
export async function cursorKeyBytes(secret: string): Promise<Uint8Array> {
  const base = await crypto.subtle.importKey(
    "raw",
    new TextEncoder().encode(secret),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  return new Uint8Array(
    await crypto.subtle.sign(
      "HMAC",
      base,
      new TextEncoder().encode("presence changes-since cursor v1"),
    ),
  );
}

const _keys = new Map<string, Promise<CryptoKey>>();

function _key(secret: string): Promise<CryptoKey> {
  let key = _keys.get(secret);
  if (!key) {
    key = cursorKeyBytes(secret).then((bytes) =>
      crypto.subtle.importKey(
        "raw",
        bytes as Uint8Array<ArrayBuffer>,
        { name: "HMAC", hash: "SHA-256" },
        false,
        ["sign", "verify"],
      )
    );
    _keys.set(secret, key);
  }
  return key;
}

function _b64(bytes: Uint8Array): string {
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(
    /=+$/,
    "",
  );
}

function _unb64(text: string): Uint8Array<ArrayBuffer> | null {
  if (!/^[A-Za-z0-9_-]*$/.test(text)) return null;
  try {
    const binary = atob(text.replaceAll("-", "+").replaceAll("_", "/"));
    return Uint8Array.from(binary, (c) => c.charCodeAt(0));
  } catch {
    return null;
  }
}
