/**
 * Pass 4, the cache of verified tokens: ES256 pings whose every token the
 * isolate has never seen (each verified, signature and all), against the
 * same tokens sent again (each answered from the cache). The database's
 * session proof runs on both. Same client (the Deno one, a fixed number of
 * requests, each token once) and concurrency for both.
 *
 * @module
 */
import { type BenchContext, pingPass } from "./context.ts";
import { runDenoClient } from "./load.ts";
import type { TokenCachePass } from "./types.ts";
import { mintTokens } from "./users.ts";

/** First-seen tokens against seen-before ones, at concurrency `c`. */
export async function measureTokenCache(
  ctx: BenchContext,
  c: number,
  count: number,
): Promise<TokenCachePass> {
  const { stack } = ctx;
  ctx.log(`Minting ${count} fresh ES256 tokens`);
  const tokens: string[] = [];
  // A token per user and round; rounds differ in iat, so every token
  // string is new to the isolate.
  for (let round = 0; tokens.length < count; round++) {
    const minted = await mintTokens({
      users: Math.min(ctx.users, count - tokens.length),
      signingKeyFile: stack.signingKeyFile,
      jwtSecret: stack.jwtSecret,
      issuer: stack.issuer,
      expiry: stack.jwtExpiry,
      iatOffsetS: -(round + 1),
      only: "es256",
    });
    tokens.push(...minted.es256);
  }
  const run = () =>
    runDenoClient({
      url: stack.variants.main.pingUrl,
      tokens,
      mode: "count",
      count: tokens.length,
      concurrency: c,
    });
  stack.variants.main.forgetVerifiedTokens();
  ctx.log(`Token cache: ${count} first-seen ES256 tokens, concurrency ${c}`);
  const firstSeen = await pingPass(ctx, stack.variants.main, "es256", c, run);
  ctx.log(`Token cache: the same tokens again, concurrency ${c}`);
  const seenBefore = await pingPass(ctx, stack.variants.main, "es256", c, run);
  return { concurrency: c, tokens: tokens.length, firstSeen, seenBefore };
}
