/**
 * A draining node's live conversations to their next homes (SPEC section 13,
 * "Drain"; survive/drain.ts calls it once the requests here have ended).
 *
 * Each conversation is asked of a member that runs the same model file and
 * context (`POST /v1/slot-cache/take`; the member pulls the slot's file as in
 * any cache move). What is handed:
 * - every idle slot's conversation, most recent first;
 * - then the conversations the engine had already given up to its RAM pool
 *   (a slot taken by another turn saves its prompt there, and a restart loses
 *   it): each is brought back into a slot first by running its last engine
 *   body again with one token to generate (survive/slot-ram.ts), then handed
 *   like a slot's. Only those whose body this node still keeps, and that may
 *   still come back (idle for less than nine in ten of the gaps between turns
 *   this node has seen: a finished conversation is not worth the drain's time).
 * A member that refuses (no slot free at that instant, a mismatch) is passed
 * over for the next; a conversation every member refused is asked again a
 * little later, while the hand-off's time lasts. Members are taken in turn,
 * so the conversations spread. Within node.cache_disk and HAND_OFF_MS.
 */
import type { SlotContent } from '../engines/cache-model.ts';
import type { LlamacppBackend } from '../engines/llamacpp/llamacpp.ts';
import type { MemberAnswer } from '../forward/member-call.ts';
import type { HostView } from '../route/types.ts';
import type { PromptSources } from '../survive/slot-ram.ts';

/**
 * A conversation in RAM is handed only while its chance of coming back is at least this: past nine in ten of the
 * gaps this node has seen between turns, it has most likely ended (each one handed costs the drain a recall and a
 * move, and a run that handed every RAM entry drained for up to 27 s).
 */
export const MIN_RETURN_CHANCE = 0.1;
/** The whole hand-off stops after this. */
export const HAND_OFF_MS = 30_000;
/** A conversation every member refused is asked again after this, for at most RETRY_FOR_MS. */
const RETRY_MS = 250;
const RETRY_FOR_MS = 10_000;

export interface HandOffPorts {
  /** Every host as routing sees it. */
  hosts(): readonly HostView[];
  /** This node's llama-server backends of `model` that serve now. */
  llama(model: string): LlamacppBackend[];
  /** The SHA-256 and context a slot file of `b` needs on the other side; undefined: not hashed yet (nothing moves). */
  layoutOf(b: LlamacppBackend): { sha256: string; context: number } | undefined;
  book: {
    slotContents(b: LlamacppBackend): SlotContent[];
    pooledContents(b: LlamacppBackend): SlotContent[];
  };
  /** Bring a conversation from `b`'s RAM pool back into one of its slots (CacheMover.recall): what the slot then holds. */
  recall(b: LlamacppBackend, content: SlotContent): Promise<SlotContent | undefined>;
  /** A conversation brought back for a member is done with (taken, or no member took it): its slot may be used again. */
  settled(hash: string): void;
  sources: Pick<PromptSources, 'get'>;
  /** A member took the slot whose prompt ends at `hash` at or after `since` (clock ms). */
  alreadySent(hash: string, since: number): boolean;
  /** The chance a conversation idle `idleMs` comes back: a RAM conversation past all return is not handed. */
  returnChance(idleMs: number): number;
  /** KV bytes per token of `model` as learned (0: not known yet). */
  bytesPerToken(model: string): number;
  /** Ask member `to` to take a conversation (the take call, signed). */
  take(to: string, doc: { model: string; link: string; tokens: number }, timeoutMs: number): Promise<MemberAnswer>;
  log(line: string): void;
  now(): number;
}

interface Conversation {
  b: LlamacppBackend;
  content: SlotContent;
  /** In the engine's RAM pool, not a slot: brought back into one before it is handed. */
  ram: boolean;
}

