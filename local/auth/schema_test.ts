import assert from "node:assert/strict";
import postgres from "postgres";
import { bootstrapDatabase } from "../db/bootstrap.ts";
import { createTestDatabase } from "../testing/database.ts";

Deno.test("10_auth.sql: idempotent, with Supabase Auth's tables, column types and auth helpers", async () => {
  const db = await createTestDatabase();
  const sql = postgres(db.url, { max: 4, prepare: false, onnotice: () => {} });
  try {
    await bootstrapDatabase(db.url);
    await bootstrapDatabase(db.url);
    const columns = await sql`
      select table_name, column_name, data_type from information_schema.columns
      where table_schema = 'auth'
        and (table_name, column_name) in (
          ('users', 'id'), ('users', 'banned_until'), ('users', 'deleted_at'),
          ('users', 'raw_app_meta_data'), ('users', 'confirmed_at'),
          ('users', 'is_anonymous'), ('sessions', 'aal'),
          ('sessions', 'refreshed_at'), ('sessions', 'ip'),
          ('refresh_tokens', 'id'), ('refresh_tokens', 'user_id'),
          ('refresh_tokens', 'session_id'), ('identities', 'email'))
      order by table_name, column_name`;
    assert.deepEqual(
      columns.map((c) => [c.table_name, c.column_name, c.data_type]),
      [
        ["identities", "email", "text"],
        ["refresh_tokens", "id", "bigint"],
        ["refresh_tokens", "session_id", "uuid"],
        ["refresh_tokens", "user_id", "character varying"],
        ["sessions", "aal", "USER-DEFINED"],
        ["sessions", "ip", "inet"],
        ["sessions", "refreshed_at", "timestamp without time zone"],
        ["users", "banned_until", "timestamp with time zone"],
        ["users", "confirmed_at", "timestamp with time zone"],
        ["users", "deleted_at", "timestamp with time zone"],
        ["users", "id", "uuid"],
        ["users", "is_anonymous", "boolean"],
        ["users", "raw_app_meta_data", "jsonb"],
      ],
    );
    const sub = crypto.randomUUID();
    const [row] = await sql.begin(async (tx) => {
      await tx`select set_config('request.jwt.claims', ${
        JSON.stringify({ sub, role: "authenticated", email: "a@b.c" })
      }, true)`;
      return await tx`
        select auth.uid()::text as uid, auth.role() as role,
               auth.email() as email, auth.jwt() ->> 'sub' as jwt_sub`;
    });
    assert.deepEqual({ ...row }, {
      uid: sub,
      role: "authenticated",
      email: "a@b.c",
      jwt_sub: sub,
    });
  } finally {
    await sql.end();
    await db.close();
  }
});
