/**
 * Administrator rights read from `usuarios.rol` hold only while no Data API
 * role can write the columns they are read from (`rol`, `auth_user_id`):
 * `presence.rights_writable_by()` (migration
 * `20261125000000_create_presence_rights_writable_by.sql`) and `isAdmin`.
 * The Data API's writes are made as PostgREST makes them: the role
 * `authenticated` (or `anon`) with the token's claims in
 * `request.jwt.claims`.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { closeStackAfterAll, e2eTest } from "../support/e2e.ts";
import { call } from "../support/invoke.ts";
import { jsonLines, logLines } from "../support/logs.ts";
import {
  startTestStack,
  type TestStack,
  type TestUser,
} from "../support/stack.ts";

const stack: TestStack = await startTestStack();
const { sql } = stack;

/** `statement` run as the Data API runs a request of `user`'s. */
async function asDataApi(
  user: TestUser,
  statement: (tx: postgres.TransactionSql) => Promise<unknown>,
): Promise<unknown> {
  const claims = JSON.parse(atob(
    user.token.split(".")[1].replaceAll("-", "+").replaceAll("_", "/"),
  ));
  return await sql.begin(async (tx) => {
    await tx`select set_config('request.jwt.claims', ${
      JSON.stringify(claims)
    }, true)`;
    await tx`set local role authenticated`;
    return await statement(tx);
  });
}

const writableBy = async () =>
  (await sql`select presence.rights_writable_by() as r`)[0].r as string[];

/** auth-sync `update` of `target`'s password by `caller`, at `apiUrl`. */
const passwordUpdate = (apiUrl: string, caller: TestUser, target: TestUser) =>
  call(apiUrl, "auth-sync", {
    headers: { Authorization: `Bearer ${caller.token}` },
    body: JSON.stringify({
      action: "update",
      id: target.rowId,
      password: `pw-${crypto.randomUUID()}`,
    }),
  });

/** {@linkcode passwordUpdate} on fresh functions (nothing cached). */
async function setPassword(caller: TestUser, target: TestUser) {
  const served = await stack.withFunctionEnv({});
  try {
    let res!: Awaited<ReturnType<typeof call>>;
    const lines = await logLines(async () => {
      res = await passwordUpdate(served.apiUrl, caller, target);
    });
    const refusedRol = lines.filter((l) =>
      l.includes('"code":"rights_writable"')
    );
    return { status: res.status, code: res.body.code, refusedRol };
  } finally {
    await served.close();
  }
}

