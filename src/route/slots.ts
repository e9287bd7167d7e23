/**
 * Slots of a slot-kind engine (SPEC section 9, step 6, "Eviction" and "Slot
 * choice"): a free slot is not empty. It still holds the prompt of the last
 * request that ran there, and a request placed in it destroys that cache.
 * Which slot a request takes, and what that costs, are decided here, the
 * same way on the executor (which knows its slots exactly) and on an entry
 * node (which reads them from the digest), so price and choice agree.
 *
 * Pure: idle times and the observed gaps between turns come in; no clock.
 */
import { continuesInPlace, type PrefixChain, type SlotHold, type SlotView } from '../prompt/held.ts';

/** One slot as the chooser sees it for one prompt (its shape lives with the prompt vocabulary: engines/ fills it too). */
export type { SlotView };

/**
 * A restore from the RAM pool priced as this share of a prefill of the same
 * tokens (docs/decisions.md, "The RAM prompt cache"): measured on this
 * machine's CPU build, restoring 1,500 tokens of a 16 KiB/token model took
 * 3 ms in the server (24 ms on the wall) against 692 ms of prefill, about
 * 1/30 at worst; on a GPU prefill is faster and the copy crosses the bus, so
 * the estimate is taken higher.
 */
export const RESTORE_SHARE = 0.05;

/** What a placement destroys: the tokens, how long their conversation has been idle, and the chance it returns. */
export interface Eviction {
  readonly tokens: number;
  readonly idleMs: number;
  readonly chance: number;
  /**
   * How many re-prefills the eviction sets off (≥ 1, at most MAX_CASCADE): a conversation evicted from a host whose
   * other slots hold live conversations too takes one of theirs when it returns, and so on (see `cascadeOf`).
   */
  readonly cascade: number;
  /** Its prompt moved to the RAM pool: the return costs a restore (RESTORE_SHARE of a re-prefill), no cascade. */
  readonly pooled?: boolean;
  /** Expected tokens of prompts the pool dropped to make room (each times its return chance): those are lost. */
  readonly dropped?: number;
}

/** The most re-prefills one eviction is priced at (a host whose every slot holds a live conversation). */
export const MAX_CASCADE = 4;

/**
 * The expected number of re-prefills an eviction sets off on a host: the
 * evicted conversation, when it returns, needs a slot, and takes a live one
 * with the chance that a slot there is live (`live`: the share of the host's
 * slots whose conversation is likely to return, counting the one this request
 * takes); that one in turn does the same. So 1 + live + live² + … =
 * 1 / (1 − live), at most MAX_CASCADE. A host with empty or dead slots left
 * absorbs the returning conversation: about one re-prefill.
 */
export function cascadeOf(live: number): number {
  if (!(live < 1)) return MAX_CASCADE;
  return Math.min(MAX_CASCADE, 1 / (1 - Math.max(0, live)));
}

export interface SlotPick {
  readonly index: number;
  /** Tokens of this prompt the engine reuses there: what the slot holds, or what comes back from RAM into it. */
  readonly reused: number;
  /** Of `reused`, tokens restored from the RAM pool (a restore to pay, not held by the slot). */
  readonly restored?: number;
  /** undefined: nothing of worth is destroyed (the slot was empty, continued, or its prompt is held elsewhere). */
  readonly evicted?: Eviction;
}

/** The chance that a conversation idle for so long comes back, from the gaps between turns observed. */
export type ReturnChance = (idleMs: number, turns?: number) => number;

/**
 * The slot a request takes among `slots` (SPEC 9.6, "Slot choice"): the
 * idle slot whose prompt this one continues (its whole cached prompt is a
 * prefix of this one, or this one shares past its head and at least half of
 * it: the same conversation, grown inside its last message; nothing that
 * returns is destroyed), the longest; else the idle
 * slot whose cached prompt is worth least — an empty one, or one whose
 * conversation is dead, or whose tokens other slots hold too, is worth
 * nothing — ties to the one holding more of this prompt, then the longest
 * idle (on an engine with a RAM pool, see `pooledAt`). undefined when every
 * slot is busy.
 *
 * `named`: the slot the request's entry priced (the forward's `slot` claim).
 * The entry read this node's slots from a digest up to a poll old; the slot
 * it named is taken when it is idle and costs no more here than this node's
 * own choice, by its own reckoning, plus the slack an executor allows an
 * entry's eviction (UNPRICED_SLACK_TOKENS), so what the entry predicted is
 * what the engine reuses (issue 42, item 4: predicted 4,009, the engine
 * reused 3, when the executor took another slot of about equal worth).
 */
