/**
 * Fetching a model file from members (SPEC section 11): into a temporary
 * file in models_dir, resumed with Range from the same member or another
 * when a transfer breaks, verified by SHA-256 (and the entry's `sha256`)
 * before it is renamed into place. A file that does not match is deleted and
 * logged, never renamed, so it can never be loaded. Disk space is checked
 * first: a fetch never leaves less than the reserve free.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Dispatcher } from 'undici';
import { request } from 'undici';
import { FileHasher } from './hash-worker.ts';
import { partialPath } from './paths.ts';

/** Bytes a fetch leaves free on the disk of models_dir (docs/configuration.md). */
export const DISK_RESERVE_BYTES = 1024 ** 3;
/** Attempts per source before it is given up for this fetch. */
const TRIES_PER_SOURCE = 2;
/** Bytes gathered before one write (fewer, larger writes: each is a round trip to the thread pool). */
const WRITE_BATCH = 4 * 1024 * 1024;
/** A batch not full after this long is written anyway (a slow transfer still shows progress). */
const FLUSH_AFTER_MS = 250;

export interface FetchSource {
  /** Member name (for the log and for signing). */
  name: string;
  /** Its API base URL, e.g. http://10.0.0.5:8086. */
  api: string;
}

export interface FetchProgress {
  bytes: number;
  size: number;
  from: string;
}

export interface FetchOptions {
  sha256: string;
  size: number;
  /** Where the verified file ends up. */
  dest: string;
  modelsDir: string;
  /** In the order to try them; the next is asked when one fails. */
  sources: readonly FetchSource[];
  /** Headers that make the request a member's (signed in a secured mesh). */
  headers(source: FetchSource, pathWithQuery: string): Record<string, string>;
  /** The entry's `sha256`, when given: the file must match it too. */
  expect?: string;
  reserve?: number;
  signal?: AbortSignal;
  dispatcher?: Dispatcher;
  log?: (msg: string) => void;
  onProgress?: (p: FetchProgress) => void;
  /** Bytes received (metrics). */
  onBytes?: (n: number) => void;
  /** Free bytes on the disk holding `dir` (injected by tests). */
  freeBytes?: (dir: string) => Promise<number>;
}

export class FetchError extends Error {
  constructor(
    message: string,
    readonly code: 'no_source' | 'no_space' | 'corrupt' | 'cancelled' | 'mismatch',
  ) {
    super(message);
    this.name = 'FetchError';
  }
}

export interface FetchResult {
  path: string;
  sha256: string;
  /** Members the bytes came from, in order. */
  from: string[];
  /** Bytes that were already in a partial file from an earlier run. */
  resumed: number;
  /**
   * Resolves when the file's bytes are on the disk (fdatasync, begun after
   * the rename). The file is usable before: its bytes are verified and in
   * the page cache; only a crash before this could lose them, so a record
   * that trusts the copy across restarts waits for it.
   */
  flushed: Promise<void>;
  /**
   * A read descriptor of the verified file, opened before its rename, and its
   * stat after: what was hashed, whatever is put under `path` since. The
   * caller owns it (files/held.ts keeps it for the engines; else close it).
   */
  fd: number;
  stat: fs.Stats;
}

async function statfsFree(dir: string): Promise<number> {
  const s = await fs.promises.statfs(dir);
  return Number(s.bavail) * Number(s.bsize);
}

const ZEROS = Buffer.alloc(64 * 1024);

/** Whether every byte of `bufs` is zero (memcmp in 64 KiB steps; real data differs within a few bytes). */
export function allZero(bufs: readonly Buffer[]): boolean {
  for (const b of bufs) {
    for (let at = 0; at < b.length; at += ZEROS.length) {
      const n = Math.min(ZEROS.length, b.length - at);
      if (!b.subarray(at, at + n).equals(n === ZEROS.length ? ZEROS : ZEROS.subarray(0, n))) return false;
    }
  }
  return true;
}

/**
 * Fetches writing one partial file, in the order they asked. Two pulls of one file at once (a drain's hand-off and a
 * turn's own cache move, or two loads) would both write `.<sha>.part` and corrupt it; the second waits, then resumes or
 * starts afresh from what the first left.
 */
const writing = new Map<string, Promise<unknown>>();

export async function fetchFile(o: FetchOptions): Promise<FetchResult> {
  const part = partialPath(o.modelsDir, o.sha256.toLowerCase());
  const before = writing.get(part);
  const mine = (before ? before.catch(() => undefined) : Promise.resolve()).then(() => fetchAlone(o));
  const settled = mine.catch(() => undefined);
  writing.set(part, settled);
  void settled.then(() => {
    if (writing.get(part) === settled) writing.delete(part);
  });
  return mine;
}

