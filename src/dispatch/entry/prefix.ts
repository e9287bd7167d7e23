/**
 * Prefix affinity (SPEC section 9, step 6): a request without a session key
 * gets an implicit one from the first boundary of its prefix chain — the
 * tools and system message (with neither, the first message; completions:
 * the first 1 KiB of prompt) — so requests that share a system prompt meet
 * where it is cached, from every entry node, without coordination. The
 * chain (src/prompt/chain.ts) reads the raw bytes the scanner already
 * validated, with bounded work whatever the prompt's size.
 */
import type { ScannedObject } from '../../http/json-scan.ts';
import type { PromptWalk } from '../../prompt/chain.ts';
import { walkPrompt, type ChainOptions } from '../../prompt/chain.ts';
import type { PromptDialect } from '../../workloads/workloads.ts';

export { arrayElements } from '../../http/json-scan.ts';

/** The implicit session key of a walked prompt, or undefined when it has no prompt to key on. */
export function prefixKeyOf(walk: PromptWalk): string | undefined {
  return walk.head < 0 ? undefined : `p:${walk.chain[walk.head].hash}`;
}

/** The implicit session key of a request, or undefined when it has no prompt to key on. */
export function prefixKey(body: Buffer, scan: ScannedObject, dialect: PromptDialect | undefined, opts?: ChainOptions): string | undefined {
  return prefixKeyOf(walkPrompt(body, scan, dialect, opts));
}
