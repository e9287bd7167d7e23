/**
 * What each host already holds of this request's prompt (SPEC section 9,
 * step 6, "cached"), and what starts there before it: the inputs pricing
 * needs beyond the candidates' slots. Pure: the node's own record of its
 * recent routes comes in through `RouteMemory`.
 */
import { heldTokens, type ChainLink, type PrefixChain, type SlotHold } from '../prompt/held.ts';
import { eligibleTargets } from './eligibility.ts';
import { SAVE_BELOW_KEEP } from '../prompt/ram-pool.ts';
import { chainHashes, chooseSlot, fleetBounded, liveSlots, pickCost, slotViews, type ReturnChance, type SlotPick, type SlotView } from './slots.ts';
import type { Candidate, HostModelView, HostView } from './types.ts';

/** This node's record of what it routed where (dispatch/entry/recent-routes.ts). */
export interface RouteMemory {
  /**
   * Tokens of `chain` held by the prompts this node routed to `host` for
   * `model` at or after `since`, looking at the `slots` most recent of them
   * (a slot holds one prompt; older ones are gone from its cache).
   * `continued`: only prompts that `chain` continues (their last link is in
   * it) count, as a slot-kind engine's slot choice reuses only those.
   */
  held(host: string, model: string, chain: PrefixChain, since: number, slots: number, continued?: boolean): number;
}

export interface WarmthInputs {
  hosts: readonly HostView[];
  model: string;
  workload: string;
  chain: PrefixChain;
  memory: RouteMemory;
  /** Requests this node holds in its queue for a host (waiting for its warm slot), this one excluded. */
  holding?: (host: string) => number;
  /** Now (clock ms), for the idle times of digests' slots; with `chance`, what a placement evicts is predicted. */
  now?: number;
  /** The chance an idle conversation returns (slots.ts TurnGaps). */
  chance?: ReturnChance;
  /**
   * A host that sent back a forward since the report polled at `polledAt`, because its slot would have evicted a
   * live conversation (dispatch/evict-claim.ts): its digest's idle slots are stale, and are priced as live.
   */
  crowded?: (host: string, polledAt: number) => boolean;
  /**
   * The slots this node's own forwards to `host` took since `since` (its report's poll), oldest first, as this node
   * predicted them (dispatch/entry/placed-slots.ts): the digest cannot show them yet.
   */
  placed?: (host: string, model: string, since: number) => readonly PlacedSlot[];
}

/** A slot one of this node's forwards took on a host (the slot its price named), and the prompt it left there. */
export interface PlacedSlot {
  readonly slot: number;
  /** The forward's prompt: its last link, and its head link (tools and system) when short of the last. */
  readonly last: ChainLink;
  readonly head?: ChainLink;
  /** When the forward ended there (this node's clock); undefined: still running. */
  readonly endedAt?: number;
  /**
   * Sent before the poll and ended since: the digest shows it where the executor put it (busy, when it ran at the
   * poll), so it is found there by its prompt, not put in the slot this node named.
   */
  readonly polled?: true;
}

/** A crowded host's idle conversations: every one comes back. */
const ALWAYS_LIVE: ReturnChance = () => 1;

/**
 * The candidates with `cached` and `ahead` filled in. cached = the larger of
 * the deepest link found in the digests of the host's eligible targets and
 * the deepest found in this node's own record of what it routed there since
 * that digest was polled (a request just sent counts at once, so a burst of
 * related requests does not scatter). This node's own record is exact and
 * never pruned by a poll: this node's digest is of now.
 *
 * A free host whose digest tells its slots is priced by the slot the
 * executor will choose (slots.ts, the same rule): a continuation reuses the
 * deepest link held (its prompt, and the reply after it when the client
 * echoed it); any other slot reuses what the entry can see of it, its
 * head (tools and system) when this prompt shares it, else nothing, however
 * many other slots hold a shared system prompt (the executor keeps those for
 * their own conversations). The own record then counts only the prompts this
 * one continues.
 *
 * An eviction's cascade is then bounded by the fleet's room (slots.ts
 * `fleetBounded`): the slots of every candidate that reports them, a full
 * host's all live.
 */