const endOf = (c: SlotContent) => c.links[c.promptLinks - 1];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Hand this node's conversations to members; the count handed (and of them, those taken from RAM). */
export async function handOff(p: HandOffPorts, diskMiB: number, drainSince: number): Promise<{ moved: number; fromRam: number }> {
  const by = p.now() + HAND_OFF_MS;
  const self = p.hosts().find((h) => h.local);
  let moved = 0;
  let fromRam = 0;
  for (const model of new Set(self?.models.keys() ?? [])) {
    const backends = p.llama(model);
    const layout = backends[0] && p.layoutOf(backends[0]);
    if (!layout) continue;
    const members = p
      .hosts()
      .filter((h) => !h.local && h.fresh && !h.draining)
      .filter((h) => {
        const m = h.models.get(model);
        return m && m.file?.sha256 === layout.sha256 && (m.ctx === undefined || m.ctx === layout.context);
      })
      // The most free slots first: they are likelier to take at once.
      .sort((a, c) => free(c, model) - free(a, model) || (a.name < c.name ? -1 : 1))
      .map((h) => h.name);
    if (members.length === 0) continue;
    let turn = 0;
    let budget = diskMiB * 1024 * 1024;
    for (const conv of conversations(p, backends)) {
      if (p.now() > by) break;
      const end = endOf(conv.content);
      if (p.alreadySent(end.hash, drainSince)) continue;
      const bytes = end.tokens * p.bytesPerToken(model);
      if (bytes > budget) continue;
      let content = conv.content;
      if (conv.ram) {
        const back = await p.recall(conv.b, conv.content);
        if (!back) continue;
        content = back;
      }
      const last = endOf(content);
      const doc = { model, link: last.hash, tokens: last.tokens };
      let taken: string | undefined;
      const until = Math.min(by, p.now() + RETRY_FOR_MS);
      let mismatch = false;
      for (let round = 0; !taken && !mismatch && (round === 0 || p.now() < until); round++) {
        if (round > 0) await sleep(RETRY_MS);
        for (let k = 0; k < members.length && !taken; k++) {
          const to = members[(turn + k) % members.length];
          const a = await p.take(to, doc, Math.max(1000, by - p.now()));
          if (a.status === 200) {
            taken = to;
            turn = (turn + k + 1) % members.length;
          } else if (round === 0) p.log(`draining: ${to} did not take a conversation of ${model} (${last.tokens} tokens): ${a.status || 'no answer'} ${a.text.slice(0, 200)}`);
          // Refused for its content (another file, context or layout): no member of that kind takes it later either.
          if (a.status === 409 && /cache_mismatch/.test(a.text)) mismatch = true;
        }
      }
      if (conv.ram) p.settled(last.hash);
      if (!taken) {
        p.log(`draining: no member took a conversation of ${model} (${last.tokens} tokens)${mismatch ? '' : ` within ${RETRY_FOR_MS / 1000}s`}; it goes cold`);
        continue;
      }
      budget -= bytes;
      moved++;
      if (conv.ram) fromRam++;
    }
  }
  if (moved) p.log(`draining: handed ${moved} conversation(s) to members with their caches (${fromRam} brought back from the engine's RAM first)`);
  return { moved, fromRam };
}

function free(h: HostView, model: string): number {
  const m = h.models.get(model);
  return m ? Math.max(0, m.slots - m.busy) : 0;
}

/**
 * What to hand, in order: the slots' conversations, most recent first, then the RAM pool's that this node can bring
 * back (their body kept), most recent first; a RAM entry that a slot's conversation (or a later entry) continues is
 * left out: handing the longer one hands it too.
 */
function conversations(p: HandOffPorts, backends: readonly LlamacppBackend[]): Conversation[] {
  const recent = (a: Conversation, c: Conversation) => (c.content.idleSince ?? 0) - (a.content.idleSince ?? 0);
  const slots = backends.flatMap((b) => p.book.slotContents(b).map((content) => ({ b, content, ram: false }))).sort(recent);
  const pooled = backends.flatMap((b) => p.book.pooledContents(b).map((content) => ({ b, content, ram: true }))).sort(recent);
  const covered = new Set(slots.flatMap((c) => c.content.links.slice(0, c.content.promptLinks).map((l) => l.hash)));
  const out: Conversation[] = [...slots];
  for (const c of pooled) {
    const end = endOf(c.content);
    if (!end || covered.has(end.hash) || !p.sources.get(end.hash)) continue;
    if (c.content.idleSince !== undefined && !(p.returnChance(Math.max(0, p.now() - c.content.idleSince)) >= MIN_RETURN_CHANCE)) continue;
    for (const l of c.content.links.slice(0, c.content.promptLinks)) covered.add(l.hash);
    out.push(c);
  }
  return out;
}
