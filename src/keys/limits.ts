/**
 * Limits held across the mesh (SPEC section 12), the deciding half: pure
 * functions over plain numbers, clock injected.
 *
 * Each key has an owner (the first alive member of its rendezvous ranking).
 * Every entry node reports its own totals for the key to the owner (at most
 * every 100 ms while the key is in use); the owner answers with the sum over
 * every entry and how many entries share the key now. An entry admits
 * against that answer: what it admitted since then must fit its share of
 * what is left (left ÷ entries), and one request always may when it fits
 * what is left. So with every entry sending at once, the mesh admits at most
 * the limit plus one request per entry per reporting interval; a node that
 * cannot reach the owner enforces limit ÷ the alive members it sees, on its
 * own totals, so a partition cannot multiply a budget.
 */
import type { LimitKind, Limits } from '../config/key-spec.ts';
import { DAY_MS, type Totals } from './window.ts';

/** What the owner answered: the mesh-wide totals, this entry's included, and how many entries use the key now. */
export interface OwnerView {
  totals: Totals;
  entries: number;
}

/** What this entry admitted since the owner's answer. */
export interface Since {
  requests: number;
  tokens: number;
}

export type Admission = { ok: true } | { ok: false; limit: LimitKind; retryAfterS: number; message: string };

const MINUTE_KINDS = [
  ['rpm', 'rpm', 'requests'],
  ['tpm', 'tpm', 'tokens'],
] as const;

/**
 * Admit a request needing `tokens` (its estimate) against `view`.
 * `inflightHere`: this entry's requests of the key in flight now (the
 * view's `concurrent` counts the others' and this entry's as reported).
 */
export function admit(limits: Limits, view: OwnerView, since: Since, tokens: number, inflightHere: number, inflightAtView: number, nowMs: number): Admission {
  const entries = Math.max(1, view.entries);
  for (const [kind, field, what] of MINUTE_KINDS) {
    const limit = limits[kind];
    if (limit === undefined) continue;
    const need = what === 'requests' ? 1 : tokens;
    const used = view.totals[field];
    const spent = since[what];
    const left = limit - used;
    if (spent + need <= left / entries || (spent === 0 && need <= left)) continue;
    // A request that holds more than the whole limit never fits: say what it holds and how to hold less.
    const why = kind === 'tpm' && need > limit ? `; this request holds ${need} tokens, its prompt and the output it may write: set max_tokens to hold less` : '';
    return refuse(kind, minuteRetry(used + spent, need, limit), `${limit} ${what} per minute${why}`);
  }
  const perDay = limits.tokens_per_day;
  if (perDay !== undefined) {
    const left = perDay - view.totals.day;
    if (!(since.tokens + tokens <= left / entries || (since.tokens === 0 && tokens <= left))) {
      return refuse('tokens_per_day', Math.max(1, Math.ceil((DAY_MS - (nowMs % DAY_MS)) / 1000)), `${perDay} tokens per day (UTC)`);
    }
  }
  const conc = limits.concurrent;
  if (conc !== undefined && view.totals.concurrent - inflightAtView + inflightHere + 1 > conc) return refuse('concurrent', 1, `${conc} requests at once`);
  return { ok: true };
}

/** Limits divided by the alive members a node sees, for a node cut off from the key's owner. */
export function cutOffLimits(limits: Limits, aliveMembers: number): Limits {
  const n = Math.max(1, aliveMembers);
  const out: Limits = {};
  for (const [k, v] of Object.entries(limits) as [LimitKind, number][]) out[k] = Math.max(1, Math.floor(v / n));
  return out;
}

/** The owner's view for a cut-off node: its own totals, alone. */
export const ownView = (own: Totals): OwnerView => ({ totals: own, entries: 1 });

/**
 * Seconds until a sliding minute holding `used` frees enough for `need`
 * under `limit`, taking the window to free evenly (1 to 60).
 */
export function minuteRetry(used: number, need: number, limit: number): number {
  if (need > limit) return 60;
  const over = used + need - limit;
  if (over <= 0 || used <= 0) return 1;
  return Math.min(60, Math.max(1, Math.ceil((60 * over) / used)));
}

function refuse(limit: LimitKind, retryAfterS: number, what: string): Admission {
  return { ok: false, limit, retryAfterS, message: what };
}

/** The sum of entries' reports for one key at the owner: minute totals of reports younger than a minute, the day's of today, in-flight of reports younger than `inflightMs`. */
export function sumReports(reports: Iterable<{ totals: Totals; at: number }>, nowMs: number, inflightMs: number): Totals {
  const dayOf = Math.floor(nowMs / DAY_MS);
  const out: Totals = { rpm: 0, tpm: 0, day: 0, dayOf, concurrent: 0 };
  for (const r of reports) {
    const age = nowMs - r.at;
    if (age < 60_000) {
      out.rpm += r.totals.rpm;
      out.tpm += r.totals.tpm;
    }
    if (r.totals.dayOf === dayOf) out.day += r.totals.day;
    if (age < inflightMs) out.concurrent += r.totals.concurrent;
  }
  // Tokens come signed (an executor's settlements of forwards other entries admitted); the key's sum is never below 0.
  out.tpm = Math.max(0, out.tpm);
  out.day = Math.max(0, out.day);
  return out;
}

/**
 * The output held back when a generation request sets no bound and no host
 * of its model reports a context (an `openai` engine without `context`):
 * llama-server's old default context. With a context known, the hold is
 * exact (`heldOutput`).
 */
export const UNBOUNDED_OUTPUT_TOKENS = 4096;

/**
 * The output bound a request is held to at admission (SPEC 12: tokens are
 * held until the answer says what was used, so what is held must be at
 * least what the engine may write). A bound of the body's own is capped at
 * the largest context of a host that serves its model (an engine generates
 * at most what its context holds, and agent clients ask for more: Claude
 * Code's 32,000 on a model of 8,192). A request without a bound (most
 * clients send none, and `max_tokens: 0` is none) may run to the end of the
 * context: it holds the context less its prompt, so prompt and output
 * together are held at the whole context (issue 46: holding 256 let a key
 * spend 12 times its tpm). `contexts`: the context lengths of those hosts.
 * Pure.
 */
export function heldOutput(maxTokens: number | undefined, contexts: Iterable<number | undefined>, promptTokens = 0): number {
  let largest = 0;
  for (const c of contexts) if (c !== undefined && Number.isFinite(c) && c > largest) largest = c;
  if (maxTokens !== undefined) return largest > 0 ? Math.min(maxTokens, largest) : maxTokens;
  return largest > 0 ? Math.max(0, largest - Math.max(0, promptTokens)) : UNBOUNDED_OUTPUT_TOKENS;
}

/**
 * The tokens a request is charged at admission: its prompt (as estimated
 * from its bytes) plus, for generation, the output its body allows. The
 * executor settles the difference from the engine's usage with the same
 * estimate, so entry and executor never disagree on what was held back.
 */
export function admissionTokens(promptTokens: number | undefined, maxTokens: number | undefined, generation: boolean): number {
  return Math.max(0, promptTokens ?? 0) + (generation ? (maxTokens ?? UNBOUNDED_OUTPUT_TOKENS) : 0);
}
