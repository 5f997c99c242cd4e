/**
 * `npm run status`: prints again what `npm start` printed, the URLs and
 * keys of the local stack running on the data folder (`--data-dir`, or
 * `LOCAL_DATA_DIR`, default `.local/data`), as `supabase status` does.
 * Exits 1 when no stack runs there.
 *
 * @module
 */
import { parseArgs } from "node:util";
import {
  LOCAL_ANON_KEY,
  LOCAL_JWT_SECRET,
  LOCAL_PUBLISHABLE_KEY,
  LOCAL_SECRET_KEY,
  LOCAL_SERVICE_ROLE_KEY,
} from "./auth/mod.ts";
import { readStackInfo } from "./data_lock.ts";
import { DEFAULT_DATA_DIR } from "./stack.ts";
import { redactUrl } from "./start_error.ts";

/** What the status lines show. */
export interface StatusInput {
  database: string;
  apiUrl: string;
  dbUrl: string;
  /** The Mailpit-compatible mail API, if served. */
  mailUrl?: string | null;
}

/**
 * The status block: the same fields `supabase status` prints, and the
 * shell exports the README's examples use. These are the well-known local
 * development keys, not secrets of any deployed project. The URL of a
 * database the developer passed in is shown without its password.
 */
export function statusText(s: StatusInput): string {
  return `Local stack is running (${s.database}).

         API URL: ${s.apiUrl}
   Functions URL: ${s.apiUrl}/functions/v1
       Demo page: ${s.apiUrl}/demo/
           Inbox: ${s.apiUrl}/inbox/
${s.mailUrl ? `     Mailpit URL: ${s.mailUrl}\n` : ""}          DB URL: ${
    s.database === "pglite" ? s.dbUrl : redactUrl(s.dbUrl)
  }
      JWT secret: ${LOCAL_JWT_SECRET}
 Publishable key: ${LOCAL_PUBLISHABLE_KEY}
      Secret key: ${LOCAL_SECRET_KEY}
        anon key: ${LOCAL_ANON_KEY}
service_role key: ${LOCAL_SERVICE_ROLE_KEY}

For a shell (the README's examples use these):
  export API_URL=${s.apiUrl}
  export PUBLISHABLE_KEY=${LOCAL_PUBLISHABLE_KEY}
  export SECRET_KEY=${LOCAL_SECRET_KEY}
  export ANON_KEY=${LOCAL_ANON_KEY}
  export SERVICE_ROLE_KEY=${LOCAL_SERVICE_ROLE_KEY}`;
}

if (import.meta.main) {
  let values: { "data-dir"?: string };
  try {
    ({ values } = parseArgs({
      args: Deno.args,
      options: { "data-dir": { type: "string" } },
    }));
  } catch (error) {
    // One line, as npm start answers a bad flag (`supabase status -o env`
    // habits included), not a stack trace.
    console.error(
      `npm run status failed: ${
        (error as Error).message
      }. It takes --data-dir <path> (npm run status -- --data-dir <path>).`,
    );
    Deno.exit(1);
  }
  const dataDir = values["data-dir"] ?? Deno.env.get("LOCAL_DATA_DIR") ??
    DEFAULT_DATA_DIR;
  const info = await readStackInfo(dataDir);
  if (!info?.apiUrl || !info.dbUrl || !info.database) {
    console.error(
      `No local stack is running on ${dataDir}. Start one with npm start.`,
    );
    Deno.exit(1);
  }
  console.log(statusText({
    database: info.database,
    apiUrl: info.apiUrl,
    dbUrl: info.dbUrl,
    mailUrl: info.mailUrl,
  }));
}
