/**
 * Kept over a restart (SPEC section 13, issue 43 item 3): before a
 * llama-server backend stops (the node stops, drains, or unloads the model)
 * the node has the engine save each idle slot's prompt to a file
 * (`POST /slots/{id}?action=save`), and when the model loads again on this
 * host it has the new engine restore them (`action=restore`) before the
 * backend serves, and tells its cache model what each slot now holds, so a
 * conversation's next turn is priced and found warm.
 *
 * Files live in `<state_dir>/slot-cache/<model>/`, the engine's
 * `--slot-save-path`; the node names them (`b<backend>-s<slot>.bin`) and
 * never takes a name or a path from a request. Beside each file a record
 * (`.json`) says what saved it: the model file (path, size, mtime, and its
 * SHA-256 when the node has hashed it), the slot layout (context,
 * `--parallel`, the operator's extra arguments, which carry KV types and
 * unified KV) and the engine's build. The engine checks none of that (it
 * silently restores a file from another model of the same shape, and a
 * failed restore erases the slot), so a file whose record differs in any of
 * them is dropped, never restored. A file is removed once restored, and the
 * whole directory is kept within node.cache_disk MiB, oldest files first.
 */
import fs from 'node:fs';
import path from 'node:path';
import { createHash } from 'node:crypto';
import { postToEngine } from './engine-post.ts';
import type { CacheBook } from '../engines/cache-book.ts';
import type { SlotContent } from '../engines/cache-model.ts';
import type { LlamacppBackend, SlotKeeper } from '../engines/llamacpp/llamacpp.ts';

/** The directory under state_dir. */
export const SLOT_CACHE_DIR = 'slot-cache';

/**
 * All of one backend's saves, or restores, within this: the engine defers both while a slot is busy (a request a
 * drain cut), and a stop or a load must not wait on that for long. What does not fit is left cold.
 */
const BACKEND_BOUND_MS = 20_000;

/** What a slot file was saved by and holds: written beside it as `<name>.json`. */
export interface SlotRecord {
  version: 1;
  /** The model entry's name. */
  model: string;
  backend: number;
  slot: number;
  /** What the file is valid for (slotFingerprint). */
  fingerprint: SlotFingerprint;
  /** What the node believed the slot held: told to its cache model again on restore. */
  content: SlotContent;
  /** Tokens the engine wrote (its `n_saved`). */
  tokens: number;
  bytes: number;
  savedAt: number;
}

export interface SlotFingerprint {
  /** The GGUF: its absolute path, size and mtime, and its SHA-256 when the node had hashed it. */
  file: { path: string; size: number; mtimeMs: number; sha256?: string };
  context: number;
  parallel: number;
  /** The operator's llamacpp.args: KV types, unified KV and the like change the file's layout. */
  args: string[];
  /** The engine's build_info: the file format changes between builds. */
  build?: string;
}

export interface SlotStoreDeps {
  stateDir: string;
  /** node.cache_disk in MiB; 0: nothing is kept. */
  diskMiB: number;
  book: Pick<CacheBook, 'slotContents' | 'restored'>;
  /** The SHA-256 the node knows for a file at `path`, while it is unchanged (files/hash-index.ts). */
  sha256Of?(path: string): string | undefined;
  log(line: string): void;
  now?: () => number;
}

/**
 * A directory name for a model entry's name: its safe characters, and a hash of the whole name so that two names
 * never share one, and no name (`..`, `a/b`) reaches outside slot-cache/.
 */
export function modelDirName(model: string): string {
  const safe = model.replace(/[^A-Za-z0-9._-]/g, '_').replace(/^\.+/, '_').slice(0, 64);
  return `${safe}-${createHash('sha256').update(model).digest('hex').slice(0, 8)}`;
}

const fileName = (backend: number, slot: number) => `b${backend}-s${slot}.bin`;

