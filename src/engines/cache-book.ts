/**
 * The executor's record of its engines' prompt caches (SPEC section 7,
 * "Cache digest"): one cache model per backend (cache-model.ts), fed with
 * the chain of every request this node sends the backend and corrected by
 * the engine's cached-token counts; per target, the digest routing reads
 * (this node's own view, and the capacity report's).
 *
 * Versions are one counter for the whole node, so a poller can say "I hold
 * version N" once and be sent only the targets that changed since; the
 * epoch tells a restarted executor's counters from the old ones.
 */
import { randomBytes } from 'node:crypto';
import type { CacheDigest, PrefixChain, SlotHold } from '../prompt/held.ts';
import type { Backend } from './backend.ts';
import { cacheModel, type CacheModel, type CacheModelKind, type CacheOutcome, type CacheTicket, type Evicted, type HeldLink, type SlotChooser, type SlotContent } from './cache-model.ts';
import type { LocalTarget } from './targets.ts';

/** A digest lists at most this many links per target (SPEC section 7). */
export const DIGEST_MAX_ENTRIES = 1024;

/** The model of each engine kind: llama-server and the sim engine are told their slot (`id_slot`), so their model is exact. */
export function modelKindOf(engine: Backend['info']['engine']): CacheModelKind {
  switch (engine) {
    case 'llamacpp':
    case 'sim':
      return 'chosen';
    case 'embedded':
      return 'lifo';
    case 'openai':
      return 'blocks';
  }
}

/** One request on one backend, between begin and finish. */
export interface CacheRun {
  readonly ticket: CacheTicket;
  /** The slot to name to the engine as `id_slot` (node-chosen slots only). */
  readonly idSlot?: number;
  /** Tokens this node predicts the engine reuses. */
  readonly predicted: number;
  finish(o: CacheOutcome): void;
}

/** A target's digest: its links most recently used first, with the version at which it last changed. */
export interface TargetDigest extends CacheDigest {
  readonly links: readonly HeldLink[];
  /** The RAM pools' links, most recently saved first (present when a backend of the target has a pool). */
  readonly ramLinks?: readonly HeldLink[];
}

export interface CacheBookOptions {
  /** The node's clock (ms): slots' idle times are on it. */
  now?: () => number;
  /** The node's slot choice (route/slots.ts), for engines told their slot. */
  choose?: SlotChooser;
  /** Told every gap between a conversation's turns that an engine's slot saw (route/slots.ts TurnGaps). */
  onGap?: (ms: number) => void;
  /** Told the turns of every placement's conversation, but a session's (engines/turn-count.ts, route/slots.ts TurnGaps). */
  onPlaced?: (turns: number) => void;
}

interface Entry {
  model: CacheModel;
  /** The node-wide version at this backend's last change. */
  version: number;
  seen: number;
  /** routingDigest's view of a blocks model: made once, its map live. */
  live?: CacheDigest;
}

export class CacheBook {
  /** Tells this node's counters from those of an earlier run of it. */
  readonly epoch = randomBytes(4).toString('hex');
  #version = 0;
  #clock = 0;
  readonly #models = new Map<Backend, Entry>();
  readonly #digests = new WeakMap<LocalTarget, TargetDigest>();
  readonly #now: () => number;

  constructor(private readonly opts: CacheBookOptions = {}) {
    this.#now = opts.now ?? Date.now;
  }

  /** The node-wide digest version: the latest change of any backend's model. */
  get version(): number {
    return this.#version;
  }

