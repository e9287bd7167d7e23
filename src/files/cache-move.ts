/**
 * Moving a cache (SPEC section 13): a conversation's slot travels from the
 * member that holds it to the host its next turn runs on.
 *
 * The protocol, three signed member calls and two engine calls:
 *  1. The executor (the new host) asks the holder, `POST /v1/slot-cache/save`
 *     signed as a member call, for the idle slot whose prompt ends at a chain
 *     link, sending the fingerprint of its own backend (model file SHA-256,
 *     context, `--parallel`, layout arguments, engine build).
 *  2. The holder refuses a different fingerprint (409), a slot no longer
 *     holding that link (404; unless its engine's RAM holds the prompt and
 *     this node kept its last engine body: then it is brought back into a
 *     slot first, survive/slot-ram.ts); else its engine saves the slot
 *     (`action=save`) into its slot-cache directory under a name the node
 *     makes, and the holder answers the file's SHA-256, size and content.
 *  3. The executor fetches the file over the files path of section 11
 *     (`GET /v1/files/{sha256}`, signed, members only, verified by its
 *     hash), and its engine restores it (`action=restore`) into the slot the
 *     turn took; the file is removed after the restore, and any file left
 *     behind is swept when a minute old.
 *
 * So a file is only ever taken from an alive member this node itself asked,
 * at the address the member table gives, and restored only when its hash is
 * what that member named; a request's body or claims never name a path.
 * Drain (`handOff`) uses the same pull: the draining node asks a member to
 * take (`POST /v1/slot-cache/take`) each of its recent conversations.
 */
import fs from 'node:fs';
import path from 'node:path';
import { createHash, randomBytes } from 'node:crypto';
import type { Backend } from '../engines/backend.ts';
import type { CacheBook, CacheRun } from '../engines/cache-book.ts';
import type { SlotContent } from '../engines/cache-model.ts';
import { kvBytesPerToken, LlamacppBackend } from '../engines/llamacpp/llamacpp.ts';
import type { Lease } from '../engines/targets.ts';
import { postToMember, type MemberLink } from '../forward/member-call.ts';
import type { MemberTable } from '../mesh/members.ts';
import type { Metrics } from '../metrics/metrics.ts';
import type { HostView } from '../route/types.ts';
import { EMPTY_BODY_SHA256 } from '../security/signing.ts';
import { DEFAULT_BYTES_PER_MS, DEFAULT_ENGINE_BYTES_PER_MS, DEFAULT_PREFILL_MS_PER_1K, moveMismatch, wireFingerprint, worthMoving, type MoveClaim, type MoveCosts, type MoveOutcome, type MoveResult } from '../survive/move-plan.ts';
import type { SlotStore } from '../survive/slot-store.ts';
import { parkSlot, PromptSources, recallPrompt } from '../survive/slot-ram.ts';
import { fetchFile } from './fetch.ts';
import { handOff } from './hand-off.ts';
import type { IndexedFile } from './hash-index.ts';

export const MOVE_SAVE_PATH = '/v1/slot-cache/save';
export const MOVE_TAKE_PATH = '/v1/slot-cache/take';
/** A move's file not fetched (or not restored) within this is removed. */
export const MOVE_FILE_MAX_AGE_MS = 60_000;
/** The longest one member call of a move waits for its answer (a save of a large slot included). */
const CALL_MS = 30_000;
/** Before any move was measured: KV bytes per token priced (a 7B-class model with grouped KV heads, f16). */
const DEFAULT_BYTES_PER_TOKEN = 128 * 1024;

