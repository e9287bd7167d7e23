/**
 * Which copy of a model entry's file this node may use, and getting one
 * when it has none (SPEC section 11). An entry loads from its `path` where
 * that exists; else from the copy this node's own verified fetch left in
 * node.models_dir (the hash index's record vouches for that very file, see
 * hash-index.ts), matching the entry's `sha256`; else from a member whose
 * report publishes the model's file: fetched, verified, recorded, then
 * used. A file found in models_dir with no such record (put there by hand,
 * or cut by a crash) is never used: it is fetched over.
 *
 * `always` entries whose file is not here wait for it at start: they are
 * asked to load (which fetches first) every 2 s once a member publishes the
 * file, until they are loaded.
 */
import fs from 'node:fs';
import type { Dispatcher } from 'undici';
import type { FetchProgress, ModelFile } from '../capacity/report.ts';
import type { PeerReport } from '../capacity/poller.ts';
import type { ModelConfig } from '../config/schema.ts';
import type { LoadAnswer, LoadReason } from '../lifecycle/lifecycle.ts';
import type { Metrics } from '../metrics/metrics.ts';
import type { MemberInfo } from '../mesh/members.ts';
import { fetchFile, type FetchSource } from './fetch.ts';
import type { FileIndex } from './hash-index.ts';
import { HeldCopies } from './held.ts';
import { fetchedPath } from './paths.ts';
import { offerFor, type PeerFiles } from './sources.ts';

/** How often an always entry waiting for its file is asked to load again (the mesh is still forming at start). */
const ALWAYS_RETRY_MS = 2000;

/** What the model-file policy reads of the node, and what it drives. */
export interface ModelFilePorts {
  /** node.models_dir: where fetched copies go. */
  readonly modelsDir: string;
  /** The model entries now (a reload changes them). */
  models(): readonly ModelConfig[];
  /** The config can find no member by itself (config/schema.ts findsNoMembers): an always entry's file could never come. */
  findsNoMembers(): boolean;
  /** The hashes of this node's files, and the records of its verified fetches. */
  readonly index: Pick<FileIndex, 'lookup' | 'fetchedCopy' | 'record'>;
  /** The member table's peers, and each one's last capacity report. */
  members(): readonly Pick<MemberInfo, 'name' | 'api' | 'state'>[];
  reportOf(name: string): PeerReport | undefined;
  /** This node's lifecycle: an always entry waiting for its file is asked to load (which fetches it first). */
  load(model: string, reason: LoadReason, detail: string): LoadAnswer;
  /** Headers that make a file request a member's (signed in a secured mesh). */
  headers(source: FetchSource, pathWithQuery: string): Record<string, string>;
  /** Connections to members' APIs (made once the advertise address is known). */
  dispatcher(): Dispatcher;
  /** Aborted when the node stops: a fetch in flight ends, keeping its partial file. */
  readonly stopping: AbortSignal;
  log(msg: string): void;
  readonly metrics: Pick<Metrics, 'fileTransfers' | 'fileTransferBytes'>;
  /** A monotonic clock, ms (performance.now by default): paces the always entries' asks. */
  monotonic?(): number;
}

type Entry = ModelConfig;

export class ModelFilePolicy {
  /** Fetches of model files in progress here, by model: bytes done of size (published in /v1/capacity). */
  readonly #progress = new Map<string, FetchProgress>();
  /** Always entries whose file is fetched from a member before they load: asked to load until they are. */
  readonly #fetchAtStart = new Set<string>();
  #askedAt = 0;
  /** Fetches started, to spread them over the members that have the file. */
  #fetches = 0;
  readonly #monotonic: () => number;
  /** Verified copies held open: an engine loads the file that was verified, never one put under its name since (held.ts). */
  readonly #held = new HeldCopies();

  constructor(private readonly p: ModelFilePorts) {
    this.#monotonic = p.monotonic ?? (() => performance.now());
  }

  /**
   * The entry as it loads from a file on this machine: its `path` where that
   * exists (or it names none), else the copy this node's verified fetch left
   * in models_dir (matching the entry's `sha256`), as the path of the
   * descriptor this node holds on that very file (held.ts): a file put under
   * the copy's name after this check is not what the engine opens.
   * undefined: the file is not here.
   */
  here(m: Entry): Entry | undefined {
    if (!('path' in m) || fs.existsSync(m.path)) return m;
    const local = fetchedPath(this.p.modelsDir, m.path);
    const known = this.p.index.fetchedCopy(local);
    if (!known || (m.sha256 && known.sha256 !== m.sha256)) return undefined;
    const load = this.#held.open(local, known);
    return load ? { ...m, path: load } : undefined;
  }

  /** Closes the verified copies held open: once the node's engines are stopped (none may be started on them again). */
  close(): void {
    this.#held.close();
  }

  /** An always entry's file: here, or to be fetched from a member before it loads. */
  alwaysFile(m: Entry): { kind: 'here'; entry: Entry } | { kind: 'fetch' } {
    const here = this.here(m);
    if (here) return { kind: 'here', entry: here };
    // A node that finds no members (preflight refuses its missing file) starts the engine on the path as given.
    return 'path' in m && m.fetch === 'mesh' && !this.p.findsNoMembers() ? { kind: 'fetch' } : { kind: 'here', entry: m };
  }

