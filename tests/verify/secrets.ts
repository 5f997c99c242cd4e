/**
 * Secrets: no log line may contain a token, a password, a key or a
 * database URL. The stack's start banner is the one deliberate exception:
 * it prints the well-known local keys and the seeded passwords, as
 * `supabase status` does, and is left out of the scan exactly.
 *
 * @module
 */
import { cursorKeyBytes } from "../../supabase/functions/presence/cursor.ts";
import type { Secrets, Tally } from "./_support.ts";

const _BANNER_FIRST = /^Local stack is running/;
const _BANNER_LAST = /^Press Ctrl-C to stop\.$/;

/** The lines of local/start.ts's banner block, first to last inclusive. */
export function bannerBlock(lines: readonly string[]): string[] {
  const first = lines.findIndex((l) => _BANNER_FIRST.test(l.trim()));
  if (first < 0) return [];
  const last = lines.findIndex((l, i) =>
    i > first && _BANNER_LAST.test(l.trim())
  );
  return lines.slice(first, last < 0 ? undefined : last + 1);
}

/**
 * Scans every line of every source (the banner block excluded) for
 * anything secret-shaped or any secret the run used; each hit is a failure
 * that names the source and line number, not the secret.
 */
export function scanLogs(
  tally: Tally,
  secrets: Secrets,
  sources: Record<string, readonly string[]>,
): void {
  const category = "secrets: log lines scanned";
  for (const [name, lines] of Object.entries(sources)) {
    const banner = bannerBlock(lines);
    const first = banner.length ? lines.indexOf(banner[0]) : -1;
    for (const [i, line] of lines.entries()) {
      if (first >= 0 && i >= first && i < first + banner.length) continue;
      tally.count(category);
      const hit = secrets.find(line);
      if (hit) {
        tally.fail(
          category,
          `${name} line ${i + 1} contains ${hit}: ${
            line.slice(0, 80).replace(/eyJ[\w-]+\.[\w-]+\.[\w-]*/g, "<jwt>")
          }…`,
        );
      }
    }
    tally.figure(
      `secrets: ${name}`,
      `${lines.length} lines, banner block of ${banner.length} lines excluded`,
    );
  }
  tally.figure("secrets: distinct non-JWT secrets scanned for", secrets.size);
}

/**
 * The presence function's cursor key (derived from the service role key)
 * in the spellings a log line could carry it: hex, base64 and base64url.
 */
export async function cursorKeySecrets(
  serviceRoleKey: string,
): Promise<string[]> {
  const bytes = await cursorKeyBytes(serviceRoleKey);
  const hex = [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
  const b64 = btoa(String.fromCharCode(...bytes));
  const b64url = b64.replaceAll("+", "-").replaceAll("/", "_").replace(
    /=+$/,
    "",
  );
  return [hex, b64, b64url];
}