export interface CacheMoverPorts {
  self: string;
  members: MemberTable;
  link: MemberLink;
  store: SlotStore;
  book: Pick<CacheBook, 'slotContents' | 'restored' | 'begin' | 'pooledContents' | 'recalled'>;
  /** This node's backends of `model`. */
  backends(model: string): readonly Backend[];
  /** A free slot of `model` here now, for a drain's hand-off. */
  lease(model: string): Lease | undefined;
  /** Every host as routing sees it (whom a draining node hands its conversations to). */
  hosts(): readonly HostView[];
  /** This host's measured prefill of `model`, ms per 1,000 tokens. */
  prefillMsPer1k(model: string): number | undefined;
  /** This node is draining: a member's save may then bring a prompt back from the engine's RAM. */
  draining?(): boolean;
  /** The chance a conversation idle `idleMs` comes back (a drain hands on from RAM only those that may). */
  returnChance?(idleMs: number): number;
  metrics: Pick<Metrics, 'cacheMoves' | 'cacheMoveBytes' | 'cacheMoveSeconds'>;
  log(line: string): void;
  now(): number;
}

const sha256Hex = /^[0-9a-f]{64}$/;
const linkHex = /^[0-9a-f]{16}$/;
const fileName = (dir: 'out' | 'in') => `move-${dir}-${randomBytes(8).toString('hex')}.bin`;

/** An EWMA of a rate, undefined until measured. */
class Rate {
  value: number | undefined;
  add(x: number): void {
    if (!(x > 0) || !Number.isFinite(x)) return;
    this.value = this.value === undefined ? x : 0.7 * this.value + 0.3 * x;
  }
}

export class CacheMover {
  readonly #p: CacheMoverPorts;
  /** Files saved here for a member to fetch, by SHA-256 (served by files/serve.ts beside model files). */
  readonly #serving = new Map<string, IndexedFile & { until: number; fetches: number }>();
  readonly #link = new Rate();
  readonly #engine = new Rate();
  readonly #perToken = new Map<string, Rate>();
  /** The engine bodies of recent prompts, for a drain's recall from RAM (survive/slot-ram.ts). */
  readonly #sources = new PromptSources();
  /** Recalls from the engine's RAM, one at a time (each takes a slot for a moment). */
  #recalls: Promise<unknown> = Promise.resolve();
  /** Prompt-end links brought back into a slot for a member to take and not yet saved: their slot is left alone. */
  readonly #awaiting = new Map<string, number>();
  /** Prompt-end links of slots saved here for a member, and when: a drain does not hand on what a member already took. */
  readonly #sent = new Map<string, number>();

  constructor(p: CacheMoverPorts) {
    this.#p = p;
  }

  /** A file being moved, for GET /v1/files/{sha256}; undefined once it is removed or too old. */
  byHash(sha: string): IndexedFile | undefined {
    const f = this.#serving.get(sha);
    if (!f) return undefined;
    if (f.until < this.#p.now() || !fs.existsSync(f.path)) {
      this.#forget(sha);
      return undefined;
    }
    return f;
  }

  /**
   * A move's file was sent whole: the member has it (verified there), so it is removed here, once every member that
   * was offered it has had it (two saves of one slot give one file: a turn's move and a drain's hand-off may ask at once).
   */
  served(sha: string): void {
    const f = this.#serving.get(sha);
    if (f && --f.fetches <= 0) this.#forget(sha);
  }