e2eTest(
  "presence.rights_writable_by: names anon/authenticated exactly when grants and row level security let them write rol or auth_user_id",
  async () => {
    // [what, statements, the paths it names (role, relation, way), a write
    // as authenticated that sets a row's rol where a path is
    // authenticated's and fails where not]
    const cases: [string, string[], string[], string?][] = [
      ["fresh table: no grant, RLS on", [], []],
      [
        "a table grant, RLS on and no policy",
        ["grant select, insert, update on public.usuarios to anon, authenticated"],
        [],
      ],
      [
        "a table grant and an own-row update policy",
        [
          "grant select, update on public.usuarios to authenticated",
          "create policy own_row on public.usuarios for update to authenticated using (auth_user_id = auth.uid())",
        ],
        ["authenticated public.usuarios table"],
      ],
      [
        "an own-row policy for all commands, to public",
        [
          "grant insert on public.usuarios to anon",
          "create policy own_row on public.usuarios using (auth_user_id = auth.uid())",
        ],
        ["anon public.usuarios table"],
      ],
      [
        "the same policy, but update granted on other columns only",
        [
          "grant update (nombre_usuario, presence_state) on public.usuarios to authenticated",
          "create policy own_row on public.usuarios for update to authenticated using (auth_user_id = auth.uid())",
        ],
        [],
      ],
      [
        "RLS off, update of rol alone granted",
        [
          "alter table public.usuarios disable row level security",
          "grant update (rol) on public.usuarios to authenticated",
        ],
        ["authenticated public.usuarios table"],
      ],
      [
        "RLS off, update of correo alone granted (an unlinked row's link)",
        [
          "alter table public.usuarios disable row level security",
          "grant update (correo) on public.usuarios to authenticated",
        ],
        ["authenticated public.usuarios table"],
      ],
      [
        "a plain view over rol (its owner's rights), update granted",
        [
          "create view public.perfil as select id, rol from public.usuarios",
          "grant select, update on public.perfil to authenticated",
        ],
        ["authenticated public.perfil view"],
      ],
      [
        "the same view with security_invoker (the table's rules apply)",
        [
          "create view public.perfil with (security_invoker = true) as select id, rol from public.usuarios",
          "grant select, update on public.perfil to authenticated",
        ],
        [],
      ],
      [
        "a plain view without the three columns",
        [
          "create view public.perfil as select id, nombre_usuario from public.usuarios",
          "grant select, update on public.perfil to anon, authenticated",
        ],
        [],
      ],
      [
        "RLS off, only select granted",
        [
          "alter table public.usuarios disable row level security",
          "grant select on public.usuarios to anon, authenticated",
        ],
        [],
        "update public.usuarios set rol = 'probe-admin' where id = $ID",
      ],
      [
        "a plain view over rol, update granted on some of its columns (a column grant)",
        [
          "create view public.perfil as select id, nombre_usuario, rol from public.usuarios",
          "grant select on public.perfil to authenticated",
          "grant update (nombre_usuario, rol) on public.perfil to authenticated",
        ],
        ["authenticated public.perfil view"],
        "update public.perfil set rol = 'probe-admin' where id = $ID",
      ],
      [
        "a plain view over a plain view over rol, whose own write was taken away",
        [
          "create view public.perfil as select id, nombre_usuario, rol from public.usuarios",
          "create view public.perfil2 as select * from public.perfil",
          "grant select, update on public.perfil2 to authenticated",
        ],
        ["authenticated public.perfil2 view"],
        "update public.perfil2 set rol = 'probe-admin' where id = $ID",
      ],
      [
        "a plain view over a security_invoker view over rol (under it, the table is checked as the session's role)",
        [
          "create view public.perfil with (security_invoker = true) as select id, rol from public.usuarios",
          "create view public.perfil2 as select * from public.perfil",
          "grant select, update on public.perfil2 to authenticated",
        ],
        [],
        "update public.perfil2 set rol = 'probe-admin' where id = $ID",
      ],
      [
        "a plain view that takes only nombre_usuario from a view over rol (each view column's source is in the view's definition)",
        [
          "create view public.perfil as select id, nombre_usuario, rol from public.usuarios",
          "create view public.perfil2 as select id, nombre_usuario from public.perfil",
          "grant select, update on public.perfil2 to authenticated",
        ],
        [],
      ],
      [
        "an own-account view that only filters on auth_user_id, everything granted (a hosted project's default)",
        [
          "create view public.mi_cuenta as select id, nombre_usuario from public.usuarios where auth_user_id = auth.uid()",
          "grant all on public.mi_cuenta to anon, authenticated",
        ],
        [],
      ],
      [
        "a directory view that only filters on rol, everything granted",
        [
          "create view public.directorio as select id, nombre_usuario from public.usuarios where rol not in ('admin', 'superadmin')",
          "grant all on public.directorio to anon, authenticated",
        ],
        [],
      ],
      [
        "a plain view over rol whose names hold spaces, backslashes and brackets, ordered by a column it does not show",
        [
          'create view public."mi perfil" ("a b", "x\\y", "{c}") as select id, nombre_usuario, rol from public.usuarios order by correo',
          'grant select, update on public."mi perfil" to authenticated',
        ],
        ['authenticated public."mi perfil" view'],
        'update public."mi perfil" set "{c}" = \'probe-admin\' where "a b" = $ID',
      ],
      [
        "the same names without rol, filtering on it",
        [
          'create view public."mi perfil" ("a b", "x\\y") as select id, nombre_usuario from public.usuarios where rol <> \'x\' order by correo',
          'grant select, update on public."mi perfil" to authenticated',
        ],
        [],
      ],
      [
        "a plain view over rol, update granted on nombre_usuario only",
        [
          "create view public.perfil as select id, nombre_usuario, rol from public.usuarios",
          "grant select, update (nombre_usuario) on public.perfil to authenticated",
        ],
        [],
        "update public.perfil set rol = 'probe-admin' where id = $ID",
      ],
      [
        "a rule of another table that writes rol, that table reached through a plain view over it",
        [
          "create table public.perfiles (id bigint, rol_pedido text)",
          "create rule sync_rol as on update to public.perfiles do also update public.usuarios set rol = new.rol_pedido where id = new.id",
          "create view public.mi_perfil as select id, rol_pedido from public.perfiles",
          "grant select, update on public.mi_perfil to authenticated",
          "insert into public.perfiles select id, null from public.usuarios",
        ],
        ["authenticated public.mi_perfil view"],
        "update public.mi_perfil set rol_pedido = 'probe-admin' where id = $ID",
      ],
      [
        "a rule of one table that writes another whose rule writes rol",
        [
          "create table public.t2 (id bigint, v text)",
          "create rule t2_rol as on insert to public.t2 do also update public.usuarios set rol = new.v where id = new.id",
          "create table public.t1 (id bigint, v text)",
          "create rule t1_t2 as on insert to public.t1 do also insert into public.t2 values (new.id, new.v)",
          "grant insert on public.t1 to authenticated",
        ],
        ["authenticated public.t1 rule t1_t2"],
        "insert into public.t1 values ($ID, 'probe-admin')",
      ],
      [
        "a plain view over a view that only an INSTEAD rule for UPDATE makes writable (only the top one granted)",
        [
          "create view public.vr as select id, nombre_usuario, rol from public.usuarios limit 100000",
          "create rule upd as on update to public.vr do instead update public.usuarios set rol = new.rol, nombre_usuario = new.nombre_usuario where id = old.id",
          "create view public.v2 as select id, nombre_usuario, rol from public.vr",
          "grant select, update on public.v2 to authenticated",
        ],
        ["authenticated public.v2 view"],
        "update public.v2 set rol = 'probe-admin' where id = $ID",
      ],
      [
        "a sign-up view over a view that only an INSTEAD rule for INSERT makes writable",
        [
          "create view public.alta as select id, nombre_usuario, rol from public.usuarios limit 0",
          "create rule ins as on insert to public.alta do instead insert into public.usuarios (id, nombre_usuario, rol) values (new.id, new.nombre_usuario, new.rol)",
          "create view public.alta_publica as select * from public.alta",
          "grant insert on public.alta_publica to authenticated",
        ],
        ["authenticated public.alta_publica view"],
        "insert into public.alta_publica values ($ID + 1000000000, 'probe-alta', 'probe-admin')",
      ],
      [
        "an insert rule of usuarios itself that sets rol from another column, written through a plain view",
        [
          "alter table public.usuarios add column rol_pedido text",
          "create rule rol_inicial as on insert to public.usuarios do also update public.usuarios set rol = new.rol_pedido where id = new.id and new.rol_pedido is not null",
          "create view public.alta as select id, nombre_usuario, rol_pedido from public.usuarios",
          "grant insert on public.alta to authenticated",
        ],
        ["authenticated public.alta view"],
        "insert into public.alta values ($ID + 1000000000, 'probe-r5', 'probe-admin')",
      ],
      [
        "rol defaults to the caller's user_metadata (which users write), insert granted on other columns",
        [
          "alter table public.usuarios alter column rol set default coalesce(current_setting('request.jwt.claims', true)::json->'user_metadata'->>'rol', 'usuario')",
          "grant insert (id, nombre_usuario) on public.usuarios to authenticated",
          "create policy alta on public.usuarios for insert to authenticated with check (true)",
          `select set_config('request.jwt.claims', '{"role":"authenticated","user_metadata":{"rol":"probe-admin"}}', true)`,
        ],
        ["authenticated public.usuarios table"],
        "insert into public.usuarios (id, nombre_usuario) values ($ID + 1000000000, 'probe-q16')",
      ],
      [
        "a default on a plain view's rol column, insert granted on other columns",
        [
          "create view public.alta as select id, nombre_usuario, rol from public.usuarios",
          "alter view public.alta alter column rol set default 'probe-admin'",
          "grant insert (id, nombre_usuario) on public.alta to authenticated",
        ],
        ["authenticated public.alta view"],
        "insert into public.alta (id, nombre_usuario) values ($ID + 1000000000, 'probe-q8')",
      ],
      [
        "RLS on and no policy, but authenticated inherits the table's owner (whom RLS does not hold)",
        [
          // As hosted roles are (a grant inherits as its member did when
          // granted, from PostgreSQL 16 on).
          "alter role authenticated inherit",
          "create role probe_owner",
          "alter table public.usuarios owner to probe_owner",
          "grant probe_owner to authenticated",
        ],
        ["authenticated public.usuarios table"],
        "update public.usuarios set rol = 'probe-admin' where id = $ID",
      ],
      [
        "a generated rol, computed from a column authenticated may write",
        [
          "alter table public.usuarios drop column rol cascade",
          "alter table public.usuarios add column rol_base text",
          "alter table public.usuarios add column rol text generated always as (lower(rol_base)) stored",
          "alter table public.usuarios disable row level security",
          "grant select (id), update (rol_base) on public.usuarios to authenticated",
        ],
        ["authenticated public.usuarios table"],
        "update public.usuarios set rol_base = 'PROBE-ADMIN' where id = $ID",
      ],
      [
        "a view over rol that cannot be written (an aggregate), everything granted",
        [
          "create view public.por_rol as select rol, count(*) as n from public.usuarios group by rol",
          "grant all on public.por_rol to anon, authenticated",
        ],
        [],
        "update public.por_rol set rol = 'probe-admin'",
      ],
      [
        "a table that inherits usuarios (its rows are read as usuarios rows), RLS off, insert granted",
        [
          "create table public.usuarios_extra () inherits (public.usuarios)",
          "grant insert on public.usuarios_extra to authenticated",
        ],
        ["authenticated public.usuarios_extra table"],
        "insert into public.usuarios_extra (id, nombre_usuario, rol) values ($ID + 1000000000, 'probe-child', 'probe-admin')",
      ],
      [
        "a table usuarios inherits from (an update of it reaches usuarios rows), RLS off, update granted",
        [
          "create table public.personas (rol text not null default 'usuario')",
          "alter table public.usuarios inherit public.personas",
          "grant select, update on public.personas to authenticated",
        ],
        ["authenticated public.personas table"],
        "update public.personas set rol = 'probe-admin'",
      ],
      [
        "a rule of another table whose action writes rol (it acts with that table's owner's rights)",
        [
          "create table public.solicitudes (id bigint, rol text)",
          "create rule aplicar as on insert to public.solicitudes do also update public.usuarios set rol = new.rol where id = new.id",
          "grant insert on public.solicitudes to authenticated",
        ],
        ["authenticated public.solicitudes rule aplicar"],
        "insert into public.solicitudes values ($ID, 'probe-admin')",
      ],
    ];
    for (const [name, statements, expected, probe] of cases) {
      await sql.begin(async (tx) => {
        const [{ id }] = await tx`insert into public.usuarios (nombre_usuario)
                                  values ('probe') returning id`;
        for (const s of statements) await tx.unsafe(s);
        const found = await tx<{ path: string }[]>`
          select role || ' ' || relation || ' ' || way as path
          from presence.rights_write_paths()`;
        assert.deepEqual(found.map((f) => f.path), expected, name);
        const roles = [...new Set(expected.map((e) => e.split(" ")[0]))];
        const [{ r }] = await tx`select presence.rights_writable_by() as r`;
        assert.deepEqual(r, roles.sort(), name);
        if (probe !== undefined) {
          // The verdict is the database's own: the write goes through
          // exactly where authenticated is named.
          await tx.savepoint(async (sp) => {
            await sp.unsafe("set local role authenticated");
            await sp.unsafe(probe.replaceAll("$ID", String(id)));
            await sp.unsafe("reset role");
          }).catch((e) => {
            if (
              !(e instanceof Error &&
                /permission denied|cannot/.test(e.message))
            ) throw e;
          });
          const [{ wrote }] = await tx`select exists (
              select 1 from public.usuarios where rol = 'probe-admin') as wrote`;
          assert.equal(
            wrote,
            roles.includes("authenticated"),
            `${name}: the write as authenticated`,
          );
        }
        // Undone: each case starts from the fresh table.
        throw new _Undo();
      }).catch((e) => {
        if (!(e instanceof _Undo)) throw e;
      });
    }
    assert.deepEqual(await writableBy(), []);
  },
);

