/**
 * Which model files this node has, by SHA-256 (SPEC section 11). Each file
 * is hashed once per (path, size, mtime) in a worker thread and the result
 * kept in `state_dir/file-hashes.json`, so a restart does not re-read 20 GB
 * and a request never waits on a hash: until a file is hashed it is simply
 * not published or served.
 *
 * A copy this node fetched and verified is recorded as such (`fetched`),
 * pinned to its inode and ctime as well: size and mtime are what anyone can
 * give another file (`cp -p`, `touch -r`), but the kernel sets the ctime of
 * every write, rename or timestamp change and a new file has a new inode, so
 * a file put in its place by hand matches no record and is fetched again.
 */
import fs from 'node:fs';
import path from 'node:path';
import { samePin } from './held.ts';
import { hashFileInWorker } from './hash-worker.ts';

export const INDEX_FILE = 'file-hashes.json';

export interface IndexedFile {
  path: string;
  size: number;
  mtimeMs: number;
  sha256: string;
  /** Written by a verified fetch of this node (record()), not by hashing the file: only such a copy stands in for an entry's missing path. */
  fetched?: true;
  /** A fetched copy's inode and ctime when it was recorded: the record vouches for that very file only. */
  ino?: number;
  ctimeMs?: number;
}

interface IndexDoc {
  version: 1;
  files: IndexedFile[];
}

export interface FileIndexOptions {
  stateDir: string;
  log?: (msg: string) => void;
  /** Hashes one file (default: a worker thread); injected by tests that count hashes. */
  hash?: (path: string, signal?: AbortSignal) => Promise<{ sha256: string; bytes: number }>;
}

export class FileIndex {
  readonly #file: string;
  readonly #log: (msg: string) => void;
  readonly #hash: NonNullable<FileIndexOptions['hash']>;
  /** By path: the last hash, valid while size and mtime match. */
  readonly #byPath = new Map<string, IndexedFile>();
  readonly #abort = new AbortController();
  #pending: Promise<void> = Promise.resolve();
  /** Records of fetched files whose bytes may not be on the disk yet: never written to state_dir. */
  readonly #unflushed = new Set<IndexedFile>();
  readonly #flushes = new Set<Promise<void>>();
  /** Files hashed by this process (for tests and the log). */
  hashed = 0;