  #entry(b: Backend): Entry {
    let e = this.#models.get(b);
    if (!e) {
      e = this.#fresh(b);
      // A backend that stops serving (restart, crash, reload) comes back with an empty cache: a new, empty
      // model with a new version (a target's version never goes back, so a poller never keeps a stale digest).
      b.on('state', (next: string) => {
        if (next === 'starting' || next === 'dead' || next === 'stopped') this.#fresh(b);
      });
    }
    return e;
  }

  #fresh(b: Backend): Entry {
    const model = cacheModel({
      kind: modelKindOf(b.info.engine),
      slots: b.parallel,
      budgetTokens: b.parallel * b.context,
      choose: this.opts.choose,
      onGap: this.opts.onGap,
      onPlaced: this.opts.onPlaced,
      // Read at every request: the backend learns its pool when it starts (the engine's flags, the model's KV size).
      pool: () => b.promptPool,
    });
    const e = { model, version: ++this.#version, seen: 0 };
    this.#models.set(b, e);
    return e;
  }

  /**
   * A request with `chain` (its head link at index `head`, when known) starts on backend `b`; `named`: the slot its
   * entry priced (a forward's `slot` claim), taken when it costs no more than the node's own choice.
   */
  begin(b: Backend, chain: PrefixChain, head?: number, named?: number, session?: boolean): CacheRun {
    const e = this.#entry(b);
    const ticket = e.model.begin(chain, ++this.#clock, this.#now(), head, named, session);
    this.#touched(e);
    let done = false;
    return {
      ticket,
      idSlot: e.model.kind === 'chosen' ? ticket.slot : undefined,
      predicted: ticket.predicted,
      finish: (o) => {
        if (done) return;
        done = true;
        // A backend replaced meanwhile: its new model never saw this request.
        if (this.#models.get(b) !== e) return;
        e.model.finish(ticket, o, ++this.#clock, this.#now());
        this.#touched(e);
      },
    };
  }

  /** What a request with `chain` starting on `b` now would evict (the node-chosen kind), changing nothing. */
  peek(b: Backend, chain: PrefixChain, named?: number): Evicted | undefined {
    return this.#models.get(b)?.model.peek?.(chain, this.#now(), named);
  }

  /** What each idle slot of `b` holds now (slot kinds; empty otherwise): written beside its saved slot files. */
  slotContents(b: Backend): SlotContent[] {
    return this.#models.get(b)?.model.slotContents?.() ?? [];
  }

  /** `b`'s engine restored a saved slot file into slot `content.slot`: its model now holds what the file held. */
  restored(b: Backend, content: SlotContent): void {
    const e = this.#entry(b);
    e.model.restored?.(content.slot, content, this.#now());
    this.#touched(e);
  }

  /** `b`'s engine saved idle slot `slot`'s prompt to RAM at the node's asking (survive/slot-ram.ts). */
  parked(b: Backend, slot: number): boolean {
    const e = this.#models.get(b);
    const ok = e?.model.parked?.(slot) ?? false;
    if (e) this.#touched(e);
    return ok;
  }

  /** What `b`'s RAM pool holds, most recently saved first (empty without a pool). */
  pooledContents(b: Backend): SlotContent[] {
    return this.#models.get(b)?.model.pooledContents?.() ?? [];
  }

  /** `b`'s engine took the RAM entry whose prompt ends at `hash` back into idle slot `slot`: what the slot holds now. */
  recalled(b: Backend, slot: number, hash: string): SlotContent | undefined {
    const e = this.#models.get(b);
    const c = e?.model.recalled?.(slot, hash, this.#now());
    if (e) this.#touched(e);
    return c;
  }

  #touched(e: Entry): void {
    if (e.model.changes === e.seen) return;
    e.seen = e.model.changes;
    e.version = ++this.#version;
  }

  /**
   * What this node's own routing reads of a target's cache, exact at every
   * moment: for one backend of the blocks kind holding no more than a digest
   * lists, its live map of what is held (nothing rebuilt per request; a
   * digest of it would be the same map); otherwise the digest itself.
   */
  routingDigest(t: LocalTarget): CacheDigest | undefined {
    if (t.backends.length !== 1) return this.digest(t);
    const e = this.#models.get(t.backends[0]);
    const held = e?.model.liveHeld?.();
    if (!e || !held || held.size > DIGEST_MAX_ENTRIES) return this.digest(t);
    return (e.live ??= { get version() { return e.version; }, held });
  }

  /** The digest of a target (its backends' links merged, most recently used first, bounded); undefined when it holds nothing known. */
  digest(t: LocalTarget): TargetDigest | undefined {
    let version = 0;
    const entries: Entry[] = [];
    for (const b of t.backends) {
      const e = this.#models.get(b);
      if (!e) continue;
      entries.push(e);
      version = Math.max(version, e.version);
    }
    if (entries.length === 0) return undefined;
    const cached = this.#digests.get(t);
    if (cached && cached.version === version) return cached;
    const all = entries.length === 1 ? entries[0].model.held() : entries.flatMap((e) => e.model.held()).sort((a, b) => b.used - a.used);
    const held = new Map<string, number>();
    const links: HeldLink[] = [];
    // Of several backends, a link is busy only when every backend listing it holds it busy.
    const idle = new Set(all.filter((l) => !l.busy).map((l) => l.hash));
    const busy = new Set<string>();
    for (const l of all) {
      if (held.has(l.hash)) continue;
      held.set(l.hash, l.tokens);
      const onlyBusy = l.busy === true && !idle.has(l.hash);
      if (onlyBusy) busy.add(l.hash);
      links.push(onlyBusy === (l.busy === true) ? l : { hash: l.hash, tokens: l.tokens, used: l.used });
      if (links.length >= DIGEST_MAX_ENTRIES) break;
    }
    // Slot state (SPEC 7): every slot of the target's backends, in backend order; a slot-kind engine's only.
    const slots: SlotHold[] = entries.flatMap((e) => e.model.slotStates?.() ?? []);
    // RAM pools (SPEC 7): their links apart from the slots' (a slot is taken to restore one), within the same bound.
    const pools = entries.map((e) => e.model.ramHeld?.()).filter((x): x is HeldLink[] => x !== undefined);
    const ramLinks = pools.length ? pools.flat().slice(0, DIGEST_MAX_ENTRIES) : undefined;
    const ram = ramLinks ? { ram: new Map(ramLinks.map((l) => [l.hash, l.tokens])), ramLinks } : {};
    const d: TargetDigest = { version, held, links, ...(busy.size ? { busy } : {}), ...(slots.length ? { slots } : {}), ...ram };
    this.#digests.set(t, d);
    return d;
  }
}
