/**
 * The changes-since cursor: what the next call needs to know about the
 * answer that issued it, encrypted so that a client can neither read nor
 * forge it.
 *
 * Text form: base64url of `2` (format), a 4-byte key id, a 12-byte random
 * IV, and the AES-256-GCM ciphertext (with its tag) of a small JSON payload.
 * The AES key and the key id are both derived from the service key (HMAC
 * with fixed labels, never the key itself), so every isolate of a project
 * agrees on them and nothing in the text tells a client anything about the
 * database: no snapshot, no time, no transaction count.
 *
 * Three outcomes when a cursor comes back:
 * - it opens: its state;
 * - it was sealed under another key (the service key was rotated, the
 *   project switched to the new API keys): `null`, and the caller answers a
 *   full read flagged `resync`, never a dead end;
 * - anything else (malformed, altered, a tag that does not verify under the
 *   current key, a cursor of the first format, `payload.mac`, from before
 *   2026-11-24): 400 `validation_failed` with an issue at `["cursor"]`,
 *   never a 500; a client drops it and reads everyone again, as the kit
 *   does.
 *
 * @module
 */
import { z } from "zod";
import { validationFailed } from "../_shared/validation.ts";

/** What a cursor remembers of the answer that issued it. */
export interface CursorState {
  /** `now()` of the answer's statement, in microseconds since the epoch. */
  readonly time: bigint;
  /** The answer's snapshot, `pg_current_snapshot()` as text. */
  readonly snapshot: string;
  /** `PRESENCE_AWAY_AFTER_S` the statuses were computed with. */
  readonly awayS: number;
  /** `PRESENCE_OFFLINE_AFTER_S` the statuses were computed with. */
  readonly offlineS: number;
  /**
   * The database's timeline when the answer was read (eight hex digits,
   * as in a WAL file name), so that a point-in-time restore or a failover,
   * which start a new one, is told apart; absent in cursors issued before
   * 2026-11-25 and by a server in recovery.
   */
  readonly timeline?: string;
  /**
   * The change-log triggers that stood on `usuarios` when the answer was
   * read (each one's oid and how it was enabled, `16501A`), or `""` if the
   * log was not whole then
   * (`query.ts` `CHANGE_LOG_TRIGGERS`); absent in cursors issued before
   * 2026-11-26.
   */
  readonly changeLog?: string;
}

// `xmin:xmax:xip,...` as pg_snapshot prints it, the xip list ascending and
// within [xmin, xmax), so the cast back to pg_snapshot cannot fail.
const _SNAPSHOT = /^(\d{1,20}):(\d{1,20}):((?:\d{1,20})(?:,\d{1,20})*)?$/;
const _Micros = z.string().regex(/^\d{1,18}$/);

// Keys a later version adds are let through (and dropped), so that an
// isolate of this version still running during a deploy continues the new
// version's cursors rather than answering them 400. (Nobody else can add
// one: the payload is sealed.)
const _Payload = z.object({
  t: _Micros,
  s: z.string().max(7000).refine(_validSnapshot),
  a: z.int().positive(),
  o: z.int().positive(),
  l: z.string().regex(/^[0-9A-F]{8}$/).optional(),
  g: z.string().max(200).regex(/^(?:\d{1,10}[AO](?:,\d{1,10}[AO])*)?$/)
    .optional(),
});

const _FORMAT = 2;
const _KID_BYTES = 4;
const _IV_BYTES = 12;
// Format byte, key id, IV, and at least GCM's 16-byte tag.
const _MIN_BYTES = 1 + _KID_BYTES + _IV_BYTES + 16;

const _INVALID = "Invalid cursor: pass the cursor of a previous answer as is";

/**
 * Seals a cursor under `secret`, with the keys derived from it kept in
 * `cache`.
 *
 * @example
 * ```ts
 * const text = await sealCursor(state, env.serviceRoleKey, new CursorKeys());
 * ```
 */
export async function sealCursor(
  state: CursorState,
  secret: string,
  cache: CursorKeys,
): Promise<string> {
  const keys = await cache.derive(secret);
  const iv = crypto.getRandomValues(new Uint8Array(_IV_BYTES));
  const plain = new TextEncoder().encode(JSON.stringify({
    t: String(state.time),
    s: state.snapshot,
    a: state.awayS,
    o: state.offlineS,
    l: state.timeline,
    g: state.changeLog,
  }));
  const sealed = new Uint8Array(
    await crypto.subtle.encrypt(
      { name: "AES-GCM", iv, additionalData: keys.header },
      keys.aes,
      plain,
    ),
  );
  const out = new Uint8Array(keys.header.length + iv.length + sealed.length);
  out.set(keys.header, 0);
  out.set(iv, keys.header.length);
  out.set(sealed, keys.header.length + iv.length);
  return _b64(out);
}

