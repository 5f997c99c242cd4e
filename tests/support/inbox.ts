/**
 * The local stack's mail catcher (`/inbox/`), read as a person reads a
 * mailbox: the messages sent to an address, and a mailed link followed.
 *
 * @module
 */
import type { SupabaseClient } from "@supabase/supabase-js";

/** A message in the inbox, as `GET /inbox/api/messages` lists it. */
export interface Message {
  id: string;
  to: string;
  subject: string;
  type: string;
  link: string;
  otp: string;
}

/** The messages the stack at `apiUrl` has sent to `to`, newest first. */
export async function mails(apiUrl: string, to: string): Promise<Message[]> {
  const res = await fetch(
    `${apiUrl}/inbox/api/messages?to=${encodeURIComponent(to)}`,
  );
  if (res.status !== 200) {
    await res.body?.cancel();
    throw new Error(`inbox answered ${res.status}`);
  }
  return (await res.json()).messages;
}

/**
 * Follows a mailed Auth link as a browser does, up to its redirect, and
 * returns the parameters Auth put in the redirect's fragment (the session
 * of a confirmed sign-up, `type`, or an error).
 */
export async function follow(link: string): Promise<URLSearchParams> {
  const res = await fetch(link, { redirect: "manual" });
  await res.body?.cancel();
  if (res.status !== 303) throw new Error(`${link} answered ${res.status}`);
  return new URLSearchParams(
    new URL(res.headers.get("location")!).hash.slice(1),
  );
}

/**
 * Signs `email` up with `client` on a stack that confirms by mail, and
 * follows the confirmation link from the inbox, as a person does: the
 * account then proves its address (`_shared/email_proof.ts`). Resolves to
 * the account's id.
 */
export async function signUpByMail(
  client: SupabaseClient,
  apiUrl: string,
  email: string,
  password: string,
): Promise<string> {
  const { data, error } = await client.auth.signUp({ email, password });
  if (error) throw error;
  const [mail] = await mails(apiUrl, email);
  if (!mail) throw new Error(`no confirmation mail for ${email}`);
  const back = await follow(mail.link);
  if (back.get("type") !== "signup") throw new Error(`${back}`);
  return data.user!.id;
}
