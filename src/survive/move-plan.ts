/**
 * Moving a cache (SPEC section 13): the pure parts. Who holds a turn's
 * conversation when routing sends it elsewhere (the entry's hint, carried as
 * the `move` claim), whether moving that slot is cheaper than prefilling it
 * at the new host (the executor's price, on its own measured rates), the
 * claim's wire form, and what two slot files must share before one is
 * restored where the other was saved.
 *
 * The entry only names the holder: it sees every member's digest, so it
 * knows which idle slot holds the longest prefix of the prompt. The executor
 * prices: the inputs (its prefill rate, its KV bytes per token, the rate its
 * own moves came at) are all its own.
 */
import type { PrefixChain } from '../prompt/held.ts';
import { eligibleTargets } from '../route/eligibility.ts';
import type { Candidate, HostView } from '../route/types.ts';
import type { SlotFingerprint } from './slot-store.ts';

/** A prefix shorter than this is prefilled, never moved: a move costs two member calls and two engine calls at least. */
export const MIN_MOVE_TOKENS = 256;

/** What the entry tells the executor: member `from` holds the prompt up to chain link `link` (`tokens` tokens) in an idle slot. */
export interface MoveClaim {
  from: string;
  link: string;
  tokens: number;
}

/** The `move` claim's value: `tokens.link.member` (the member's name URI-encoded: a claim value has no `;`). */
export function moveClaim(m: MoveClaim | undefined): string | undefined {
  return m && `${Math.round(m.tokens)}.${m.link}.${encodeURIComponent(m.from)}`;
}

const CLAIM = /^(\d{1,9})\.([0-9a-f]{16})\.(\S{1,400})$/;

/** The move a claim names; undefined for a missing or malformed one (the turn then runs as without it). */
export function moveOfClaim(value: string | undefined): MoveClaim | undefined {
  const m = value === undefined ? null : CLAIM.exec(value);
  if (!m) return undefined;
  try {
    return { tokens: Number(m[1]), link: m[2], from: decodeURIComponent(m[3]) };
  } catch {
    return undefined;
  }
}

export interface HintInputs {
  chain: PrefixChain;
  model: string;
  workload: string;
  /** The host routing chose, with what it is believed to hold of this prompt. */
  to: Pick<Candidate, 'host' | 'cached'>;
  /** Every host this node knows, draining ones included: a draining host's slots are what most needs to move. */
  hosts: readonly HostView[];
}

/**
 * The member whose idle slot holds the longest prefix of this prompt, when
 * that is at least MIN_MOVE_TOKENS more than the chosen host holds, both
 * publish the same model file (SHA-256) and context: undefined otherwise.
 * Busy slots are left alone (their request is replacing what they hold).
 * A draining member's RAM pool counts as its slots do: it brings the prompt
 * back into a slot when asked (files/cache-move.ts), and loses it otherwise.
 */
export function moveHint(i: HintInputs): MoveClaim | undefined {
  if (i.chain.length === 0) return undefined;
  const target = i.hosts.find((h) => h.name === i.to.host)?.models.get(i.model);
  const sha = target?.file?.sha256;
  if (!target || !sha) return undefined;
  // Built only once an idle slot of another host is met: most decisions on a one-host model never need it.
  let index: Set<string> | undefined;
  let best: MoveClaim | undefined;
  for (const h of i.hosts) {
    if (h.name === i.to.host || (!h.fresh && !h.local)) continue;
    const m = h.models.get(i.model);
    if (!m || m.file?.sha256 !== sha || (m.ctx !== undefined && target.ctx !== undefined && m.ctx !== target.ctx)) continue;
    for (const t of eligibleTargets(m, i.workload)) {
      for (const s of t.digest?.slots ?? []) {
        if (s.busy || !s.last || (best && s.last.tokens <= best.tokens)) continue;
        index ??= new Set(i.chain.map((l) => l.hash));
        // The slot's whole prompt, or (this prompt grew inside its last message) all of it but that message.
        const held = index.has(s.last.hash) ? s.last : s.prev && index.has(s.prev.hash) ? s.prev : undefined;
        if (held && (!best || held.tokens > best.tokens)) best = { from: h.name, link: held.hash, tokens: held.tokens };
      }
      // A draining host brings a prompt back from its engine's RAM pool for a member that asks (it will lose it otherwise).
      const ram = h.draining ? t.digest?.ram : undefined;
      if (ram?.size) {
        for (let k = i.chain.length - 1; k >= 0; k--) {
          const tokens = ram.get(i.chain[k].hash);
          if (tokens === undefined) continue;
          if (!best || tokens > best.tokens) best = { from: h.name, link: i.chain[k].hash, tokens };
          break;
        }
      }
    }
  }
  return best && best.tokens - (i.to.cached ?? 0) >= MIN_MOVE_TOKENS ? best : undefined;
}

export type MoveOutcome = 'moved' | 'priced_out' | 'refused' | 'gone' | 'failed';

/** What a move did, for the decision feed, /metrics and the log. */
export interface MoveResult {
  outcome: MoveOutcome;
  from: string;
  /** Tokens the engine restored (moved), or the holder's slot held (otherwise). */
  tokens: number;
  bytes?: number;
  ms?: number;
  why?: string;
}

/** The X-Viiwork-Moved header's value for a move (the member's name URI-encoded, last). */
export function movedHeader(r: MoveResult): string {
  return `${r.outcome} ${Math.round(r.tokens)} ${r.bytes ?? '-'} ${r.ms ?? '-'} ${encodeURIComponent(r.from)}`;
}