async function fetchAlone(o: FetchOptions): Promise<FetchResult> {
  const log = o.log ?? (() => {});
  const want = o.sha256.toLowerCase();
  if (o.expect && o.expect.toLowerCase() !== want) {
    throw new FetchError(`members offer sha256 ${want}, but the entry's sha256 is ${o.expect}: fix the entry's sha256 or the file on the members`, 'mismatch');
  }
  await fs.promises.mkdir(o.modelsDir, { recursive: true });
  const part = partialPath(o.modelsDir, want);
  let bad = new Set<string>();
  for (let round = 0; round < 2; round++) {
    const sources = o.sources.filter((s) => !bad.has(s.name));
    if (sources.length === 0) break;
    const r = await fetchOnce(o, want, part, sources, log);
    if (r.ok) return r.result;
    // A corrupt file: every member whose bytes are in it is suspect; try once more from the others.
    log(`discarded ${part}: ${r.why}; bytes came from ${r.from.join(', ')}`);
    bad = new Set([...bad, ...r.from]);
  }
  throw new FetchError(`no member served ${want} intact (tried ${o.sources.map((s) => s.name).join(', ') || 'none'})`, 'corrupt');
}

type Once = { ok: true; result: FetchResult } | { ok: false; why: string; from: string[] };

async function fetchOnce(o: FetchOptions, want: string, part: string, sources: readonly FetchSource[], log: (m: string) => void): Promise<Once> {
  let have = 0;
  try {
    have = (await fs.promises.stat(part)).size;
  } catch {
    have = 0;
  }
  if (have > o.size) {
    await fs.promises.rm(part, { force: true });
    have = 0;
  }
  const resumed = have;
  if (have > 0) log(`resuming ${path.basename(o.dest)} at ${have} of ${o.size} bytes from ${part}`);
  const free = await (o.freeBytes ?? statfsFree)(o.modelsDir);
  const reserve = o.reserve ?? DISK_RESERVE_BYTES;
  if (o.size - have > free - reserve) {
    throw new FetchError(
      `not enough disk space in ${o.modelsDir} for ${path.basename(o.dest)}: it needs ${o.size - have} more bytes, ${free} are free and ${reserve} stay in reserve; free some space or point node.models_dir at a larger disk`,
      'no_space',
    );
  }
  const fh = await fs.promises.open(part, have > 0 ? 'r+' : 'w');
  let written: fs.Stats | undefined;
  // The hash follows the temporary file in a worker, a batch behind the writes (and over a resumed prefix first).
  const hasher = new FileHasher(part, o.signal);
  hasher.upTo(have);
  const from: string[] = [];
  const started = Date.now();
  const tries = new Map<string, number>();
  let i = 0;
  try {
    while (have < o.size) {
      if (o.signal?.aborted) throw new FetchError('fetch cancelled: the node is stopping (the partial file is kept for a resume)', 'cancelled');
      const usable = sources.filter((s) => (tries.get(s.name) ?? 0) < TRIES_PER_SOURCE);
      if (usable.length === 0) throw new FetchError(`could not fetch ${want} from ${sources.map((s) => s.name).join(', ')}: ${have} of ${o.size} bytes kept in ${part}`, 'no_source');
      const src = usable[i++ % usable.length];
      tries.set(src.name, (tries.get(src.name) ?? 0) + 1);
      const before = have;
      try {
        have = await pull(o, fh, hasher, src, want, have);
      } catch (err) {
        if (o.signal?.aborted) throw new FetchError('fetch cancelled: the node is stopping (the partial file is kept for a resume)', 'cancelled');
        log(`fetching ${want.slice(0, 12)}… from ${src.name} stopped at ${have} of ${o.size} bytes: ${(err as Error).message}; resuming from another member`);
        have = (err as { have?: number }).have ?? have;
      }
      if (have > before && from.at(-1) !== src.name) from.push(src.name);
    }
  } catch (err) {
    hasher.close();
    throw err;
  } finally {
    written = await fh.stat().catch(() => undefined);
    await fh.close();
  }
  const got = (await hasher.digest()).sha256;
  // The verified file is held by a descriptor from here on: the rename moves it, and the record and the
  // engines take that very file, not whatever the name holds by then (issue 44 item 6).
  const fd = got === want ? fs.openSync(part, 'r') : undefined;
  if (fd === undefined || fs.fstatSync(fd).ino !== written?.ino) {
    if (fd !== undefined) fs.closeSync(fd);
    await fs.promises.rm(part, { force: true });
    const why = fd === undefined ? `its SHA-256 is ${got}, not ${want}` : `another file took its name before it was renamed into place`;
    return { ok: false, why, from: from.length ? from : sources.map((s) => s.name) };
  }
  try {
    await fs.promises.mkdir(path.dirname(o.dest), { recursive: true });
    await fs.promises.rename(part, o.dest);
  } catch (err) {
    fs.closeSync(fd);
    throw err;
  }
  const stat = fs.fstatSync(fd);
  const flushed = flushToDisk(fd);
  flushed.catch(() => {}); // a caller that keeps no record need not wait for it: never an unhandled rejection
  const secs = Math.max(0.001, (Date.now() - started) / 1000);
  log(`fetched ${o.dest} (${o.size} bytes, sha256 verified) from ${from.join(', ')} in ${secs.toFixed(1)} s (${((o.size - resumed) / 1024 ** 2 / secs).toFixed(0)} MiB/s)`);
  return { ok: true, result: { path: o.dest, sha256: got, from, resumed, flushed, fd, stat } };
}