export function chooseSlot(slots: readonly SlotView[], chance: ReturnChance, named?: number): SlotPick | undefined {
  const own = ownIndex(slots, chance);
  if (own < 0) return undefined;
  const pick = pickAt(slots, own, chance)!;
  if (named === undefined || named === own) return pick;
  // The entry's choice, read from a digest a poll old, when it costs no more here than ours (issue 42, item 4).
  const theirs = pickAt(slots, named, chance);
  return theirs && pickCost(theirs) <= pickCost(pick) + UNPRICED_SLACK_TOKENS ? theirs : pick;
}

/**
 * A pick's expected destruction less what it reuses, in tokens: how two picks compare, on one target or across a
 * host's targets.
 */
export function pickCost(p: SlotPick): number {
  return expectedLoss(p.evicted) - p.reused;
}

/**
 * A slot whose conversation has had one turn on the target (the executor said so): its eviction is priced at one
 * re-prefill times its chance, without the cascade. Such a prompt may be a single shot that never returns (on
 * Mooncake's minute 40, 64k-token ones priced at 1.2-1.6 re-prefills kept new work off the fastest host, whose
 * slots were taken again a median 0.3-1.0 s later; benchmarks.md, session 34), and the host a returning one
 * takes is chosen when it returns, with the fleet's room then. A conversation that has returned at least once is
 * the kind that keeps returning (the agent trace's sessions): its eviction keeps the cascade.
 */
function firstTurn(s: SlotView): boolean {
  return s.turns !== undefined && s.turns < 2;
}

/** The slot this node's own rule takes (-1 when every slot is busy). */
function ownIndex(slots: readonly SlotView[], chance: ReturnChance): number {
  if (slots.some((s) => s.pooled !== undefined)) return cheapestIdle(slots, (s) => (continues(s) ? -Infinity : worth(s, chance) - restoreGain(s))).index;
  let cont = -1;
  for (let i = 0; i < slots.length; i++) {
    const s = slots[i];
    if (s.busy || !continues(s)) continue;
    if (cont < 0 || s.shared > slots[cont].shared) cont = i;
  }
  return cont >= 0 ? cont : cheapestIdle(slots, (s) => worth(s, chance)).index;
}

/** Taking idle slot `i`: what it reuses and destroys; undefined when it is busy or not a slot. */
export function pickAt(slots: readonly SlotView[], i: number, chance: ReturnChance): SlotPick | undefined {
  const s = slots[i];
  if (!s || s.busy) return undefined;
  if (slots.some((x) => x.pooled !== undefined)) return pooledAt(s, i, chance);
  if (continues(s)) return { index: i, reused: s.shared };
  const lost = lostTokens(s);
  if (!(lost > 0 && worth(s, chance) > 0)) return { index: i, reused: s.shared };
  // After this placement: the slot taken holds this request's conversation (live), the others as liveSlots counts them.
  const c = chance(s.idleMs ?? 0, s.turns);
  const live = liveSlots(slots, chance) - c + 1;
  return { index: i, reused: s.shared, evicted: { tokens: lost, idleMs: s.idleMs ?? 0, chance: c, cascade: firstTurn(s) ? 1 : cascadeOf(live / slots.length) } };
}

/** The idle slot of lowest `cost` (-1 when every slot is busy); ties to the one holding more of the prompt, then the longest idle. */
function cheapestIdle(slots: readonly SlotView[], cost: (s: SlotView) => number): { index: number; cost: number } {
  let best = -1;
  let bestCost = Infinity;
  for (let i = 0; i < slots.length; i++) {
    const s = slots[i];
    if (s.busy) continue;
    const c = cost(s);
    const b = best >= 0 ? slots[best] : undefined;
    if (!b || c < bestCost || (c === bestCost && (s.shared > b.shared || (s.shared === b.shared && (s.idleMs ?? Infinity) > (b.idleMs ?? Infinity))))) {
      best = i;
      bestCost = c;
    }
  }
  return { index: best, cost: bestCost };
}