e2eTest(
  "auth-sync: a user who can write his own rol through the Data API gets no rights from it (403, nothing changed); the table's administrators neither, until the operator grants only the columns users may change",
  async () => {
    const boss = await stack.createUser({
      row: { rol: "admin", auth_user_id: true },
    });
    const pest = await stack.createUser({ row: { auth_user_id: true } });
    const victim = await stack.createUser({ row: { auth_user_id: true } });
    assert.equal((await setPassword(boss, victim)).status, 200);

    // The common profile setup: a table grant and own-row policies.
    await sql`grant select, update on public.usuarios to authenticated`;
    await sql`create policy own_row_update on public.usuarios for update
              to authenticated using (auth_user_id = auth.uid())`;
    await sql`create policy own_row_select on public.usuarios for select
              to authenticated using (auth_user_id = auth.uid())`;
    try {
      await asDataApi(
        pest,
        (tx) =>
          tx`update public.usuarios set rol = 'admin'
             where auth_user_id = auth.uid()`,
      );
      const [own] = await sql`select rol from public.usuarios
                              where id = ${pest.rowId!}`;
      assert.equal(own.rol, "admin", "the Data API write took effect");
      const hash = async () =>
        (await sql`select encrypted_password from auth.users
                   where id = ${victim.id}::uuid`)[0].encrypted_password;
      const before = await hash();
      const byPest = await setPassword(pest, victim);
      assert.deepEqual([byPest.status, byPest.code], [403, "admin_required"]);
      assert.equal(await hash(), before);
      assert.equal(byPest.refusedRol.length, 1);
      const line = JSON.parse(byPest.refusedRol[0]);
      assert.equal(line.level, "error");
      assert.deepEqual(line.roles, ["authenticated"]);
      assert.match(line.hint, /docs\/security\.md/);
      // Fail closed: the real administrator too.
      const byBoss = await setPassword(boss, victim);
      assert.deepEqual([byBoss.status, byBoss.code], [403, "admin_required"]);

      // The operator's fix, as docs/security.md gives it (RLS stays on, the
      // own-row policy stays).
      await sql`revoke insert, update on public.usuarios
                from public, anon, authenticated`;
      await sql`grant update (nombre_usuario) on public.usuarios to authenticated`;
      await sql`update public.usuarios set rol = 'usuario'
                where id = ${pest.rowId!}`;
      assert.deepEqual(await writableBy(), []);
      const fixed = await setPassword(boss, victim);
      assert.deepEqual([fixed.status, fixed.refusedRol], [200, []]);
      assert.equal((await setPassword(pest, victim)).status, 403);
      await assert.rejects(
        asDataApi(pest, (tx) =>
          tx`update public.usuarios set rol = 'admin'
             where auth_user_id = auth.uid()`),
        /permission denied/,
      );
    } finally {
      await sql`drop policy if exists own_row_update on public.usuarios`;
      await sql`drop policy if exists own_row_select on public.usuarios`;
      await sql`revoke all on public.usuarios from anon, authenticated`;
    }
  },
);

