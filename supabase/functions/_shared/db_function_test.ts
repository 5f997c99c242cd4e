import assert from "node:assert/strict";
import postgres from "postgres";
import {
  asMigrationMissing,
  callingDbFunction,
  domainsLiteral,
  isAuthSchemaError,
  isMissingFunction,
  LATEST_MIGRATION,
  uuidLiteral,
} from "./db_function.ts";
import { HttpError } from "./errors.ts";

const ID = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";

// A PostgresError as postgres.js builds it from the server's fields.
function pgError(
  code: string,
  where?: string,
  message = "boom",
): postgres.PostgresError {
  const error = new postgres.PostgresError(
    { message, code, where } as unknown as string,
  );
  return error;
}

Deno.test("uuidLiteral: a UUID becomes a uuid literal, anything else throws", () => {
  assert.equal(uuidLiteral(ID), `'${ID}'::uuid`);
  assert.throws(() => uuidLiteral(`${ID}'; drop table x; --`), TypeError);
  assert.throws(() => uuidLiteral(""), TypeError);
});

Deno.test("domainsLiteral: domain names or * become a text[] literal, a quote or @ throws", () => {
  assert.equal(domainsLiteral([]), "'{}'::text[]");
  assert.equal(
    domainsLiteral(new Set(["example.com", "*"])),
    "array['example.com','*']::text[]",
  );
  assert.throws(() => domainsLiteral(["exa'mple.com"]), TypeError);
  assert.throws(() => domainsLiteral(["@example.com"]), TypeError);
});

Deno.test("isMissingFunction: undefined function, schema or privilege raised by the call, not from inside PL/pgSQL", () => {
  assert.ok(isMissingFunction(pgError("42883")));
  assert.ok(isMissingFunction(pgError("3F000")));
  assert.ok(isMissingFunction(pgError("42501")));
  assert.ok(!isMissingFunction(pgError("42501", "PL/pgSQL function x line 3")));
  assert.ok(!isMissingFunction(pgError("42703")));
  assert.ok(!isMissingFunction(new Error("42883")));
});

// A database whose migrations were applied before presence.live_session
// existed: record_ping, as replaced later, calls a function it lacks.
const LIVE_SESSION_MISSING = pgError(
  "42883",
  "PL/pgSQL function presence.record_ping(uuid,uuid,text,text,text[],integer) line 21 at SQL statement",
  "function presence.live_session(uuid, uuid) does not exist",
);

Deno.test("isMissingFunction: a function of the project missing where another calls it is a missing migration, not the auth schema", async () => {
  assert.ok(isMissingFunction(LIVE_SESSION_MISSING));
  assert.ok(!isAuthSchemaError(LIVE_SESSION_MISSING));
  const missing = await callingDbFunction("presence.record_ping", () => {
    throw LIVE_SESSION_MISSING;
  }).catch((e) => e);
  assert.ok(missing instanceof HttpError);
  assert.equal(missing.code, "migration_missing");
  assert.match(
    String(missing.extra.error),
    new RegExp(
      `^presence\\.live_session is not callable: apply the migrations up to ${LATEST_MIGRATION}$`,
    ),
  );
});

Deno.test("callingDbFunction: a missing function is a 500 migration_missing naming it and the migration; other errors pass", async () => {
  const missing = await callingDbFunction("presence.record_ping", () => {
    throw pgError("42883");
  }).catch((e) => e);
  assert.ok(missing instanceof HttpError);
  assert.equal(missing.code, "migration_missing");
  assert.equal(missing.status, 500);
  assert.match(
    String(missing.extra.error),
    new RegExp(`^presence\\.record_ping .*${LATEST_MIGRATION}$`),
  );
  const other = pgError("57014");
  await assert.rejects(
    callingDbFunction("presence.record_ping", () => Promise.reject(other)),
    (e) => e === other,
  );
  assert.equal(await callingDbFunction("f", () => Promise.resolve(7)), 7);
});

Deno.test("isAuthSchemaError: privilege, undefined table, column, function or schema where the auth schema is read; not the same codes from usuarios, a timeout or a plain error", () => {
  const inLiveSession =
    'SQL statement "select ..." PL/pgSQL function presence.live_session(uuid,uuid) line 3 at SQL statement';
  for (const code of ["42501", "42P01", "42703", "42883", "3F000"]) {
    assert.ok(isAuthSchemaError(pgError(code, inLiveSession)), code);
  }
  assert.ok(
    isAuthSchemaError(
      pgError("42501", undefined, "permission denied for schema auth"),
    ),
  );
  assert.ok(
    isAuthSchemaError(
      pgError("42P01", undefined, 'relation "auth.sessions" does not exist'),
    ),
  );
  // An enum presence_state compared with text, in record_ping's update.
  assert.ok(
    !isAuthSchemaError(
      pgError(
        "42883",
        "PL/pgSQL function presence.record_ping(uuid,uuid,text,text,text[],integer) line 60 at SQL statement",
        "operator does not exist: public.estado = text",
      ),
    ),
  );
  assert.ok(!isAuthSchemaError(pgError("57014", inLiveSession)));
  assert.ok(!isAuthSchemaError(new Error("42703")));
});

Deno.test("LATEST_MIGRATION: the newest migration of the repository, and the one docs/api.md names", async () => {
  const root = new URL("../../../", import.meta.url);
  const dir = new URL("supabase/migrations/", root);
  const files = [...Deno.readDirSync(dir)].map((e) => e.name)
    .filter((n) => n.endsWith(".sql")).sort();
  assert.equal(files.at(-1), LATEST_MIGRATION);
  const api = await Deno.readTextFile(new URL("docs/api.md", root));
  assert.ok(api.includes(LATEST_MIGRATION), "docs/api.md names it");
});

Deno.test("asMigrationMissing: an undefined schema, table, column or function that a statement on the project's objects meets is 500 migration_missing, naming the condition, never the server's message", () => {
  const undefinedAt = (
    code: string,
    message: string,
    query = "",
    where?: string,
  ) => Object.assign(pgError(code, where, message), { query });
  const ours = [
    undefinedAt("3F000", 'schema "presence" does not exist'),
    undefinedAt("42P01", 'relation "presence.changes" does not exist'),
    undefinedAt(
      "42703",
      'column "actor_key" does not exist',
      "select actor_key from public.auth_sync_intents where id = $1",
    ),
    undefinedAt("42883", "function presence.reader(uuid) does not exist"),
  ];
  for (const error of ours) {
    const answer = asMigrationMissing(error);
    assert.ok(answer, error.message);
    assert.equal(answer.status, 500);
    assert.equal(answer.code, "migration_missing");
    assert.match(
      String(answer.extra.error),
      new RegExp(
        `^undefined \\w+ \\(SQLSTATE ${error.code}\\): apply the migrations up to ${LATEST_MIGRATION}$`,
      ),
    );
    assert.ok(!String(answer.extra.error).includes("presence."));
  }
  for (
    const error of [
      // The app's own objects, or a statement that is not ours.
      undefinedAt("42P01", 'relation "public.perfiles" does not exist'),
      undefinedAt("42703", 'column "apodo" does not exist', "select apodo"),
      // Raised inside a function: what it reads is not for the migrations
      // to fix.
      undefinedAt(
        "42703",
        'column "x" does not exist',
        "select presence.reader()",
        "PL/pgSQL function presence.reader() line 3",
      ),
      // Not an undefined object.
      undefinedAt("23505", "duplicate key in presence.changes"),
      new Error('schema "presence" does not exist'),
    ]
  ) assert.equal(asMigrationMissing(error), null, String(error));
});