/**
 * Taking slot `s` on an engine with a RAM pool. The choice there: a
 * continuation first, as without one. Otherwise the slot worth least, as
 * without one, where taking
 * a slot whose prompt the engine saves to RAM costs only its restore when its
 * conversation returns (RESTORE_SHARE of a re-prefill) plus what the pool
 * drops to make room, and the prefill a restore from RAM saves this prompt
 * counts against that cost: only a slot that holds a prompt takes one back
 * from RAM (the engine never restores into an empty slot it is named), so a
 * returning conversation takes a held slot over an empty one. A prefix the
 * slot itself shares (a system prompt) is not netted, as without a pool: a
 * slot the engine overwrites in place (it keeps half or more of its prompt)
 * is not saved, and its conversation's tail would be lost for that prefix
 * (docs/decisions.md, issue 25). Ties as without a pool.
 */
function pooledAt(s: SlotView, index: number, chance: ReturnChance): SlotPick {
  const restored = restoredTokens(s);
  const reused = Math.max(s.shared, s.restore ?? 0);
  const pick = restored > 0 ? { index, reused, restored } : { index, reused };
  const lost = lostTokens(s);
  const dropped = droppedWorth(s, chance);
  if (!((lost > 0 && chance(s.idleMs ?? 0, s.turns) > 0) || dropped > 0)) return pick;
  const c = chance(s.idleMs ?? 0, s.turns);
  // No cascade: a conversation that returns takes a slot whose prompt then moves to RAM, a restore, not a re-prefill.
  return { ...pick, evicted: { tokens: lost, idleMs: s.idleMs ?? 0, chance: c, cascade: 1, ...(s.pooled ? { pooled: true } : {}), ...(dropped > 0 ? { dropped } : {}) } };
}

/** Tokens the engine restores from RAM into slot `s` beyond what the slot itself shares with the prompt. */
function restoredTokens(s: SlotView): number {
  return s.restore !== undefined && s.restore > s.shared ? s.restore : 0;
}

/** Tokens of prefill a restore from RAM into slot `s` saves this prompt beyond what the slot shares, net of the restore. */
function restoreGain(s: SlotView): number {
  const r = restoredTokens(s);
  return r > 0 ? (r - s.shared) * (1 - RESTORE_SHARE) : 0;
}

/** Expected tokens of re-prefill of the pool entries the save drops. */
function droppedWorth(s: SlotView, chance: ReturnChance): number {
  let w = 0;
  for (const d of s.drops ?? []) w += d.tokens * chance(d.idleMs, d.turns);
  return w;
}

/**
 * How many of `slots` hold a live conversation, in expectation: a busy slot
 * one, an idle one as likely as its conversation is to return, an empty one
 * none.
 */
export function liveSlots(slots: readonly SlotView[], chance: ReturnChance): number {
  let live = 0;
  for (const o of slots) live += o.busy ? 1 : o.tokens === 0 ? 0 : chance(o.idleMs ?? 0, o.turns);
  return live;
}

/**
 * An eviction's cascade bounded by the fleet's room: a conversation evicted
 * here that returns is placed where it costs least, so while other hosts have
 * empty or dead slots it takes one of those and sets off nothing more. The
 * cascade is then that of the fleet's live share after this placement
 * (`fleetLive` live slots of `fleetSlots`, this host's included, before it).
 */
export function fleetBounded(e: Eviction, fleetLive: number, fleetSlots: number): Eviction {
  if (!(fleetSlots > 0)) return e;
  const cascade = Math.min(e.cascade, cascadeOf((fleetLive - e.chance + 1) / fleetSlots));
  return cascade === e.cascade ? e : { ...e, cascade };
}

/** This prompt continues the slot's conversation (prompt/held.ts continuesInPlace): taking it destroys nothing that returns. */
function continues(s: SlotView): boolean {
  return continuesInPlace(s.tokens, s.shared, s.head);
}