/**
 * Opens a sealed cursor: its state; `null` when it was sealed under another
 * key (the caller starts a full read over, `resync`); or throws 400
 * `validation_failed` when it is not a cursor at all or was altered. The
 * keys derived from `secret` are kept in `cache`.
 */
export async function openCursor(
  text: string,
  secret: string,
  cache: CursorKeys,
): Promise<CursorState | null> {
  const bytes = _unb64(text);
  if (!bytes || bytes.length < _MIN_BYTES) throw _invalid();
  if (bytes[0] !== _FORMAT) throw _invalid();
  const keys = await cache.derive(secret);
  const header = bytes.subarray(0, keys.header.length);
  if (!_equal(header, keys.header)) return null;
  let plain: ArrayBuffer;
  try {
    plain = await crypto.subtle.decrypt(
      {
        name: "AES-GCM",
        iv: bytes.subarray(header.length, header.length + _IV_BYTES),
        additionalData: keys.header,
      },
      keys.aes,
      bytes.subarray(header.length + _IV_BYTES),
    );
  } catch {
    throw _invalid();
  }
  let json: unknown;
  try {
    json = JSON.parse(new TextDecoder().decode(plain));
  } catch {
    throw _invalid();
  }
  const parsed = _Payload.safeParse(json);
  if (!parsed.success) throw _invalid();
  const p = parsed.data;
  return {
    time: BigInt(p.t),
    snapshot: p.s,
    awayS: p.a,
    offlineS: p.o,
    ...(p.l === undefined ? {} : { timeline: p.l }),
    ...(p.g === undefined ? {} : { changeLog: p.g }),
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
 * The cursor key's bytes: HMAC-SHA256(service key, a fixed label). The
 * service key itself never touches anything a client sees, and another
 * purpose takes another label. Exported so that the reliability suite can
 * look for it in logs, where it must never appear.
 */
export function cursorKeyBytes(secret: string): Promise<Uint8Array> {
  return _derive(secret, "presence changes-since cursor v2 aes-256-gcm");
}

async function _derive(secret: string, label: string): Promise<Uint8Array> {
  const base = await crypto.subtle.importKey(
    "raw",
    new TextEncoder().encode(secret),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  return new Uint8Array(
    await crypto.subtle.sign("HMAC", base, new TextEncoder().encode(label)),
  );
}

interface _Keys {
  readonly aes: CryptoKey;
  /** Format byte and key id: the clear part of every cursor, also its AAD. */
  readonly header: Uint8Array<ArrayBuffer>;
}

/**
 * The cursor keys derived from each secret (two HMACs and a key import,
 * not worth repeating per request), kept by their owner: one per
 * `presence` handler.
 */
export class CursorKeys {
  readonly #bySecret = new Map<string, Promise<_Keys>>();

  /** The keys of `secret`, derived on first use. */
  derive(secret: string): Promise<_Keys> {
    let keys = this.#bySecret.get(secret);
    if (!keys) {
      keys = _deriveKeys(secret);
      this.#bySecret.set(secret, keys);
    }
    return keys;
  }
}

async function _deriveKeys(secret: string): Promise<_Keys> {
  const bytes = await cursorKeyBytes(secret);
  const aes = await crypto.subtle.importKey(
    "raw",
    bytes as Uint8Array<ArrayBuffer>,
    { name: "AES-GCM" },
    false,
    ["encrypt", "decrypt"],
  );
  const kid = await _derive(secret, "presence changes-since cursor kid");
  const header = new Uint8Array(1 + _KID_BYTES);
  header[0] = _FORMAT;
  header.set(kid.subarray(0, _KID_BYTES), 1);
  return { aes, header };
}

function _equal(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
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
  if (!/^[A-Za-z0-9_-]+$/.test(text)) return null;
  try {
    const binary = atob(text.replaceAll("-", "+").replaceAll("_", "/"));
    return Uint8Array.from(binary, (c) => c.charCodeAt(0));
  } catch {
    return null;
  }
}
