/**
 * The prefix chain (SPEC section 9, step 6): one hash per boundary of a
 * prompt, each chained to the one before, over the prompt's canonical text
 * — never its JSON bytes, so whitespace, key order and escapes never change
 * a hash. One definition serves the entry node's router, the executor's
 * cache digests and the sim engine's cache model, so all three agree on
 * what "the first n messages" are and how many tokens they hold.
 *
 * Boundaries: chat (and Responses, Messages) at the leading system
 * message(s), then at every tool definition (one link per tool, so a tool
 * appended at the end keeps the earlier links), then at every message;
 * completions at every 1 KiB of prompt and at its end.
 *
 * Canonical text is what a chat template renders: each segment as
 * `<|role|>\ntext\n`, the tools (role `tools`) right after the leading
 * system message(s), as chat templates put them, a chat ending in
 * `<|assistant|>\n`. A link's `tokens` are the
 * rendered characters up to it ÷ 4 (the sim engine's stand-in tokenizer, so
 * the chain and the sim count alike; SPEC: bytes ÷ 4 where the engine has
 * not said).
 *
 * Bounded: at most CHAIN_WALK_MAX bytes of the body are walked in all, and
 * only the elements inside that walk are parsed (one at a time), so a 30 MiB
 * body costs what its first MiB costs; at most CHAIN_LINKS_MAX links are
 * made, whatever the messages' size. Past the bound the chain simply
 * stops: a prefix longer than that is priced as if nothing past it were
 * held. Pure: the same body gives the same chain on every node.
 */
import crypto from 'node:crypto';
import type { ScannedObject } from '../http/json-scan.ts';
import type { PromptDialect } from '../workloads/workloads.ts';
import { renderSegment, type Segment } from './canonical.ts';
import { readSegments, type ChainOptions, type Sink } from './segments.ts';
import { BodySource } from './sources.ts';
import { tokensIn } from './tokens.ts';
import type { ChainLink, PrefixChain } from './held.ts';

export type { ChainLink, PrefixChain, ChainOptions };

/** Bytes of the body walked in all, for one chain. */
export const CHAIN_WALK_MAX = 1024 * 1024;
/**
 * Links in one chain at most: a body of 30,000 tiny messages inside the
 * 1 MiB walk would otherwise cost 100 ms and more of parsing and hashing
 * (and a digest holds at most 1,024 entries per target anyway).
 */
export const CHAIN_LINKS_MAX = 2048;

/** A chain with what routing also needs from the walk. */
export interface PromptWalk {
  readonly chain: PrefixChain;
  /**
   * Index of the first boundary — tools and system (chat), else the first
   * message; completions: the first 1 KiB — whose hash is the prefix key;
   * -1 when the chain is empty.
   */
  readonly head: number;
  /** The walk reached the prompt's end (false: cut at CHAIN_WALK_MAX, or the prompt is not readable). */
  readonly complete: boolean;
}

/** The prefix chain of a request body the scanner has already checked (see walkPrompt). */
export function prefixChain(body: Buffer, scan: ScannedObject, dialect: PromptDialect | undefined, opts: ChainOptions = {}): PrefixChain {
  return walkPrompt(body, scan, dialect, opts).chain;
}

/** The prefix chain of a body, with its first boundary and whether it covers the whole prompt. */
export function walkPrompt(body: Buffer, scan: ScannedObject, dialect: PromptDialect | undefined, opts: ChainOptions = {}): PromptWalk {
  const sink = new ChainSink();
  if (!dialect) return { chain: [], head: -1, complete: false };
  const src = new BodySource(body, scan, CHAIN_WALK_MAX, () => sink.links.length >= CHAIN_LINKS_MAX);
  readSegments(dialect, src, sink, opts);
  return { chain: sink.links, head: sink.head, complete: !src.cut && sink.links.length > 0 };
}

/** The hash of the link that follows the one hashed `prev` ('' for the first) and ends with `text`. */
export function linkHash(prev: string, text: string): string {
  // The previous hash is 16 hex digits (or nothing, first), so hash input never runs ambiguously into the text.
  return crypto.hash('sha256', prev + text, 'hex').slice(0, 16);
}

class ChainSink implements Sink {
  readonly links: ChainLink[] = [];
  head = -1;
  #headNext = false;
  #prev = '';
  #chars = 0;

  segment(s: Segment): void {
    this.chunk(renderSegment(s));
  }

  chunk(text: string): void {
    if (this.links.length >= CHAIN_LINKS_MAX) return;
    this.#chars += text.length;
    this.#prev = linkHash(this.#prev, text);
    this.links.push({ hash: this.#prev, tokens: tokensIn(this.#chars) });
    if (this.#headNext) {
      this.head = this.links.length - 1;
      this.#headNext = false;
    }
  }

  endOfHead(): void {
    if (this.head >= 0 || this.#headNext) return;
    if (this.links.length > 0) this.head = this.links.length - 1;
    else this.#headNext = true;
  }
}

