/**
 * The JSON Supabase Auth writes for users, identities and sessions: field
 * order of its Go structs, `omitempty` where they have it, map keys sorted
 * (Go's encoding/json sorts them) and timestamps as Go's `time.Time`
 * (RFC 3339, UTC, trailing zeros of the fraction dropped).
 *
 * @module
 */
import type { IdentityRow, UserRow } from "./store.ts";

/**
 * Formats a timestamp as Go marshals a UTC `time.Time`, keeping the
 * microseconds Postgres returns: `2024-05-01T10:00:00.12345Z`.
 */
export function goTime(timestamp: string): string {
  const m =
    /^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(\.\d+)?(Z|[+-]\d{2}(?::?\d{2})?)?$/
      .exec(timestamp);
  if (!m) return timestamp;
  let offset = m[4] ?? "Z";
  if (/^[+-]\d{2}$/.test(offset)) offset += ":00";
  else if (/^[+-]\d{4}$/.test(offset)) {
    offset = `${offset.slice(0, 3)}:${offset.slice(3)}`;
  }
  const whole = new Date(Date.parse(`${m[1]}T${m[2]}${offset}`));
  const fraction = (m[3] ?? "").replace(/0+$/, "");
  return `${whole.toISOString().slice(0, 19)}${
    fraction.length > 1 ? fraction : ""
  }Z`;
}

/** Go's JSON for a map: keys sorted at every depth. */
export function sortedKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortedKeys);
  if (value === null || typeof value !== "object") return value;
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(value).sort()) {
    out[key] = sortedKeys((value as Record<string, unknown>)[key]);
  }
  return out;
}

function _time(value: string | null): string | undefined {
  return value ? goTime(value) : undefined;
}

/** An identity as `models.Identity` marshals. */
export function identityJson(i: IdentityRow): Record<string, unknown> {
  const data = i.identity_data ?? {};
  return _compact({
    identity_id: i.id,
    id: i.provider_id,
    user_id: i.user_id,
    identity_data: Object.keys(data).length ? sortedKeys(data) : undefined,
    provider: i.provider,
    last_sign_in_at: _time(i.last_sign_in_at),
    created_at: i.created_at ? goTime(i.created_at) : _GO_ZERO_TIME,
    updated_at: i.updated_at ? goTime(i.updated_at) : _GO_ZERO_TIME,
    email: i.email || undefined,
  });
}

const _GO_ZERO_TIME = "0001-01-01T00:00:00Z";

/**
 * A user as `models.User` marshals; `identities` is `null` when they were
 * not loaded (as in the admin user list).
 */
export function userJson(u: UserRow): Record<string, unknown> {
  return _compact({
    id: u.id,
    aud: u.aud ?? "",
    role: u.role ?? "",
    email: u.email ?? "",
    email_confirmed_at: _time(u.email_confirmed_at),
    invited_at: _time(u.invited_at),
    phone: u.phone ?? "",
    phone_confirmed_at: _time(u.phone_confirmed_at),
    confirmation_sent_at: _time(u.confirmation_sent_at),
    confirmed_at: _time(u.confirmed_at),
    recovery_sent_at: _time(u.recovery_sent_at),
    new_email: u.email_change || undefined,
    email_change_sent_at: _time(u.email_change_sent_at),
    new_phone: u.phone_change || undefined,
    phone_change_sent_at: _time(u.phone_change_sent_at),
    reauthentication_sent_at: _time(u.reauthentication_sent_at),
    last_sign_in_at: _time(u.last_sign_in_at),
    app_metadata: sortedKeys(u.raw_app_meta_data),
    user_metadata: sortedKeys(u.raw_user_meta_data),
    identities: u.identities ? u.identities.map(identityJson) : null,
    created_at: u.created_at ? goTime(u.created_at) : _GO_ZERO_TIME,
    updated_at: u.updated_at ? goTime(u.updated_at) : _GO_ZERO_TIME,
    banned_until: _time(u.banned_until),
    deleted_at: _time(u.deleted_at),
    is_anonymous: u.is_anonymous ?? false,
  });
}

function _compact(obj: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(obj)) if (v !== undefined) out[k] = v;
  return out;
}