/** Tokens taking the slot destroys: what it holds beyond what this prompt keeps, and that no other slot holds. */
function lostTokens(s: SlotView): number {
  return Math.max(0, Math.min(s.unique, s.tokens - s.shared));
}

/** Expected tokens of re-prefill that taking the slot costs its conversation (a restore, when the pool keeps it), and the pool's drops. */
function worth(s: SlotView, chance: ReturnChance): number {
  const lost = lostTokens(s);
  const own = lost === 0 ? 0 : lost * chance(s.idleMs ?? 0, s.turns) * (s.pooled ? RESTORE_SHARE : 1);
  return own + droppedWorth(s, chance);
}

/** The expected tokens of re-prefill an eviction costs, the re-prefills it sets off included (a pooled one: its restore). */
export function expectedLoss(e: Eviction | undefined): number {
  if (!e) return 0;
  return e.tokens * e.chance * (e.pooled ? RESTORE_SHARE : e.cascade) + (e.dropped ?? 0);
}

/** An eviction the executor finds may cost this much more than its entry priced before the forward is sent back. */
export const UNPRICED_SLACK_TOKENS = 256;
export const UNPRICED_SLACK_SHARE = 1.5;

/**
 * Does the eviction the executor's slot choice makes (`loss`, expected
 * tokens) exceed what the forward's entry priced (`priced`) by more than
 * the slack? Then the entry's view of the slots was stale (another entry
 * took the slot it saw empty), and the forward is worth pricing again.
 */
export function evictsUnpriced(loss: number, priced: number): boolean {
  return loss > priced * UNPRICED_SLACK_SHARE + UNPRICED_SLACK_TOKENS;
}

/** The same in ms at a host's rate per 1k tokens (SPEC 9.6: added to its price). */
export function evictionMs(e: Eviction | undefined, ratePer1k: number): number {
  return (ratePer1k * expectedLoss(e)) / 1000;
}

/**
 * A digest's slots as the chooser sees them for a prompt with `hashes` (the
 * set of its chain's hashes) at `now`: a slot whose last link is in the
 * chain holds this prompt's start up to it; one whose link before the last
 * is in it, that much (this prompt grew inside the slot's last message); one
 * whose head link (tools and system) is in it shares that much; of the others
 * the entry knows only that they hold something else. The executor, which knows every link,
 * sees the same but for conversations that part after their head.
 */
export function slotViews(slots: readonly SlotHold[], hashes: ReadonlySet<string>, now: number): SlotView[] {
  return slots.map((s) => {
    const tokens = s.last?.tokens ?? 0;
    const shared = s.last && hashes.has(s.last.hash) ? tokens : s.prev && hashes.has(s.prev.hash) ? s.prev.tokens : s.head && hashes.has(s.head.hash) ? s.head.tokens : 0;
    const idleMs = s.busy ? undefined : Math.max(0, now - (s.idleSince ?? now));
    const view = { busy: s.busy, tokens, shared, unique: s.unique, ...(s.head ? { head: s.head.tokens } : {}), ...(s.turns !== undefined ? { turns: s.turns } : {}) };
    return idleMs === undefined ? view : { ...view, idleMs };
  });
}

/** The set of a chain's hashes (built once per request, looked up per slot). */
export function chainHashes(chain: PrefixChain): Set<string> {
  return new Set(chain.map((l) => l.hash));
}

/** Below this many observed gaps, the prior: a conversation idle under PRIOR_LIVE_MS is live, one idle twice that is dead. */
export const MIN_GAPS = 8;
export const PRIOR_LIVE_MS = 60_000;
/** Gaps kept (the most recent). */
export const MAX_GAPS = 256;

/** The most recent `max` values added (oldest overwritten first; their order is not kept). */
class Recent {
  readonly items: number[] = [];
  #next = 0;
  constructor(private readonly max: number) {}