/** The names cache moves give their files (files/cache-move.ts): never a kept slot's name, and swept when old. */
export const MOVE_FILE = /^move-(out|in)-[0-9a-f]{16}\.bin$/;

/** Do two fingerprints allow a file saved under `saved` to be restored under `now`? */
export function sameLayout(saved: SlotFingerprint, now: SlotFingerprint): boolean {
  const a = saved.file;
  const b = now.file;
  const sameFile = a.sha256 && b.sha256 ? a.sha256 === b.sha256 : a.path === b.path && a.size === b.size && a.mtimeMs === b.mtimeMs;
  return sameFile && saved.context === now.context && saved.parallel === now.parallel && saved.build === now.build && JSON.stringify(saved.args) === JSON.stringify(now.args);
}

export class SlotStore implements SlotKeeper {
  readonly #d: SlotStoreDeps;
  readonly #root: string;

  constructor(deps: SlotStoreDeps) {
    this.#d = deps;
    this.#root = path.join(deps.stateDir, SLOT_CACHE_DIR);
  }

  get #now(): number {
    return (this.#d.now ?? Date.now)();
  }

  /** node.cache_disk is above 0: slot files may be written (kept over a restart, moved between members). */
  get keepsFiles(): boolean {
    return this.#d.diskMiB > 0;
  }

  dirFor(b: LlamacppBackend): string | undefined {
    if (this.#d.diskMiB <= 0) return undefined;
    const dir = path.join(this.#root, modelDirName(b.info.model));
    try {
      fs.mkdirSync(dir, { recursive: true });
      return dir;
    } catch (err) {
      this.#d.log(`slot cache: cannot make ${dir} (${(err as Error).message}); ${b.id} keeps nothing over a restart`);
      return undefined;
    }
  }

  /** What a slot file of `b` is valid for: compared by a member before it sends one (a cache move, SPEC 13). */
  fingerprintOf(b: LlamacppBackend): SlotFingerprint | undefined {
    return this.#fingerprint(b);
  }

  #fingerprint(b: LlamacppBackend): SlotFingerprint | undefined {
    const file = path.resolve(b.modelPath);
    let st: fs.Stats;
    try {
      st = fs.statSync(file);
    } catch {
      return undefined;
    }
    const sha256 = this.#d.sha256Of?.(file);
    return {
      file: { path: file, size: st.size, mtimeMs: st.mtimeMs, ...(sha256 ? { sha256 } : {}) },
      context: b.context,
      parallel: b.parallel,
      args: [...b.extraArgs],
      ...(b.buildInfo ? { build: b.buildInfo } : {}),
    };
  }

  /** This backend's records in its model's directory (its files from an earlier run). */
  #records(dir: string, backend: number): { name: string; record: SlotRecord | undefined }[] {
    let names: string[];
    try {
      names = fs.readdirSync(dir);
    } catch {
      return [];
    }
    const own = new RegExp(`^b${backend}-s(\\d+)\\.bin$`);
    return names
      .filter((n) => own.test(n))
      .map((name) => {
        try {
          const record = JSON.parse(fs.readFileSync(path.join(dir, `${name}.json`), 'utf8')) as SlotRecord;
          return { name, record: record?.version === 1 && record.fingerprint && record.content ? record : undefined };
        } catch {
          return { name, record: undefined };
        }
      });
  }