/**
 * fdatasync of the verified file (by its descriptor, not its name), behind
 * the fetch: waiting for it first would bound a fetch by the disk's
 * sustained write rate (a 2 GiB file ≈ 9 s on a 240 MB/s disk) where the
 * page cache takes the bytes at the network's rate.
 */
function flushToDisk(fd: number): Promise<void> {
  return new Promise((resolve, reject) => fs.fdatasync(fd, (err) => (err ? reject(err) : resolve())));
}

/** One request from `have` on; returns the new offset, or throws with `have` set to what was written. */
async function pull(o: FetchOptions, fh: fs.promises.FileHandle, hasher: FileHasher, src: FetchSource, want: string, have: number): Promise<number> {
  const p = `/v1/files/${want}`;
  const headers: Record<string, string> = { ...o.headers(src, p) };
  if (have > 0) headers.range = `bytes=${have}-`;
  const r = await request(`${src.api}${p}`, { method: 'GET', headers, signal: o.signal, dispatcher: o.dispatcher, headersTimeout: 30_000, bodyTimeout: 30_000 });
  const expected = have > 0 ? 206 : 200;
  if (r.statusCode !== expected) {
    const text = (await r.body.text().catch(() => '')).slice(0, 300);
    throw new Error(`HTTP ${r.statusCode}${text ? `: ${text}` : ''}`);
  }
  const total = have > 0 ? Number(/\/(\d+)$/.exec(String(r.headers['content-range'] ?? ''))?.[1]) : Number(r.headers['content-length']);
  if (total !== o.size) {
    r.body.destroy();
    throw new Error(`the member offers ${total} bytes, the capacity report said ${o.size}`);
  }
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let flushedAt = Date.now();
  // One batch is written while the next arrives: the socket is read on while the disk works.
  // `have` moves only when a write has ended, in order, so it is always what the file holds.
  let next = have;
  let writing: Promise<void> = Promise.resolve();
  let writeError: unknown;
  const settled = async () => {
    await writing;
    if (writeError !== undefined) throw writeError;
  };
  const write = async (bufs: Buffer[], at: number, n: number) => {
    if (allZero(bufs)) {
      // A run of zeros (a sparse file's hole) stays a hole here too: the file grows without the write.
      await fh.truncate(at + n);
    } else {
      // writev: the chunks as they came, no copy into one buffer.
      const { bytesWritten } = await fh.writev(bufs, at);
      if (bytesWritten !== n) throw new Error(`short write to the temporary file (${bytesWritten} of ${n} bytes); is the disk full?`);
    }
    have = at + n;
    hasher.upTo(have);
    o.onBytes?.(n);
    o.onProgress?.({ bytes: have, size: o.size, from: src.name });
  };
  const flush = async () => {
    flushedAt = Date.now();
    if (pendingBytes === 0) return;
    await settled();
    const bufs = pending;
    const n = pendingBytes;
    const at = next;
    pending = [];
    pendingBytes = 0;
    next += n;
    writing = write(bufs, at, n).catch((err) => {
      writeError = err;
    });
  };
  try {
    for await (const chunk of r.body) {
      const c = chunk as Buffer;
      if (next + pendingBytes + c.length > o.size) throw new Error('the member sent more bytes than the file has');
      pending.push(c);
      pendingBytes += c.length;
      // A full batch, or a slow sender's bytes after a while: progress (and what a resume keeps) moves on either way.
      if (pendingBytes >= WRITE_BATCH || Date.now() - flushedAt >= FLUSH_AFTER_MS) await flush();
    }
    await flush();
    await settled();
  } catch (err) {
    // What arrived intact before the break is kept: the next request resumes after it.
    try {
      await flush();
      await settled();
    } catch {
      // the disk failed too: the next attempt starts where the file really ends
    }
    throw Object.assign(err as Error, { have });
  }
  return have;
}