  add(v: number): void {
    if (this.items.length < this.max) this.items.push(v);
    else this.items[this.#next] = v;
    this.#next = (this.#next + 1) % this.max;
  }
}

/**
 * The gaps between a conversation's turns this node observes (the time from
 * the end of one turn to the arrival of the next on its slot), the most
 * recent MAX_GAPS; and from them the chance that a conversation idle for t
 * returns: the share of observed gaps longer than t (smoothed), and none
 * past twice the longest gap seen (SPEC 9.6: "one idle far past those gaps
 * costs nothing").
 */
export class TurnGaps {
  readonly #gaps = new Recent(MAX_GAPS);
  /** The turns of the most recent MAX_PLACED placements' conversations (1: a new conversation). */
  readonly #placed = new Recent(MAX_PLACED);
  /** The gaps sorted, kept while no gap is added (a placement, every request, changes only the shares). */
  #sorted: number[] | undefined;
  #curve: GapCurve | undefined;

  /** A request took a slot, as the `turns`-th turn its conversation has had on this node's backend (engines/turn-count.ts). */
  placed(turns: number): void {
    if (!(turns >= 1) || !Number.isFinite(turns)) return;
    this.#placed.add(Math.min(RETURN_SHARES + 1, Math.round(turns)));
    this.#curve = undefined;
  }

  observe(gapMs: number): void {
    if (!(gapMs >= 0) || !Number.isFinite(gapMs)) return;
    this.#gaps.add(gapMs);
    this.#sorted = undefined;
    this.#curve = undefined;
  }

  get size(): number {
    return this.#gaps.items.length;
  }

