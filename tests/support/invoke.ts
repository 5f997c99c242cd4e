/**
 * Calls a function the way apps do (`supabase.functions.invoke`) and gives
 * back status, headers and JSON body whether it succeeded or not.
 *
 * @module
 */
import { FunctionsHttpError, type SupabaseClient } from "@supabase/supabase-js";

/** What a call returned. */
export interface Invoked {
  readonly status: number;
  readonly headers: Headers;
  // deno-lint-ignore no-explicit-any
  readonly body: any;
}

/**
 * `client.functions.invoke(name, options)`, with the error's Response read
 * back into status and JSON.
 *
 * @example
 * ```ts
 * const { status, body } = await invoke(user.client, "presence-ping", { body: { state: "offline" } });
 * ```
 */
export async function invoke(
  client: SupabaseClient,
  name: string,
  options: Parameters<SupabaseClient["functions"]["invoke"]>[1] = {},
): Promise<Invoked> {
  const { data, error, response } = await client.functions.invoke(
    name,
    options,
  );
  if (error instanceof FunctionsHttpError) {
    const res = error.context as Response;
    return { status: res.status, headers: res.headers, body: await res.json() };
  }
  if (error) throw error;
  return { status: response!.status, headers: response!.headers, body: data };
}

/** A plain `fetch` to `/functions/v1/<name>` for what supabase-js cannot express. */
export async function call(
  apiUrl: string,
  name: string,
  init: RequestInit = {},
  query = "",
): Promise<Invoked> {
  const res = await fetch(`${apiUrl}/functions/v1/${name}${query}`, {
    method: "POST",
    ...init,
  });
  const text = await res.text();
  return {
    status: res.status,
    headers: res.headers,
    body: text ? JSON.parse(text) : null,
  };
}
