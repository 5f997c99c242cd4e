/**
 * `_shared/columns.ts` read from the catalog, on PGlite and PostgreSQL:
 * which optional columns a `usuarios` has, whether an index serves a match
 * by `auth_user_id`, and the warning the functions log, once per pool, when
 * none does (a hosted project learns it from its function logs; the CLI
 * does not show a migration's notices).
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { createTestDatabase } from "../../local/testing/database.ts";
import {
  type OptionalColumns,
  optionalColumns,
  readColumns,
  UNINDEXED_AUTH_USER_ID,
} from "../../supabase/functions/_shared/columns.ts";
import { Pools } from "../../supabase/functions/_shared/db.ts";
import { e2eTest } from "../support/e2e.ts";
import { logLines } from "../support/logs.ts";

const _TABLE = `create table public.usuarios (
  id bigint generated always as identity primary key,
  correo text, nombre_usuario text, ultimo_acceso timestamptz`;

/** A shape of `usuarios`, and what the lookup must say of it. */
const SHAPES: { name: string; ddl: string; expect: OptionalColumns }[] = [
  {
    name: "no auth_user_id, ultimo_acceso without time zone",
    ddl: `create table public.usuarios (
    id bigint generated always as identity primary key,
    correo text, nombre_usuario text, ultimo_acceso timestamp)`,
    expect: {
      authUserId: false,
      authUserIdIndexed: true,
      lastManualLogoutAt: false,
      ultimoAccesoWithoutTimeZone: true,
    },
  },
  {
    name: "auth_user_id without an index",
    ddl: `${_TABLE}, auth_user_id uuid, last_manual_logout_at timestamptz)`,
    expect: {
      authUserId: true,
      authUserIdIndexed: false,
      lastManualLogoutAt: true,
      ultimoAccesoWithoutTimeZone: false,
    },
  },
  ...([
    [
      "a unique constraint",
      "alter table public.usuarios add unique (auth_user_id)",
      true,
    ],
    ["a plain index", "create index on public.usuarios (auth_user_id)", true],
    [
      "a partial index",
      "create index on public.usuarios (auth_user_id) where auth_user_id is not null",
      true,
    ],
    [
      "an index leading with it",
      "create index on public.usuarios (auth_user_id, id)",
      true,
    ],
    [
      "an index with it second",
      "create index on public.usuarios (id, auth_user_id)",
      false,
    ],
    [
      "an expression index",
      "create index on public.usuarios ((auth_user_id::text))",
      false,
    ],
    [
      "an invalid index (a concurrent build that failed)",
      `create index usuarios_broken_idx on public.usuarios (auth_user_id);
    update pg_index set indisvalid = false
    where indexrelid = 'public.usuarios_broken_idx'::regclass`,
      false,
    ],
  ] as const).map(([what, index, indexed]) => ({
    name: `auth_user_id with ${what}`,
    ddl: `${_TABLE}, auth_user_id uuid); ${index}`,
    expect: {
      authUserId: true,
      authUserIdIndexed: indexed,
      lastManualLogoutAt: false,
      ultimoAccesoWithoutTimeZone: false,
    },
  })),
];

e2eTest(
  "columns: each shape of usuarios read as it is, and a warning once per pool exactly when auth_user_id has no usable index",
  async () => {
    const db = await createTestDatabase();
    const admin = postgres(db.url, { max: 1, onnotice: () => {} });
    try {
      for (const shape of SHAPES) {
        await admin.unsafe(
          `drop table if exists public.usuarios; ${shape.ddl}`,
        );
        assert.deepEqual(await readColumns(admin), shape.expect, shape.name);
        const pools = new Pools();
        const env = {
          dbUrl: db.url,
          dbPoolMax: 1,
          dbStatementTimeoutMs: 5_000,
        };
        const lines = await logLines(async () => {
          // Two requests' views of one pool: looked up (and told) once.
          for (let i = 0; i < 2; i++) {
            assert.deepEqual(
              await optionalColumns(pools.database(env)),
              shape.expect,
              shape.name,
            );
          }
        }).finally(() => pools.close());
        const expected = shape.expect.authUserIdIndexed
          ? []
          : [{ level: "warn", msg: UNINDEXED_AUTH_USER_ID }];
        // Nothing else is logged: the lookup's only line is this warning.
        assert.deepEqual(lines.map((l) => JSON.parse(l)), expected, shape.name);
      }
    } finally {
      await admin.end();
      await db.close();
    }
  },
);