  /** What this node publishes of its gaps (its report's `turn_gaps`), and what its own slot choice reads. */
  curve(): GapCurve {
    this.#sorted ??= [...this.#gaps.items].sort((a, b) => a - b);
    return (this.#curve ??= gapCurve(this.#sorted, returnShares(this.#placed.items)));
  }

  /**
   * The chance a conversation idle for `idleMs` comes back, read from the published curve, not the gaps themselves:
   * an entry that prices this node's slots with the curve it polled then predicts the slot this node chooses.
   */
  readonly chance: ReturnChance = (idleMs, turns) => curveChance(idleMs, this.curve(), turns);
}

/** Points of a published gap curve at most (about 200 bytes of JSON in a report). */
export const GAP_CURVE_POINTS = 32;

/**
 * A node's gaps between turns as it publishes them (SPEC 9.6, "Eviction";
 * docs/api.md `turn_gaps`): how many it has seen (`n`), and their order
 * statistics in ms, ascending, whole: every gap while there are at most
 * GAP_CURVE_POINTS, else that many evenly spaced ones, the longest last.
 */
export interface GapCurve {
  readonly n: number;
  readonly q: readonly number[];
  /**
   * The share of conversations that came back to this node for another turn, by the turns they had had: `r[0]`
   * after one, … the last for that many and more (two decimals). Absent: not known, every one is taken to return.
   */
  readonly r?: readonly number[];
}

/** Return shares published: by one, two, … and the last for RETURN_SHARES turns and more. */
export const RETURN_SHARES = 6;
/** Placements whose turns are counted (the most recent). */
export const MAX_PLACED = 512;
/**
 * Placements a node counts before it publishes shares at all: below, every
 * conversation is taken to return, as before shares were counted (a test or
 * a homelab with a handful of conversations prices as it always did). Few:
 * the prior already holds a share near 1 until placements outweigh it, and a
 * node that waits for 32 spends most of a busy minute pricing single shots
 * as sure to return (session 33: Mooncake's minute 40 at 80%, 2,149 ms with
 * 32 against 1,764 with shares from the first placement, two runs each).
 */
export const MIN_PLACED = 8;
/** Placements of the prior "every conversation returns" each share starts from. */
export const SHARE_PRIOR = 4;

/**
 * The share of conversations with k turns here that came back for
 * another, from the turns of recent placements: those that came back are the
 * placements with k + 1 turns, against the placements with k (the last share:
 * with more than, against with at least RETURN_SHARES). A conversation that
 * came back to another host counts as not back: its slot here was worth
 * nothing to it. Undefined under MIN_PLACED placements.
 */
export function returnShares(placed: readonly number[]): number[] | undefined {
  if (placed.length < MIN_PLACED) return undefined;
  const at = new Array<number>(RETURN_SHARES + 2).fill(0);
  for (const t of placed) at[Math.min(RETURN_SHARES + 1, t)]++;
  const r: number[] = [];
  for (let k = 1; k <= RETURN_SHARES; k++) {
    const [made, back] = k < RETURN_SHARES ? [at[k], at[k + 1]] : [at[k] + at[k + 1], at[k + 1]];
    r.push(Math.round(Math.min(1, (back + SHARE_PRIOR) / (made + SHARE_PRIOR)) * 100) / 100);
  }
  return r;
}

/** The curve of gaps sorted ascending, with the return shares when known. */
export function gapCurve(sorted: readonly number[], r?: readonly number[]): GapCurve {
  const n = sorted.length;
  const shares = r ? { r } : {};
  if (n <= GAP_CURVE_POINTS) return { n, q: sorted.map((g) => Math.round(g)), ...shares };
  const q: number[] = [];
  for (let k = 1; k <= GAP_CURVE_POINTS; k++) q.push(Math.round(sorted[Math.ceil((k * n) / GAP_CURVE_POINTS) - 1]));
  return { n, q, ...shares };
}

/**
 * returnChance read from a curve: the share of its points longer than
 * `idleMs` stands for the share of the gaps (the same as returnChance's
 * while every gap is a point), smoothed by the count seen.
 */
export function curveChance(idleMs: number, curve: GapCurve, turns?: number): number {
  return withReturnShare(curveSurvival(idleMs, curve), curve.r, turns);
}

/**
 * The chance that a conversation with `turns` turns comes back at
 * all, `r` (its share of returns, GapCurve.r), joined with the chance `s`
 * that one that comes back has not yet done so after this long (the gaps):
 * of conversations idle this long, those that will return are r·s against
 * 1 − r that never will. Turns unknown, or no shares yet: every conversation
 * is taken to return (r = 1), as before shares were published.
 */
export function withReturnShare(s: number, r: readonly number[] | undefined, turns: number | undefined): number {
  if (turns === undefined || !r || r.length === 0) return s;
  const share = r[Math.min(r.length, Math.max(1, Math.round(turns))) - 1];
  if (!(share < 1)) return s;
  const live = share * s;
  return live > 0 ? live / (live + 1 - share) : 0;
}

function curveSurvival(idleMs: number, { n, q }: GapCurve): number {
  if (n < MIN_GAPS || q.length === 0) return returnChance(idleMs, []);
  if (idleMs > 2 * q[q.length - 1]) return 0;
  let lo = 0;
  let hi = q.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (q[mid] > idleMs) hi = mid;
    else lo = mid + 1;
  }
  return (((q.length - lo) / q.length) * n + 0.5) / (n + 0.5);
}

/** A curve as a report carries it (`turn_gaps`), or undefined when it is not one. */
export function readGapCurve(x: unknown): GapCurve | undefined {
  if (!x || typeof x !== 'object') return undefined;
  const { n, q } = x as Record<string, unknown>;
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0 || !Array.isArray(q) || q.length > GAP_CURVE_POINTS || q.length > n) return undefined;
  for (let i = 0; i < q.length; i++) {
    const g = q[i];
    if (typeof g !== 'number' || !Number.isFinite(g) || g < 0 || (i > 0 && g < (q[i - 1] as number))) return undefined;
  }
  // Return shares (optional): ignored when malformed, as a reader that knows none would.
  const r = (x as Record<string, unknown>).r;
  const shares = Array.isArray(r) && r.length > 0 && r.length <= RETURN_SHARES && r.every((v) => typeof v === 'number' && v >= 0 && v <= 1) ? { r: r as number[] } : {};
  return { n, q: q as number[], ...shares };
}

/** returnChance over gaps sorted ascending (see TurnGaps). */
export function returnChance(idleMs: number, sorted: readonly number[]): number {
  const n = sorted.length;
  if (n < MIN_GAPS) return idleMs <= PRIOR_LIVE_MS ? 1 : Math.max(0, 2 - idleMs / PRIOR_LIVE_MS);
  if (idleMs > 2 * sorted[n - 1]) return 0;
  // Gaps longer than idleMs: binary search for the first one above it.
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (sorted[mid] > idleMs) hi = mid;
    else lo = mid + 1;
  }
  return (n - lo + 0.5) / (n + 0.5);
}