export function warmCandidates(cands: readonly Candidate[], w: WarmthInputs): Candidate[] {
  if (w.chain.length === 0 && !w.holding) return [...cands];
  const byName = new Map(w.hosts.map((h) => [h.name, h]));
  const hashes = w.chance && w.chain.length ? chainHashes(w.chain) : undefined;
  // The fleet's slots that report what they hold, and how many of them hold live conversations (fleetBounded).
  let fleetLive = 0;
  let fleetSlots = 0;
  const warmed = cands.map((reported) => {
    const h = byName.get(reported.host);
    const m = h?.models.get(w.model);
    // A full member whose digest shows this conversation's previous turn still running has a slot for this turn: a
    // next turn is sent after its answer, so that slot is idle now (issue 42: a session's home looked full to the
    // entries that had not sent the previous turn, and its turn moved, or waited a poll for it).
    const resumable = hashes && h && m && !reported.local && reported.free === 0 && reported.healthy && !reported.loading && !reported.refused && !(reported.ahead && reported.ahead > 0);
    const c = resumable && resumesBusySlot(reported.host, m, w, hashes, h.polledAt) ? Object.assign({}, reported, { free: 1 }) : reported;
    let fromDigest = 0;
    let digested = false;
    let slots = 0;
    let pick: SlotPick | undefined;
    let fromPick = 0;
    let slotKind = false;
    // The host's own reading of its idle slots, where it publishes one: an entry's own gaps (none at all, when it
    // runs no engine) would take for live a slot the executor takes for dead, or the reverse, and price a slot the
    // executor will not choose (issue 42: predicted 4,013 cached, the engine reused 3), each entry differently.
    const crowded = h !== undefined && w.crowded?.(c.host, h.polledAt) === true;
    const chance = crowded ? ALWAYS_LIVE : (h?.returnChance ?? w.chance!);
    if (m) {
      const targets = eligibleTargets(m, w.workload);
      // What this node sent there since the poll, in the slots it named (one target's slots: their indices are its).
      const placed = hashes && h && !c.local && w.placed && targets.filter((t) => t.digest?.slots?.length).length === 1 ? w.placed(c.host, w.model, h.polledAt) : undefined;
      for (const t of targets) {
        slots += t.slots;
        if (!t.digest) continue;
        digested = true;
        if (hashes && c.free === 0 && t.digest.slots?.length) {
          fleetLive += t.digest.slots.length;
          fleetSlots += t.digest.slots.length;
        }
        // With a free slot the engine places the request there: what only busy slots hold does not count.
        fromDigest = Math.max(fromDigest, heldTokens(w.chain, t.digest.held, c.free > 0 ? t.digest.busy : undefined));
        // A full host's request takes the slot that frees, and the engine restores its prompt from RAM into it.
        if (t.digest.ram) fromDigest = Math.max(fromDigest, heldTokens(w.chain, t.digest.ram));
        // The slot the executor will choose (the same rule, read from the digest): the target whose choice costs least.
        if (hashes && c.free > 0 && t.digest.slots?.length) {
          slotKind = true;
          // A slot busy at the poll with a prompt this one continues ran this conversation's previous turn, which has
          // ended (a next turn is sent after its answer): it is idle now, as the digest's busy links already say.
          const held = placed?.length ? withPlaced(t.digest.slots, placed) : t.digest.slots;
          const seen = slotViews(held, hashes, w.now ?? 0).map((v) => (v.busy && v.tokens > 0 && v.shared >= v.tokens ? idleNow(v) : v));
          // More slots free than the digest shows idle: this node's forwards there that ended since the poll freed
          // some it shows busy (the free count has them back at once, SPEC 9, step 9). The executor may take one of
          // those, just idle; which is unknown, so each busy slot is priced as just freed, and one chosen among them
          // is not named. Priced as busy, the entry priced another slot while the executor took the one just freed,
          // which held the system prompt this request shares (issue 42, item 4: predicted 0, the engine reused 4011).
          const idle = seen.reduce((n, x) => n + (x.busy ? 0 : 1), 0);
          const freed = c.free > idle ? seen.map((x) => (x.busy ? idleNow(x) : x)) : seen;
          const views = t.digest.ram ? withPool(freed, heldTokens(w.chain, t.digest.ram)) : freed;
          fleetLive += liveSlots(views, chance);
          fleetSlots += views.length;
          const q = chooseSlot(views, chance);
          const p = q && !seen[q.index].busy ? q : undefined;
          const v = q && views[q.index];
          // A continuation reuses the deepest link held (the reply after its prompt, too); another slot its head.
          const reuse = !q || !v ? 0 : v.tokens > 0 && v.shared >= v.tokens ? Math.max(q.reused, heldTokens(w.chain, t.digest.held, p ? t.digest.busy : undefined)) : q.reused;
          if (p && (!pick || pickCost(p) < pickCost(pick))) {
            pick = p;
            fromPick = reuse;
          } else if (!pick) fromPick = Math.max(fromPick, reuse);
        }
      }
    }
    const since = !c.local && digested && h ? h.polledAt : -Infinity;
    // This node's own digest is of now, evictions included: its record of routes here would only add what is gone.
    const own = w.chain.length === 0 || (c.local && digested) ? 0 : w.memory.held(c.host, w.model, w.chain, since, Math.max(1, slots), slotKind);
    const ahead = (c.ahead ?? 0) + (w.holding?.(c.host) ?? 0);
    // One copy, then its fields set: a copy merged from several small objects costs several times this, per host and request.
    const warm: Candidate = Object.assign({}, c);
    warm.cached = Math.max(slotKind ? fromPick : fromDigest, own);
    if (ahead > 0) warm.ahead = ahead;
    if (pick) warm.slot = pick.index;
    if (pick?.restored) warm.restored = pick.restored;
    // A crowded host's slots are priced live because the digest is stale, not because their conversations are known to
    // return and crowd each other: one re-prefill each, as the executor that sent the forward back weighs it.
    if (pick?.evicted) warm.evicted = crowded ? Object.assign({}, pick.evicted, { cascade: 1 }) : pick.evicted;
    return warm;
  });
  for (const c of warmed) if (c.evicted) c.evicted = fleetBounded(c.evicted, fleetLive, fleetSlots);
  return warmed;
}