  #forget(sha: string): void {
    const f = this.#serving.get(sha);
    this.#serving.delete(sha);
    if (f) fs.rmSync(f.path, { force: true });
  }

  #sweep(): void {
    for (const [sha, f] of this.#serving) if (f.until < this.#p.now()) this.#forget(sha);
    this.#p.store.sweep(MOVE_FILE_MAX_AGE_MS);
  }

  /** This node's llamacpp backends of `model` that serve now. */
  #llama(model: string): LlamacppBackend[] {
    return this.#p.backends(model).filter((b): b is LlamacppBackend => b instanceof LlamacppBackend && b.url !== undefined && b.state === 'healthy');
  }

  /** The costs this executor prices a move of `model` with (move-plan.ts). */
  costs(model: string, rttMs: number): MoveCosts {
    return {
      bytesPerToken: this.#perToken.get(model)?.value ?? DEFAULT_BYTES_PER_TOKEN,
      bytesPerMs: this.#link.value ?? DEFAULT_BYTES_PER_MS,
      engineBytesPerMs: this.#engine.value ?? DEFAULT_ENGINE_BYTES_PER_MS,
      prefillMsPer1k: this.#p.prefillMsPer1k(model) ?? DEFAULT_PREFILL_MS_PER_1K,
      rttMs,
    };
  }

  #learnSize(model: string, bytes: number, tokens: number): void {
    if (tokens <= 0) return;
    let r = this.#perToken.get(model);
    if (!r) this.#perToken.set(model, (r = new Rate()));
    r.add(bytes / tokens);
  }

  // --- the holder's side ---

  /** POST /v1/slot-cache/save from member `from` (verified by the caller): save the asked slot and offer its file. */
  async save(from: string, body: Buffer): Promise<{ status: number; doc: unknown }> {
    this.#sweep();
    const read = askOf(body, 'fingerprint');
    if ('refused' in read) return read.refused;
    const { ask, model, link } = read;
    let mismatch: string | undefined;
    const holds = (x: SlotContent) => x.links.slice(0, x.promptLinks).some((l) => l.hash === link);
    for (const b of this.#llama(model)) {
      const c = this.#p.book.slotContents(b).find(holds);
      // A conversation its engine gave up to RAM (another turn took its slot since the entry's view, or a draining
      // node's hint names its RAM) is brought back into a slot first, when this node kept its last engine body.
      const pooled = c ? undefined : this.#p.book.pooledContents(b).find((x) => x.links.some((l) => l.hash === link) && this.#sources.get(x.links[x.promptLinks - 1].hash));
      if (!c && !pooled) continue;
      const fp = this.#p.store.fingerprintOf(b);
      const mine = fp && wireFingerprint(fp);
      if (!mine) return refusal(409, 'cache_mismatch', `${b.id}'s model file is not hashed here yet: a move needs its SHA-256 on both hosts`);
      mismatch = moveMismatch(mine, ask.fingerprint);
      if (mismatch) continue;
      if (c) return this.#saveSlot(b, c, from);
      // Serving, the recall holds a slot of its own meanwhile, so no turn here is given that slot under it.
      const lease = this.#p.draining?.() ? undefined : this.#p.lease(model);
      if (lease && lease.backend !== b) lease.release();
      if (!this.#p.draining?.() && lease?.backend !== b) return refusal(404, 'cache_gone', `the prompt holding chain link ${link} is in ${b.id}'s RAM, and no slot is free here to bring it back`);
      try {
        const back = await this.recall(b, pooled!);
        if (!back) return refusal(404, 'cache_gone', `the prompt of ${model} holding chain link ${link} was not brought back from ${b.id}'s RAM`);
        return await this.#saveSlot(b, back, from);
      } finally {
        lease?.release();
      }
    }
    if (mismatch) return refusal(409, 'cache_mismatch', `this slot cannot be restored there: ${mismatch}`);
    return refusal(404, 'cache_gone', `no idle slot of ${model} here holds chain link ${link}`);
  }

  /** Save idle slot `c.slot` of `b` for member `from` and offer its file (save's answer). */
  async #saveSlot(b: LlamacppBackend, c: SlotContent, from: string): Promise<{ status: number; doc: unknown }> {
    const model = b.info.model;
    const name = fileName('out');
    const t0 = this.#p.now();
    const saved = await this.#p.store.saveForMove(b, b.url!, c.slot, name);
    if (!saved.ok) return refusal(507, 'cache_not_saved', `${b.id} slot ${c.slot} was not saved: ${saved.why}`);
    // The slot may have been taken while the engine saved it (it defers a busy slot's save): then the file holds another prompt.
    const still = this.#p.book.slotContents(b).find((x) => x.slot === c.slot);
    if (!still || still.links.at(-1)?.hash !== c.links.at(-1)?.hash) {
      fs.rmSync(saved.path, { force: true });
      return refusal(404, 'cache_gone', `slot ${c.slot} was taken while it was being saved`);
    }
    this.#engine.add(saved.bytes / Math.max(1, this.#p.now() - t0));
    this.#learnSize(model, saved.bytes, saved.tokens);
    const sha256 = await hashFile(saved.path);
    const st = fs.statSync(saved.path);
    const same = this.#serving.get(sha256);
    if (same && fs.existsSync(same.path)) {
      // The same slot saved again before the first file was fetched: one file, offered to one more member.
      fs.rmSync(saved.path, { force: true });
      same.fetches++;
      same.until = this.#p.now() + MOVE_FILE_MAX_AGE_MS;
      // Not swept as old while it is offered again (the sweep reads the file's time).
      const at = new Date();
      fs.utimesSync(same.path, at, at);
    } else this.#serving.set(sha256, { path: saved.path, size: st.size, mtimeMs: st.mtimeMs, sha256, until: this.#p.now() + MOVE_FILE_MAX_AGE_MS, fetches: 1 });
    const end = c.links[c.promptLinks - 1];
    if (end) this.#sent.set(end.hash, this.#p.now());
    if (end) this.#awaiting.delete(end.hash);
    for (const [h, at] of this.#sent) if (at < this.#p.now() - MOVE_FILE_MAX_AGE_MS) this.#sent.delete(h);
    this.#p.metrics.cacheMoveBytes.inc({ direction: 'sent' }, saved.bytes);
    this.#p.log(`cache move: saved ${b.id} slot ${c.slot} (${saved.tokens} tokens, ${mib(saved.bytes)} MiB) for ${from}`);
    return { status: 200, doc: { sha256, size: st.size, tokens: saved.tokens, content: c } };
  }

  // --- the new host's side ---

  /**
   * Take the slot `m` names from its holder into backend `b`: priced first (unless `always`), then asked for, fetched,
   * and restored into the slot `slotFor` names once the content is known. Never throws: a move that does not happen
   * leaves the turn to prefill as it would have.
   */
  async pull(m: MoveClaim, b: Backend, cachedHere: number, slotFor: (c: SlotContent) => number | undefined, signal?: AbortSignal, always = false): Promise<MoveResult> {
    const model = b.info.model;
    const r = await this.#pull(m, b, cachedHere, slotFor, signal, always);
    this.#p.metrics.cacheMoves.inc({ model, outcome: r.outcome });
    if (r.outcome === 'moved') {
      this.#p.metrics.cacheMoveBytes.inc({ direction: 'received' }, r.bytes ?? 0);
      this.#p.metrics.cacheMoveSeconds.observe({ model }, (r.ms ?? 0) / 1000);
      this.#p.log(`cache move: restored ${r.tokens} tokens (${mib(r.bytes ?? 0)} MiB) from ${m.from} into ${b.id} in ${r.ms} ms`);
    } else if (r.outcome !== 'priced_out') this.#p.log(`cache move from ${m.from} into ${b.id}: ${r.outcome}: ${r.why}`);
    return r;
  }

  async #pull(m: MoveClaim, b: Backend, cachedHere: number, slotFor: (c: SlotContent) => number | undefined, signal: AbortSignal | undefined, always: boolean): Promise<MoveResult> {
    const p = this.#p;
    const no = (outcome: MoveOutcome, why: string): MoveResult => ({ outcome, from: m.from, tokens: m.tokens, why });
    const member = p.members.get(m.from);
    if (m.from === p.self || !member || member.state !== 'alive' || member.role === 'foreign' || !member.api) return no('refused', `${m.from} is not an alive member: nothing is taken from it`);
    if (!(b instanceof LlamacppBackend) || !b.url) return no('refused', `${b.id} is not a llama-server backend: its slots cannot be restored`);
    const fp = p.store.fingerprintOf(b);
    const mine = fp && wireFingerprint(fp);
    if (!mine) return no('refused', `${b.id}'s model file is not hashed yet (or node.cache_disk is 0)`);
    if (!always) {
      // Before any file of this model was seen: its GGUF's shape says what a token takes (a file adds little to it).
      if (!this.#perToken.has(b.info.model)) {
        const kv = await kvBytesPerToken(b.modelPath);
        if (kv) this.#learnSize(b.info.model, kv, 1);
      }
      const { move, price } = worthMoving(m.tokens, cachedHere, this.costs(b.info.model, 1));
      if (!move) return { ...no('priced_out', `moving ${m.tokens} tokens is priced ${Math.round(price.moveMs)} ms, prefilling here ${Math.round(price.prefillMs)} ms`), bytes: Math.round(price.bytes) };
    }
    this.#sweep();
    const t0 = p.now();
    const answer = await postToMember(p.link, m.from, MOVE_SAVE_PATH, { model: b.info.model, link: m.link, fingerprint: mine }, CALL_MS);
    const doc = answer.body as { sha256?: unknown; size?: unknown; tokens?: unknown; content?: unknown; error?: { message?: string; code?: string } } | undefined;
    if (answer.status !== 200) {
      const why = `${m.from} answered ${answer.status || 'nothing'}: ${doc?.error?.message ?? answer.text}`;
      return no(answer.status === 404 ? 'gone' : answer.status === 409 || answer.status === 403 || answer.status === 401 ? 'refused' : 'failed', why);
    }
    const sha256 = typeof doc?.sha256 === 'string' && sha256Hex.test(doc.sha256) ? doc.sha256 : undefined;
    const size = typeof doc?.size === 'number' && Number.isSafeInteger(doc.size) && doc.size > 0 ? doc.size : undefined;
    const content = contentOf(doc?.content);
    if (!sha256 || !size || !content) return no('failed', `${m.from}'s answer is malformed`);
    if (!p.store.makeRoom(size)) return no('refused', `the file (${mib(size)} MiB) is larger than node.cache_disk here`);
    // The link's rate is the fetch's alone: the holder's save (slow while its engine is busy) is the engine's rate's.
    const asked = p.now();
    const name = fileName('in');
    const dest = p.store.moveInPath(b, name)!;
    // Its partial file in a directory of its own: two pulls of one file (a turn's and a drain's take) would share
    // `.<sha256>.part`, and the first to finish took it from under the other.
    const partDir = path.join(path.dirname(dest), `.${name}.d`);
    try {
      const got = await fetchFile({
        sha256,
        size,
        dest,
        modelsDir: partDir,
        sources: [{ name: m.from, api: member.api }],
        headers: (s, pathWithQuery) => p.link.sign('GET', pathWithQuery, EMPTY_BODY_SHA256, s.name),
        dispatcher: p.link.dispatcher,
        reserve: 64 * 1024 * 1024,
        ...(signal ? { signal } : {}),
      });
      fs.closeSync(got.fd);
    } catch (err) {
      fs.rmSync(dest, { force: true });
      return no('failed', `the file did not arrive intact: ${(err as Error).message}`);
    } finally {
      fs.rmSync(partDir, { recursive: true, force: true });
    }
    const fetched = p.now();
    this.#link.add(size / Math.max(1, fetched - asked));
    this.#learnSize(b.info.model, size, Number(doc?.tokens) || m.tokens);
    const slot = slotFor(content);
    if (slot === undefined) {
      fs.rmSync(dest, { force: true });
      return no('failed', 'no slot to restore into');
    }
    // The engine's restore overwrites the slot and saves nothing: whatever live conversation it holds goes to RAM first.
    if ((b.promptPool?.tokens ?? 0) > 0) {
      const parked = await parkSlot(b, b.url, slot);
      if (!parked.ok) p.log(`cache move: ${b.id} slot ${slot} was not saved to the engine's RAM before the restore: ${parked.why}`);
    }
    // The engine's rate is the restore's alone (the park before it is a one-token completion's time, not the file's).
    const restoring = p.now();
    const restored = await p.store.restoreMoved(b, b.url, slot, name);
    if (!restored.ok) return no('failed', `the engine did not restore it into slot ${slot}: ${restored.why}`);
    this.#engine.add(size / Math.max(1, p.now() - restoring));
    return { outcome: 'moved', from: m.from, tokens: restored.tokens, bytes: size, ms: p.now() - t0 };
  }

  /** POST /v1/slot-cache/take from member `from`, draining: pull its slot into a free slot here (no turn waits for it). */
  async take(from: string, body: Buffer): Promise<{ status: number; doc: unknown }> {
    const read = askOf(body, 'tokens');
    if ('refused' in read) return read.refused;
    const { ask, model, link } = read;
    const lease = this.#p.lease(model);
    if (!lease) return refusal(409, 'no_slot', `no free slot of ${model} here`);
    let run = undefined as CacheRun | undefined;
    let into = undefined as SlotContent | undefined;
    try {
      const r = await this.pull({ from, link, tokens: Number(ask.tokens) || 0 }, lease.backend, 0, (c) => {
        // The slot this node's own choice gives the conversation, as for its next turn (its eviction priced as any).
        run = this.#p.book.begin(lease.backend, c.links.slice(0, c.promptLinks), c.head >= 0 ? c.head : undefined);
        into = c;
        return run.idSlot;
      }, undefined, true);
      // The ticket ends unprocessed (nothing ran), then the slot is told what the file put there.
      const slot = run?.idSlot;
      run?.finish({ processed: false });
      run = undefined;
      if (r.outcome === 'moved' && into && slot !== undefined) this.#p.book.restored(lease.backend, { ...into, slot, idleSince: this.#p.now() });
      return { status: r.outcome === 'moved' ? 200 : 409, doc: r };
    } finally {
      run?.finish({ processed: false });
      lease.release();
    }
  }

  /**
   * Bring `content`, held in `b`'s RAM pool, back into the idle slot that has been idle longest (not one brought back
   * for a member that has not taken it yet), by running its last engine body again (survive/slot-ram.ts). What the
   * slot then holds; undefined when there is no such slot, no body, or the engine refused.
   */
  recall(b: LlamacppBackend, content: SlotContent): Promise<SlotContent | undefined> {
    const next = this.#recalls.then(() => this.#recall(b, content));
    this.#recalls = next.catch(() => undefined);
    return next;
  }

  async #recall(b: LlamacppBackend, content: SlotContent): Promise<SlotContent | undefined> {
    const p = this.#p;
    const end = content.links[content.promptLinks - 1];
    const source = end && this.#sources.get(end.hash);
    if (!source || !b.url) return undefined;
    const now = p.now();
    for (const [h, at] of this.#awaiting) if (at < now - MOVE_FILE_MAX_AGE_MS) this.#awaiting.delete(h);
    // Only a slot holding a prompt: the engine restores nothing from RAM into an empty one. First a slot whose
    // conversation a member has already taken (it lives on there), then the one idle longest.
    const taken = (c: SlotContent) => (this.#sent.has(c.links[c.promptLinks - 1].hash) ? 0 : 1);
    const slot = p.book
      .slotContents(b)
      .filter((c) => !this.#awaiting.has(c.links[c.promptLinks - 1].hash))
      .sort((a, c) => taken(a) - taken(c) || (a.idleSince ?? 0) - (c.idleSince ?? 0))[0]?.slot;
    if (slot === undefined) return undefined;
    const r = await recallPrompt(b, b.url, slot, source);
    if (!r.ok) {
      p.log(`cache move: the prompt of ${end.tokens} tokens in ${b.id}'s RAM was not brought back into slot ${slot}: ${r.why}`);
      return undefined;
    }
    const back = p.book.recalled(b, slot, end.hash);
    if (back) this.#awaiting.set(end.hash, p.now());
    return back;
  }

  /**
   * The engine body that just ran a prompt on `b` (ending at chain link `hash`), kept so that a drain can bring the
   * prompt back from the engine's RAM pool and hand it on (files/hand-off.ts). Only for engines with a RAM pool.
   */
  remember(b: Backend, hash: string, path: string, body: Buffer): void {
    if (b instanceof LlamacppBackend && (b.promptPool?.tokens ?? 0) > 0 && this.#p.store.keepsFiles) this.#sources.remember(hash, { path, body });
  }

  /** A draining node's live conversations to their next homes (files/hand-off.ts). */
  async handOff(diskMiB: number, since = this.#p.now()): Promise<void> {
    const p = this.#p;
    await handOff(
      {
        hosts: () => p.hosts(),
        llama: (model) => this.#llama(model),
        layoutOf: (b) => {
          const fp = p.store.fingerprintOf(b);
          return fp?.file.sha256 ? { sha256: fp.file.sha256, context: fp.context } : undefined;
        },
        book: p.book,
        sources: this.#sources,
        recall: (b, content) => this.recall(b, content),
        settled: (hash) => this.#awaiting.delete(hash),
        // A member pulled it for a turn since the drain began (a turn routed away from this draining node): it has it.
        alreadySent: (hash, since) => (this.#sent.get(hash) ?? -Infinity) >= since,
        returnChance: (idleMs) => p.returnChance?.(idleMs) ?? 1,
        bytesPerToken: (model) => this.#perToken.get(model)?.value ?? 0,
        take: (to, doc, ms) => postToMember(p.link, to, MOVE_TAKE_PATH, doc, ms),
        log: p.log,
        now: p.now,
      },
      diskMiB,
      since,
    );
  }
}

/** A member's save or take body: its model and chain link, and its other field (`extra`), else the 400 naming the shape. */
function askOf(body: Buffer, extra: 'fingerprint' | 'tokens'): { ask: Record<string, unknown>; model: string; link: string } | { refused: { status: number; doc: unknown } } {
  const shape = `expected {"model", "link" (16 hex digits), "${extra}"}`;
  let ask: Record<string, unknown>;
  try {
    ask = JSON.parse(body.toString('utf8'));
  } catch {
    return { refused: refusal(400, 'invalid_request_error', shape) };
  }
  const model = ask && typeof ask.model === 'string' ? ask.model : '';
  const link = ask && typeof ask.link === 'string' && linkHex.test(ask.link) ? ask.link : undefined;
  if (!model || !link) return { refused: refusal(400, 'invalid_request_error', shape) };
  return { ask, model, link };
}

function refusal(status: number, code: string, message: string): { status: number; doc: unknown } {
  return { status, doc: { error: { message, type: status === 400 ? 'invalid_request_error' : 'server_error', code } } };
}

const mib = (bytes: number) => (bytes / 1024 / 1024).toFixed(1);

/** A slot's content as a member sent it, checked field by field (it becomes this node's belief of a slot). */
function contentOf(raw: unknown): SlotContent | undefined {
  const c = raw as Partial<SlotContent> | undefined;
  if (!c || typeof c !== 'object' || !Array.isArray(c.links) || c.links.length > 10_000) return undefined;
  const links = c.links.filter((l) => l && typeof l.hash === 'string' && linkHex.test(l.hash) && Number.isSafeInteger(l.tokens) && l.tokens >= 0).map((l) => ({ hash: l.hash, tokens: l.tokens }));
  const promptLinks = Number(c.promptLinks);
  if (links.length !== c.links.length || !Number.isSafeInteger(promptLinks) || promptLinks < 1 || promptLinks > links.length) return undefined;
  const head = Number.isSafeInteger(c.head) && c.head! < promptLinks ? c.head! : -1;
  return { slot: 0, links, promptLinks, head, ...(Number.isSafeInteger(c.replyFull) ? { replyFull: c.replyFull } : {}) };
}

function hashFile(file: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const h = createHash('sha256');
    fs.createReadStream(file)
      .on('data', (d) => h.update(d))
      .on('error', reject)
      .on('end', () => resolve(h.digest('hex')));
  });
}