const MOVED = /^(moved|priced_out|refused|gone|failed) (\d{1,9}) (\d{1,15}|-) (\d{1,9}|-) (\S{1,400})$/;

/** The move an X-Viiwork-Moved header names; undefined for a missing or malformed one. */
export function moveOfHeader(value: string | string[] | undefined): MoveResult | undefined {
  const m = typeof value === 'string' ? MOVED.exec(value) : null;
  if (!m) return undefined;
  try {
    return { outcome: m[1] as MoveOutcome, tokens: Number(m[2]), ...(m[3] !== '-' ? { bytes: Number(m[3]) } : {}), ...(m[4] !== '-' ? { ms: Number(m[4]) } : {}), from: decodeURIComponent(m[5]) };
  } catch {
    return undefined;
  }
}

/** What the executor knows of moving and prefilling here. */
export interface MoveCosts {
  /** KV bytes one token takes in a slot file of this model (learned from files, else the GGUF's shape). */
  bytesPerToken: number;
  /** Member-to-member bytes per ms, measured by this node's moves (else the default). */
  bytesPerMs: number;
  /** Engine save and restore, bytes per ms each (measured, else the default). */
  engineBytesPerMs: number;
  /** This host's prefill, ms per 1,000 uncached tokens (its score; else the default). */
  prefillMsPer1k: number;
  /** Round trip to the holder (two member calls). */
  rttMs: number;
}

/** A member link's rate before any move measured one: 1 Gb/s, a LAN's. */
export const DEFAULT_BYTES_PER_MS = 125_000;
/** Engine save or restore before any was measured: a disk's and memory copy's rate, 1 GB/s. */
export const DEFAULT_ENGINE_BYTES_PER_MS = 1_000_000;
/** Prefill before this host has a score: a GPU's order of magnitude, so that a move must pay against a fast host too. */
export const DEFAULT_PREFILL_MS_PER_1K = 200;

export interface MovePrice {
  bytes: number;
  /** Expected ms to save, send and restore the slot. */
  moveMs: number;
  /** Expected ms to prefill what it holds beyond what this host holds. */
  prefillMs: number;
}

/** The price of moving `tokens` held elsewhere against prefilling them here beyond the `cachedHere` already held. */
export function priceMove(tokens: number, cachedHere: number, c: MoveCosts): MovePrice {
  const bytes = tokens * c.bytesPerToken;
  const moveMs = 2 * c.rttMs + bytes / c.bytesPerMs + (2 * bytes) / c.engineBytesPerMs;
  const prefillMs = (Math.max(0, tokens - cachedHere) * c.prefillMsPer1k) / 1000;
  return { bytes, moveMs, prefillMs };
}

/** Whether to move: priced cheaper, and worth MIN_MOVE_TOKENS. */
export function worthMoving(tokens: number, cachedHere: number, c: MoveCosts): { move: boolean; price: MovePrice } {
  const price = priceMove(tokens, cachedHere, c);
  return { move: tokens - cachedHere >= MIN_MOVE_TOKENS && price.moveMs < price.prefillMs, price };
}

/** The wire form of a slot file's fingerprint a receiver sends: the file by its SHA-256 only (paths differ between hosts). */
export interface MoveFingerprint {
  sha256: string;
  context: number;
  parallel: number;
  args: string[];
  build?: string;
}

export function wireFingerprint(f: SlotFingerprint): MoveFingerprint | undefined {
  return f.file.sha256 ? { sha256: f.file.sha256, context: f.context, parallel: f.parallel, args: [...f.args], ...(f.build ? { build: f.build } : {}) } : undefined;
}

/**
 * Why a slot saved under `mine` must not be restored under `theirs`
 * (undefined: it may). The engine checks none of it: it restores a file of
 * another model of the same shape silently, and a failed restore erases the
 * slot. `--threads` and the like do not change a file; every other argument
 * is compared as given (KV types, unified KV, flash attention).
 */
export function moveMismatch(mine: MoveFingerprint, theirs: unknown): string | undefined {
  const t = theirs as Partial<MoveFingerprint> | undefined;
  if (!t || typeof t !== 'object') return 'no fingerprint was sent';
  if (t.sha256 !== mine.sha256) return `another model file (sha256 ${String(t.sha256).slice(0, 12)}…, here ${mine.sha256.slice(0, 12)}…)`;
  if (t.context !== mine.context) return `another context (${t.context}, here ${mine.context})`;
  if (t.parallel !== mine.parallel) return `another slot layout (--parallel ${t.parallel}, here ${mine.parallel})`;
  const args = (a: unknown) => JSON.stringify(layoutArgs(Array.isArray(a) ? a.map(String) : []));
  if (args(t.args) !== args(mine.args)) return `other engine arguments (${args(t.args)}, here ${args(mine.args)}): KV types and unified KV change a slot file`;
  if ((t.build ?? '') !== (mine.build ?? '')) return `another engine build (${t.build ?? 'unknown'}, here ${mine.build ?? 'unknown'})`;
  return undefined;
}

/** Arguments that change only speed, not what a slot file holds: left out of the comparison. */
const SPEED_ONLY = new Set(['--threads', '-t', '--threads-batch', '-tb', '--threads-http']);

function layoutArgs(args: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    if (SPEED_ONLY.has(args[i])) {
      i++;
      continue;
    }
    out.push(args[i]);
  }
  return out;
}
