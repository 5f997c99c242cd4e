/**
 * Databases the fault suites may stop and start: a throw-away PostgreSQL
 * cluster of their own (never the shared one), and a PGlite wire server
 * restarted on the same port and data folder.
 *
 * @module
 */
import {
  type PgliteServer,
  startPgliteServer,
} from "../../local/db/pglite_server.ts";
import { freePort } from "../../local/testing/cluster.ts";

import type { RestartableDb } from "../../local/testing/cluster.ts";
export type { RestartableDb } from "../../local/testing/cluster.ts";

export {
  clusterUnavailable,
  freePort,
  throwawayCluster,
} from "../../local/testing/cluster.ts";

/**
 * A PGlite wire server on a free port with its data in a temporary folder,
 * stopped by closing it and started again on the same port and folder.
 */
export async function restartablePglite(): Promise<RestartableDb> {
  const dir = await Deno.makeTempDir({ prefix: "verify-pglite-" });
  const port = freePort();
  let server: PgliteServer | null = await startPgliteServer({
    dataDir: dir,
    port,
  });
  return {
    kind: "pglite",
    url: server.url,
    async stop() {
      await server?.close();
      server = null;
    },
    async start() {
      server = await startPgliteServer({ dataDir: dir, port });
    },
    async destroy() {
      await server?.close();
      server = null;
      await Deno.remove(dir, { recursive: true });
    },
  };
}
