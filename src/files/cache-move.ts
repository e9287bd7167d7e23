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
 *     holding that link (404); else its engine saves the slot
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
import { fetchFile } from './fetch.ts';
import type { IndexedFile } from './hash-index.ts';

export const MOVE_SAVE_PATH = '/v1/slot-cache/save';
export const MOVE_TAKE_PATH = '/v1/slot-cache/take';
/** A move's file not fetched (or not restored) within this is removed. */
export const MOVE_FILE_MAX_AGE_MS = 60_000;
/** The longest one member call of a move waits for its answer (a save of a large slot included). */
const CALL_MS = 30_000;
/** A drain's hand-off of all its conversations stops after this. */
const HAND_OFF_MS = 30_000;
/** Before any move was measured: KV bytes per token priced (a 7B-class model with grouped KV heads, f16). */
const DEFAULT_BYTES_PER_TOKEN = 128 * 1024;

export interface CacheMoverPorts {
  self: string;
  members: MemberTable;
  link: MemberLink;
  store: SlotStore;
  book: Pick<CacheBook, 'slotContents' | 'restored' | 'begin'>;
  /** This node's backends of `model`. */
  backends(model: string): readonly Backend[];
  /** A free slot of `model` here now, for a drain's hand-off. */
  lease(model: string): Lease | undefined;
  /** Every host as routing sees it (whom a draining node hands its conversations to). */
  hosts(): readonly HostView[];
  /** This host's measured prefill of `model`, ms per 1,000 tokens. */
  prefillMsPer1k(model: string): number | undefined;
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
  readonly #serving = new Map<string, IndexedFile & { until: number }>();
  readonly #link = new Rate();
  readonly #engine = new Rate();
  readonly #perToken = new Map<string, Rate>();

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

  /** A move's file was sent whole: the member has it (verified there), so it is removed here. */
  served(sha: string): void {
    if (this.#serving.has(sha)) this.#forget(sha);
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
    for (const b of this.#llama(model)) {
      const c = this.#p.book.slotContents(b).find((x) => x.links.slice(0, x.promptLinks).some((l) => l.hash === link));
      if (!c) continue;
      const fp = this.#p.store.fingerprintOf(b);
      const mine = fp && wireFingerprint(fp);
      if (!mine) return refusal(409, 'cache_mismatch', `${b.id}'s model file is not hashed here yet: a move needs its SHA-256 on both hosts`);
      mismatch = moveMismatch(mine, ask.fingerprint);
      if (mismatch) continue;
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
      this.#serving.set(sha256, { path: saved.path, size: st.size, mtimeMs: st.mtimeMs, sha256, until: this.#p.now() + MOVE_FILE_MAX_AGE_MS });
      this.#p.metrics.cacheMoveBytes.inc({ direction: 'sent' }, saved.bytes);
      this.#p.log(`cache move: saved ${b.id} slot ${c.slot} (${saved.tokens} tokens, ${mib(saved.bytes)} MiB) for ${from}`);
      return { status: 200, doc: { sha256, size: st.size, tokens: saved.tokens, content: c } };
    }
    if (mismatch) return refusal(409, 'cache_mismatch', `this slot cannot be restored there: ${mismatch}`);
    return refusal(404, 'cache_gone', `no idle slot of ${model} here holds chain link ${link}`);
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
    const name = fileName('in');
    const dest = p.store.moveInPath(b, name)!;
    try {
      const got = await fetchFile({
        sha256,
        size,
        dest,
        modelsDir: path.dirname(dest),
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
    }
    const fetched = p.now();
    this.#link.add(size / Math.max(1, fetched - t0));
    this.#learnSize(b.info.model, size, Number(doc?.tokens) || m.tokens);
    const slot = slotFor(content);
    if (slot === undefined) {
      fs.rmSync(dest, { force: true });
      return no('failed', 'no slot to restore into');
    }
    const restored = await p.store.restoreMoved(b, b.url, slot, name);
    if (!restored.ok) return no('failed', `the engine did not restore it into slot ${slot}: ${restored.why}`);
    this.#engine.add(size / Math.max(1, p.now() - fetched));
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
   * A draining node's live conversations to their next homes (survive/drain.ts `handOff`): the most recent first, as
   * many as fit in node.cache_disk, each asked of a member that runs the same model file and has a free slot.
   */
  async handOff(diskMiB: number): Promise<void> {
    const p = this.#p;
    const by = p.now() + HAND_OFF_MS;
    const hosts = p.hosts().filter((h) => !h.local && h.fresh && !h.draining);
    let moved = 0;
    for (const model of new Set(p.hosts().find((h) => h.local)?.models.keys() ?? [])) {
      const backends = this.#llama(model);
      const fp = backends[0] && p.store.fingerprintOf(backends[0]);
      const sha = fp?.file.sha256;
      if (!sha) continue;
      // Where each can go: members with this very file, by their free slots (each slot taken once).
      const room = new Map(hosts.flatMap((h) => {
        const m = h.models.get(model);
        return m && m.file?.sha256 === sha && (m.ctx === undefined || m.ctx === fp.context) ? [[h.name, Math.max(0, m.slots - m.busy)] as const] : [];
      }));
      const convs = backends.flatMap((b) => p.book.slotContents(b)).sort((a, c) => (c.idleSince ?? 0) - (a.idleSince ?? 0));
      let budget = diskMiB * 1024 * 1024;
      for (const c of convs) {
        const last = c.links[c.promptLinks - 1];
        const to = [...room].find(([, n]) => n > 0)?.[0];
        const bytes = last.tokens * (this.#perToken.get(model)?.value ?? 0);
        if (!to || p.now() > by || bytes > budget) break;
        budget -= bytes;
        room.set(to, room.get(to)! - 1);
        // Spread: the member just given one goes to the back.
        const n = room.get(to)!;
        room.delete(to);
        room.set(to, n);
        const a = await postToMember(p.link, to, MOVE_TAKE_PATH, { model, link: last.hash, tokens: last.tokens }, Math.max(1000, by - p.now()));
        if (a.status === 200) moved++;
        else p.log(`draining: ${to} did not take a conversation of ${model} (${last.tokens} tokens): ${a.status || 'no answer'} ${a.text}`);
      }
    }
    if (moved) p.log(`draining: handed ${moved} conversation(s) to members with their caches`);
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