  /**
   * The entry with the file its memory is measured from: a file in
   * models_dir stands in for a missing `path` (its header only sizes the
   * load; whether it may be loaded is `here`'s decision).
   */
  measured(m: Entry): Entry {
    const local = 'path' in m && !fs.existsSync(m.path) ? fetchedPath(this.p.modelsDir, m.path) : undefined;
    return local && fs.existsSync(local) ? ({ ...m, path: local } as Entry) : m;
  }

  /** An always entry waits for its file: `loadWaiting` asks it to load until it is. */
  awaitFile(model: string): void {
    this.#fetchAtStart.add(model);
  }

  /**
   * Always entries waiting for their file: asked to load every 2 s once a
   * member publishes it, until loaded. A failed fetch (the member went away,
   * a corrupt copy) is simply asked again.
   */
  loadWaiting(): void {
    if (this.#fetchAtStart.size === 0 || this.#monotonic() - this.#askedAt < ALWAYS_RETRY_MS) return;
    this.#askedAt = this.#monotonic();
    for (const model of this.#fetchAtStart) {
      const entry = this.p.models().find((m) => m.name === model && m.load === 'always' && 'path' in m);
      if (!entry) {
        this.#fetchAtStart.delete(model);
        continue;
      }
      if (!offerFor(model, this.#peers(), 'sha256' in entry ? entry.sha256 : '')) continue;
      const a = this.p.load(model, 'start', 'load: always, its file fetched from a member first');
      if (a.kind === 'loaded') this.#fetchAtStart.delete(model);
    }
  }

  /** The model's file here, once hashed: at its `path`, or a copy this node fetched into models_dir. */
  fileOf(model: string): ModelFile | undefined {
    for (const entry of this.p.models()) {
      if (entry.name !== model || !('path' in entry)) continue;
      const f = this.p.index.lookup(entry.path) ?? this.p.index.fetchedCopy(fetchedPath(this.p.modelsDir, entry.path));
      if (f) return f;
    }
    return undefined;
  }

  /**
   * Does this node publish the model's file? undefined when no entry of it
   * names a file (sim and openai engines have none: "not here" would be
   * untrue of them); else whether its file is here and hashed (fileOf).
   */
  hasFile(model: string): boolean | undefined {
    if (!this.p.models().some((m) => m.name === model && 'path' in m)) return undefined;
    return this.fileOf(model) !== undefined;
  }

  /** The fetch of the model's file in progress here, if any. */
  fetchOf(model: string): FetchProgress | undefined {
    return this.#progress.get(model);
  }

  /**
   * The entry as it is to be loaded (the lifecycle's `prepare`): `here`, else
   * fetched from a member whose report publishes the model's file, verified,
   * recorded, then used. `fetching` is called when a fetch begins.
   */
  async prepare(entry: Entry, fetching: () => void): Promise<Entry> {
    const here = this.here(entry);
    if (here || !('path' in entry)) return here ?? entry;
    const p = this.p;
    const local = fetchedPath(p.modelsDir, entry.path);
    if (entry.fetch === 'never') throw new Error(`${entry.path} does not exist here and ${entry.name} has fetch: never; copy the file there or set fetch: mesh`);
    const offer = offerFor(entry.name, this.#peers(), entry.sha256, this.#fetches++);
    if (!offer) throw new Error(`${entry.path} does not exist here and no member publishes a file for ${entry.name}${entry.sha256 ? ` with sha256 ${entry.sha256}` : ''}; download it once to any member`);
    fetching();
    p.log(`fetching ${entry.name}: ${offer.size} bytes (sha256 ${offer.sha256}) from ${offer.sources.map((s) => s.name).join(', ')} into ${local}`);
    let shown = 0;
    const progress = { bytes: 0, size: offer.size };
    this.#progress.set(entry.name, progress);
    p.metrics.fileTransfers.inc({ direction: 'fetching' });
    try {
      const r = await fetchFile({
        sha256: offer.sha256,
        size: offer.size,
        dest: local,
        modelsDir: p.modelsDir,
        sources: offer.sources,
        expect: entry.sha256 || undefined,
        headers: (s, path) => p.headers(s, path),
        signal: p.stopping,
        dispatcher: p.dispatcher(),
        log: (msg) => p.log(msg),
        onBytes: (n) => p.metrics.fileTransferBytes.inc({ direction: 'received' }, n),
        onProgress: (f) => {
          progress.bytes = Math.min(f.bytes, f.size);
          const tenth = Math.floor((10 * f.bytes) / Math.max(1, f.size));
          if (tenth > shown) {
            shown = tenth;
            p.log(`fetching ${entry.name}: ${tenth * 10}% (${f.bytes} of ${f.size} bytes, from ${f.from})`);
          }
        },
      });
      // The record and the engine take the file that was hashed (its descriptor), whatever the name holds by now.
      p.index.record(r.path, r.sha256, r.flushed, r.stat);
      const load = this.#held.adopt(r.path, r.fd, r.stat);
      if (load !== r.path) p.log(`${entry.name} loads ${r.path} as verified, through ${load} (a file put under that name later is not loaded)`);
      return { ...entry, path: load };
    } finally {
      if (this.#progress.get(entry.name) === progress) this.#progress.delete(entry.name);
      p.metrics.fileTransfers.dec({ direction: 'fetching' });
    }
  }

  /** Alive members with a capacity report: whose published files a fetch may come from. */
  #peers(): PeerFiles[] {
    return this.p.members().flatMap((m) => {
      const r = this.p.reportOf(m.name);
      return m.state === 'alive' && r ? [{ name: m.name, api: m.api, models: r.report.models }] : [];
    });
  }
}