/**
 * A digest's slots on a target whose engines keep a RAM pool, as far as an
 * entry can tell: a slot taken for a prompt that keeps under half of it
 * (SAVE_BELOW_KEEP) is saved to RAM, and then the deepest link of this
 * prompt the pool holds (`inRam` tokens) is restored into it; an empty slot
 * restores nothing. What the pool would drop is the executor's to see.
 */
export function withPool(views: readonly SlotView[], inRam: number): SlotView[] {
  return views.map((v) => {
    if (v.busy) return v;
    const pooled = v.tokens > 0 && v.shared < SAVE_BELOW_KEEP * v.tokens;
    return Object.assign({}, v, { pooled, restore: pooled && inRam > v.shared ? inRam : 0 });
  });
}

/**
 * A digest's slots with the prompts this node's forwards left since its poll
 * put in the slots they took: what the executor's own slot state holds now,
 * as far as this node's forwards changed it (issue 42, item 4: polled before
 * this node sent a conversation there, the digest showed its slot holding
 * something else, and a second conversation sharing its system prompt was
 * priced cold where the executor took that slot). Of the prompt, what
 * another slot holds too (its head) is not unique to it.
 */
export function withPlaced(slots: readonly SlotHold[], placed: readonly PlacedSlot[]): SlotHold[] {
  const out = [...slots];
  for (const p of placed) {
    if (p.polled) {
      // Running at the poll, ended since: its slot is idle now, and known, so a price may name it (issue 42, item 4:
      // priced as "one busy slot freed, which unknown", the entry named none, and the executor's own rule took another
      // slot of about equal worth: predicted 4,009, the engine reused 3). A digest that shows it idle already is left.
      const i = out.findIndex((o) => o.busy && o.last?.hash === p.last.hash);
      if (i >= 0 && p.endedAt !== undefined) out[i] = Object.assign({}, out[i], { busy: false, idleSince: p.endedAt });
      continue;
    }
    if (p.slot < 0 || p.slot >= out.length) continue;
    const head = p.head && p.head.tokens < p.last.tokens ? p.head : undefined;
    const shared = head && out.some((o, i) => i !== p.slot && (o.head?.hash === head.hash || o.last?.hash === head.hash)) ? head.tokens : 0;
    const hold: SlotHold = { last: p.last, unique: Math.max(0, p.last.tokens - shared), busy: p.endedAt === undefined };
    out[p.slot] = Object.assign(hold, head ? { head } : {}, p.endedAt !== undefined ? { idleSince: p.endedAt } : {});
  }
  return out;
}

/** A slot the digest shows busy, taken as idle since just now. */
const idleNow = (v: SlotView): SlotView => Object.assign({}, v, { busy: false, idleMs: 0 });

/**
 * Does a digest of `m` show a slot busy at its poll with a prompt this one continues and grows (its previous turn),
 * that no forward of this node has taken since (withPlaced)? The same prompt running is not a previous turn: a
 * duplicate, or a client's retry, runs beside it (a test of five models on demand sent identical prompts, and each was
 * forwarded to a full host, refused, and sent again).
 */
function resumesBusySlot(host: string, m: HostModelView, w: WarmthInputs, hashes: ReadonlySet<string>, polledAt: number): boolean {
  const tokens = w.chain.at(-1)?.tokens ?? 0;
  const targets = eligibleTargets(m, w.workload).filter((t) => t.digest?.slots?.length);
  const placed = targets.length === 1 && w.placed ? w.placed(host, w.model, polledAt) : undefined;
  return targets.some((t) => {
    const held = placed?.length ? withPlaced(t.digest!.slots!, placed) : t.digest!.slots!;
    return slotViews(held, hashes, w.now ?? 0).some((v) => v.busy && v.tokens > 0 && v.shared >= v.tokens && tokens > v.tokens);
  });
}