e2eTest(
  "auth-sync: a burst of administrators' requests on fresh functions runs the rights check once and shares its answer (one error line, every request 403)",
  async () => {
    const boss = await stack.createUser({
      row: { rol: "admin", auth_user_id: true },
    });
    const victim = await stack.createUser({ row: { auth_user_id: true } });
    await sql`alter table public.usuarios disable row level security`;
    await sql`grant update (rol) on public.usuarios to authenticated`;
    const served = await stack.withFunctionEnv({});
    try {
      let answers: Awaited<ReturnType<typeof call>>[] = [];
      const lines = await logLines(async () => {
        answers = await Promise.all(
          Array.from(
            { length: 8 },
            () => passwordUpdate(served.apiUrl, boss, victim),
          ),
        );
      });
      assert.deepEqual(
        answers.map((a) => [a.status, a.body.code]),
        Array(8).fill([403, "admin_required"]),
      );
      assert.equal(
        lines.filter((l) => l.includes('"code":"rights_writable"')).length,
        1,
        "one check, its answer shared by the burst",
      );
      // Each refusal's own line says why its rol counted for nothing.
      const refused = jsonLines(lines).filter((l) => l.fn === "auth-sync");
      assert.deepEqual(
        refused.map((l) => [l.level, l.status, l.rol_ignored]),
        Array(8).fill(["warn", 403, "rights_writable"]),
      );
    } finally {
      await served.close();
      await sql`alter table public.usuarios enable row level security`;
      await sql`revoke all on public.usuarios from anon, authenticated`;
    }
  },
);