  #remove(dir: string, name: string): void {
    for (const f of [name, `${name}.json`]) fs.rmSync(path.join(dir, f), { force: true });
  }

  async save(b: LlamacppBackend, url: string): Promise<void> {
    const dir = this.dirFor(b);
    if (!dir) return;
    // What an earlier run left for this backend is what the slots held then: replaced by what they hold now.
    for (const { name } of this.#records(dir, b.info.index)) this.#remove(dir, name);
    const contents = this.#d.book.slotContents(b);
    const fingerprint = this.#fingerprint(b);
    if (!fingerprint || contents.length === 0) return;
    let saved = 0;
    let bytes = 0;
    const by = this.#now + BACKEND_BOUND_MS;
    for (const content of contents) {
      const name = fileName(b.info.index, content.slot);
      const answer = await this.#call(b, url, content.slot, 'save', name, by);
      if (!answer.ok) {
        this.#d.log(`slot cache: ${b.id} slot ${content.slot} not saved: ${answer.why}`);
        this.#remove(dir, name);
        continue;
      }
      const n = Number(answer.body.n_written) || fileSize(path.join(dir, name));
      const record: SlotRecord = { version: 1, model: b.info.model, backend: b.info.index, slot: content.slot, fingerprint, content, tokens: Number(answer.body.n_saved) || 0, bytes: n, savedAt: this.#now };
      fs.writeFileSync(path.join(dir, `${name}.json`), JSON.stringify(record));
      saved++;
      bytes += n;
    }
    if (saved) this.#d.log(`slot cache: ${b.id} saved ${saved} slot(s), ${(bytes / 1024 / 1024).toFixed(1)} MiB, for its next load on this host`);
    this.#trim();
  }

  async restore(b: LlamacppBackend, url: string): Promise<void> {
    const dir = this.dirFor(b);
    if (!dir) return;
    const now = this.#fingerprint(b);
    let restored = 0;
    let tokens = 0;
    const by = this.#now + BACKEND_BOUND_MS;
    for (const { name, record } of this.#records(dir, b.info.index)) {
      const why = !record ? 'its record is missing or unreadable' : !now || !sameLayout(record.fingerprint, now) ? 'saved by another model file, context, --parallel, arguments or engine build' : record.slot >= b.parallel ? 'its slot is beyond --parallel' : undefined;
      if (why || !record) {
        this.#d.log(`slot cache: ${b.id} dropped ${name}: ${why}`);
        this.#remove(dir, name);
        continue;
      }
      const answer = await this.#call(b, url, record.slot, 'restore', name, by);
      // Restored or not, the file has done its part: a failed restore is not tried again.
      this.#remove(dir, name);
      if (!answer.ok) {
        this.#d.log(`slot cache: ${b.id} slot ${record.slot} not restored: ${answer.why}`);
        continue;
      }
      this.#d.book.restored(b, record.content);
      restored++;
      tokens += Number(answer.body.n_restored) || 0;
    }
    if (restored) this.#d.log(`slot cache: ${b.id} restored ${restored} slot(s), ${tokens} tokens, saved before its last stop`);
  }

  /**
   * A cache move's file (SPEC 13, "Moving a cache"): slot `slot` saved by the engine as `name` in this backend's
   * directory. Refused (and removed) when it alone would pass node.cache_disk; the rest of the directory is trimmed to
   * make room. The caller removes the file once it has been sent, and `sweep` removes one left behind.
   */
  async saveForMove(b: LlamacppBackend, url: string, slot: number, name: string): Promise<{ ok: true; path: string; bytes: number; tokens: number } | { ok: false; why: string }> {
    const dir = this.dirFor(b);
    if (!dir) return { ok: false, why: 'node.cache_disk is 0 here: no slot file may be written' };
    const answer = await this.#call(b, url, slot, 'save', name, this.#now + BACKEND_BOUND_MS);
    const file = path.join(dir, name);
    if (!answer.ok) {
      fs.rmSync(file, { force: true });
      return answer;
    }
    const bytes = fileSize(file);
    if (bytes > this.#d.diskMiB * 1024 * 1024) {
      fs.rmSync(file, { force: true });
      return { ok: false, why: `the slot's file (${(bytes / 1024 / 1024).toFixed(1)} MiB) is larger than node.cache_disk (${this.#d.diskMiB} MiB)` };
    }
    this.#trim(file);
    return { ok: true, path: file, bytes, tokens: Number(answer.body.n_saved) || 0 };
  }

  /** Where a moved file for `b` is written before its restore (its directory, made); undefined with cache_disk 0. */
  moveInPath(b: LlamacppBackend, name: string): string | undefined {
    const dir = this.dirFor(b);
    return dir && path.join(dir, name);
  }

  /** Room for `bytes` more within node.cache_disk (older files removed first); false when they alone do not fit. */
  makeRoom(bytes: number): boolean {
    if (bytes > this.#d.diskMiB * 1024 * 1024) return false;
    this.#trim(undefined, bytes);
    return true;
  }

  /** Restore a moved file (named in `b`'s directory) into slot `slot`, then remove the file whatever the outcome. */
  async restoreMoved(b: LlamacppBackend, url: string, slot: number, name: string): Promise<{ ok: true; tokens: number } | { ok: false; why: string }> {
    const dir = this.dirFor(b);
    if (!dir) return { ok: false, why: 'node.cache_disk is 0 here' };
    try {
      const answer = await this.#call(b, url, slot, 'restore', name, this.#now + BACKEND_BOUND_MS);
      return answer.ok ? { ok: true, tokens: Number(answer.body.n_restored) || 0 } : answer;
    } finally {
      fs.rmSync(path.join(dir, name), { force: true });
    }
  }

  /** Remove cache moves' files older than `maxAgeMs`: ones a member never fetched, or a restore that never came. */
  sweep(maxAgeMs: number): void {
    const cutoff = this.#now - maxAgeMs;
    for (const sub of safeList(this.#root)) {
      const dir = path.join(this.#root, sub);
      for (const name of safeList(dir)) {
        if (!MOVE_FILE.test(name)) continue;
        try {
          if (fs.statSync(path.join(dir, name)).mtimeMs < cutoff) fs.rmSync(path.join(dir, name), { force: true });
        } catch {
          // gone meanwhile
        }
      }
    }
  }

  async #call(b: LlamacppBackend, url: string, slot: number, action: 'save' | 'restore', filename: string, by: number): Promise<{ ok: true; body: Record<string, unknown> } | { ok: false; why: string }> {
    const left = by - this.#now;
    if (left <= 0) return { ok: false, why: `no time left (${BACKEND_BOUND_MS / 1000}s for all of a backend's slots)` };
    const r = await postToEngine(b, url, `/slots/${slot}?action=${action}`, JSON.stringify({ filename }), left);
    return r.ok ? { ok: true, body: r.doc } : r;
  }

  /** Keep every model's files within node.cache_disk (less `reserve` bytes about to be written): the oldest go first, never `keep`. */
  #trim(keep?: string, reserve = 0): void {
    const limit = this.#d.diskMiB * 1024 * 1024 - reserve;
    const files: { dir: string; name: string; bytes: number; at: number }[] = [];
    for (const sub of safeList(this.#root)) {
      const dir = path.join(this.#root, sub);
      for (const name of safeList(dir)) {
        if (!name.endsWith('.bin') || path.join(dir, name) === keep) continue;
        try {
          const st = fs.statSync(path.join(dir, name));
          files.push({ dir, name, bytes: st.size, at: st.mtimeMs });
        } catch {
          // gone meanwhile
        }
      }
    }
    let total = files.reduce((n, f) => n + f.bytes, 0);
    for (const f of files.sort((a, b) => a.at - b.at)) {
      if (total <= limit) break;
      this.#remove(f.dir, f.name);
      total -= f.bytes;
      this.#d.log(`slot cache: removed ${path.basename(f.dir)}/${f.name} (${(f.bytes / 1024 / 1024).toFixed(1)} MiB) to stay within node.cache_disk (${this.#d.diskMiB} MiB)`);
    }
  }
}

function safeList(dir: string): string[] {
  try {
    return fs.readdirSync(dir);
  } catch {
    return [];
  }
}

function fileSize(p: string): number {
  try {
    return fs.statSync(p).size;
  } catch {
    return 0;
  }
}