  constructor(opts: FileIndexOptions) {
    this.#file = path.join(opts.stateDir, INDEX_FILE);
    this.#log = opts.log ?? (() => {});
    this.#hash = opts.hash ?? hashFileInWorker;
    try {
      const doc = JSON.parse(fs.readFileSync(this.#file, 'utf8')) as IndexDoc;
      for (const f of doc.files ?? []) {
        if (typeof f.path !== 'string' || !Number.isFinite(f.size) || !Number.isFinite(f.mtimeMs) || !/^[0-9a-f]{64}$/.test(f.sha256)) continue;
        // A record that says fetched but lacks its pins (a damaged index) could vouch for any file at that path: dropped.
        if (f.fetched !== undefined && (f.fetched !== true || !Number.isFinite(f.ino) || !Number.isFinite(f.ctimeMs))) continue;
        this.#byPath.set(f.path, f);
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.#log(`ignoring unreadable ${this.#file} (files will be hashed again): ${(err as Error).message}`);
    }
  }

  /** The hash of `p` if known and the file is unchanged (size and mtime; a fetched copy: also inode and ctime) since. Synchronous stat: cheap. */
  lookup(p: string): IndexedFile | undefined {
    const known = this.#byPath.get(p);
    if (!known) return undefined;
    try {
      return samePin(fs.statSync(p), known) ? known : undefined;
    } catch {
      return undefined;
    }
  }

  /** The record this node's own verified fetch wrote for `p`, while `p` is still that very file; undefined for any other file there. */
  fetchedCopy(p: string): IndexedFile | undefined {
    const known = this.lookup(p);
    return known?.fetched ? known : undefined;
  }

  /** A served file by its hash: only paths this index was asked to track, never one from a URL. */
  byHash(sha256: string): IndexedFile | undefined {
    for (const f of this.#byPath.values()) if (f.sha256 === sha256) return this.lookup(f.path);
    return undefined;
  }

  /** Every known, unchanged file. */
  list(): IndexedFile[] {
    return [...this.#byPath.keys()].map((p) => this.lookup(p)).filter((f): f is IndexedFile => f !== undefined);
  }

  /**
   * Makes sure each existing path is hashed (one at a time, in the
   * background). Resolves when these are done; a failed hash is logged and
   * the file stays unpublished.
   */
  track(paths: readonly string[]): Promise<void> {
    const run = this.#pending.then(async () => {
      for (const p of paths) {
        if (this.#abort.signal.aborted) return;
        await this.#ensure(p);
      }
    });
    this.#pending = run.catch(() => {});
    return this.#pending;
  }

  /**
   * Records a file whose hash is already known (a verified fetch), without
   * reading it again: published and served at once, kept in state_dir only
   * once `flushed` resolves (its bytes on the disk). A crash before that
   * leaves a copy no record vouches for, which is fetched again rather than
   * trusted. `st`: the verified file's own stat (fstat of the descriptor the
   * fetch hashed and renamed), so the record pins that file even if another
   * was put under its name since the rename; without it, the name's stat now.
   */
  record(p: string, sha256: string, flushed: Promise<void> = Promise.resolve(), st: Pick<fs.Stats, 'size' | 'mtimeMs' | 'ino' | 'ctimeMs'> = fs.statSync(p)): void {
    const f: IndexedFile = { path: p, size: st.size, mtimeMs: st.mtimeMs, sha256, fetched: true, ino: st.ino, ctimeMs: st.ctimeMs };
    this.#byPath.set(p, f);
    this.#unflushed.add(f);
    const done = flushed.then(
      () => {
        this.#unflushed.delete(f);
        this.#save();
      },
      (err) => this.#log(`cannot flush ${p} to the disk (${(err as Error).message}); it is used now but fetched again after a restart`),
    );
    this.#flushes.add(done);
    void done.finally(() => this.#flushes.delete(done));
  }

  async #ensure(p: string): Promise<void> {
    let st: fs.Stats;
    try {
      st = await fs.promises.stat(p);
    } catch {
      return; // not here (yet): nothing to publish
    }
    if (!st.isFile()) return;
    if (this.lookup(p)) return;
    try {
      const started = Date.now();
      const d = await this.#hash(p, this.#abort.signal);
      const after = await fs.promises.stat(p);
      // Changed while being read: the hash is of no version we can name; the next track() tries again.
      if (after.size !== st.size || after.mtimeMs !== st.mtimeMs || d.bytes !== st.size) return this.#log(`${p} changed while it was hashed; it will be hashed again`);
      this.hashed++;
      this.#byPath.set(p, { path: p, size: st.size, mtimeMs: st.mtimeMs, sha256: d.sha256 });
      this.#save();
      this.#log(`hashed ${p} (${st.size} bytes, ${Date.now() - started} ms): sha256 ${d.sha256}`);
    } catch (err) {
      if (!this.#abort.signal.aborted) this.#log(`cannot hash ${p}: ${(err as Error).message}; it is not offered to members`);
    }
  }

  #save(): void {
    try {
      fs.mkdirSync(path.dirname(this.#file), { recursive: true });
      const tmp = `${this.#file}.${process.pid}.tmp`;
      fs.writeFileSync(tmp, JSON.stringify({ version: 1, files: [...this.#byPath.values()].filter((f) => !this.#unflushed.has(f)) } satisfies IndexDoc));
      fs.renameSync(tmp, this.#file);
    } catch (err) {
      this.#log(`cannot save ${this.#file}: ${(err as Error).message}`);
    }
  }

  /** Stops hashing (a running worker is terminated); waits up to `flushMs` for fetched files to reach the disk, so their records are kept (past it: fetched again next time). */
  async stop(flushMs = 10_000): Promise<void> {
    this.#abort.abort();
    await this.#pending;
    if (this.#flushes.size === 0) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(this.#flushes), new Promise<void>((res) => (timer = setTimeout(res, flushMs)))]);
    clearTimeout(timer);
  }
}