e2eTest(
  "auth-sync: on a table with row level security off that users may update (an adopted legacy table), linking oneself to an administrator's row grants nothing",
  async () => {
    const boss = await stack.createUser({
      row: { rol: "superadmin", auth_user_id: true },
    });
    const pest = await stack.createUser({ row: { auth_user_id: true } });
    await sql`alter table public.usuarios disable row level security`;
    await sql`grant select, update on public.usuarios to authenticated`;
    try {
      await asDataApi(pest, async (tx) => {
        await tx`update public.usuarios set auth_user_id = null
                 where id = ${pest.rowId!}`;
        await tx`update public.usuarios set auth_user_id = auth.uid()
                 where id = ${boss.rowId!}`;
      });
      const [link] = await sql`select auth_user_id::text from public.usuarios
                               where id = ${boss.rowId!}`;
      assert.equal(
        link.auth_user_id,
        pest.id,
        "the Data API write took effect",
      );
      const res = await setPassword(pest, boss);
      assert.deepEqual([res.status, res.code], [403, "admin_required"]);
      assert.equal(res.refusedRol.length, 1);
    } finally {
      await sql`alter table public.usuarios enable row level security`;
      await sql`revoke all on public.usuarios from anon, authenticated`;
    }
  },
);

e2eTest(
  "presence.rights_write_paths and rights_writable_by: empty search_path, the caller's rights, executable by service_role and postgres only",
  async () => {
    const rows = await sql`
      select p.proname::text as name, p.proconfig, p.prosecdef,
             has_function_privilege('anon', p.oid, 'execute') as anon,
             has_function_privilege('authenticated', p.oid, 'execute')
               as authenticated,
             has_function_privilege('service_role', p.oid, 'execute')
               as service_role
      from pg_proc p
      where p.pronamespace = 'presence'::regnamespace
        and p.proname in ('rights_write_paths', 'rights_writable_by')
      order by p.proname::text collate "C"`;
    assert.deepEqual(
      rows.map((r) => ({ ...r })),
      [
        ["rights_writable_by"],
        ["rights_write_paths"],
      ].map(([name]) => ({
        name,
        proconfig: ['search_path=""'],
        prosecdef: false,
        anon: false,
        authenticated: false,
        service_role: true,
      })),
    );
  },
);

class _Undo extends Error {}

closeStackAfterAll("rights guard", stack);
