/**
 * The prefix chain as a forward carries it to the executor (the `chain`
 * claim, security/claims.ts): the entry node walked the prompt once, and the
 * executor's cache bookkeeping reads the same chain instead of walking the
 * body again. `hash:tokens` per link, comma-separated, in order.
 *
 * Bounded: a chain whose text would pass CHAIN_CLAIM_MAX is not carried (an
 * agent's conversation of a few hundred messages fits; a pathological one
 * of 2,048 tiny messages is walked again by the executor, as before).
 */
import type { PrefixChain } from './held.ts';
import { CHAIN_LINKS_MAX } from './chain.ts';

/** The longest chain claim a sender writes. */
export const CHAIN_CLAIM_MAX = 6144;

const LINK = /^([0-9a-f]{16}):(\d{1,10})$/;

/** The claim's text for `chain`; undefined for an empty chain or one too long to carry. */
export function chainClaim(chain: PrefixChain): string | undefined {
  if (chain.length === 0) return undefined;
  let out = '';
  for (const link of chain) {
    out += (out ? ',' : '') + link.hash + ':' + link.tokens;
    if (out.length > CHAIN_CLAIM_MAX) return undefined;
  }
  return out;
}

/**
 * A forward's chain claims: `chain`, and with it `head`, the index of the
 * chain's head link (tools and system), which the executor's slots publish
 * so an entry can tell what a slot shares with a new conversation. A
 * receiver that does not know `head` ignores it.
 */
export function chainClaims(r: { chain?: PrefixChain; chainHead?: number }): { chain?: string; head?: string } {
  const chain = r.chain && chainClaim(r.chain);
  if (!chain) return {};
  return r.chainHead !== undefined && r.chainHead >= 0 && r.chainHead < r.chain!.length ? { chain, head: String(r.chainHead) } : { chain };
}

/** The head index a `head` claim carries, when it is one for a chain of `links` links. */
export function headOfClaim(text: string | undefined, links: number): number | undefined {
  if (text === undefined || !/^\d{1,5}$/.test(text)) return undefined;
  const n = Number(text);
  return n < links ? n : undefined;
}

/** The chain a claim carries; undefined when it is malformed (the executor then walks the body itself). */
export function chainOfClaim(text: string | undefined): PrefixChain | undefined {
  if (!text || text.length > CHAIN_CLAIM_MAX) return undefined;
  const parts = text.split(',');
  if (parts.length > CHAIN_LINKS_MAX) return undefined;
  const chain: { hash: string; tokens: number }[] = [];
  let before = 0;
  for (const part of parts) {
    const m = LINK.exec(part);
    if (!m) return undefined;
    const tokens = Number(m[2]);
    // Cumulative counts never fall: one that does is not a chain this code made.
    if (tokens < before) return undefined;
    before = tokens;
    chain.push({ hash: m[1], tokens });
  }
  return chain;
}
