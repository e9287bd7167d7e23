/**
 * GET /v1/files/{sha256}: a model file this node has, for members only
 * (SPEC section 11). The URL names a hash, never a path: the file served is
 * one the hash index was given from the configuration, looked up by its
 * hash. Range (206), at most `maxTransfers` at once (then 429, marked),
 * `node.transfer_rate` shared by all transfers.
 */
import fs from 'node:fs';
import type http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { ApiError, errors } from '../http/errors.ts';
import { judgeForward } from '../forward/verify.ts';
import type { MemberTable } from '../mesh/members.ts';
import type { MeshMode } from '../security/secret.ts';
import type { IndexedFile } from './hash-index.ts';
import { parseRange } from './range.ts';
import { RateGate } from './rate.ts';

export const FILES_PREFIX = '/v1/files/';
export const MAX_TRANSFERS = 2;
const SHA256 = /^[0-9a-f]{64}$/;
/** Bytes read and sent per step; the rate gate is asked once per chunk. */
const CHUNK = 1024 * 1024;

/** Buffers per transfer, refilled in turn (one being read into while others are still going out). */
const BUFFERS = 3;

/** Resolves when `res` can take more bytes, or has closed. */
function untilDrained(res: http.ServerResponse): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

/** Under a slow transfer_rate, steps of about 1/8 s of it (at least 16 KiB): the bytes flow evenly rather than a megabyte after a long pause. */
export function chunkFor(rate: number): number {
  return rate > 0 ? Math.min(CHUNK, Math.max(16 * 1024, Math.floor(rate / 8))) : CHUNK;
}

export interface FileServerOptions {
  self: string;
  mode: MeshMode;
  members: MemberTable;
  byHash(sha256: string): IndexedFile | undefined;
  /** node.transfer_rate, bytes/s; 0 = no limit. */
  rate: number;
  maxTransfers?: number;
  now?: () => number;
  log?: (msg: string) => void;
  /** Bytes sent (for viiwork_file_transfer_bytes_total{direction="sent"}). */
  onSent?: (bytes: number) => void;
  /** A file's last byte was sent: a cache move's file (files/cache-move.ts) is removed then. */
  onServed?: (sha256: string) => void;
}

export class FileServer {
  readonly #o: FileServerOptions;
  readonly #gate: RateGate;
  /** Transfers being sent now. */
  active = 0;

  constructor(o: FileServerOptions) {
    this.#o = o;
    this.#gate = new RateGate(o.rate, o.now);
  }

  /** Answers one request whose path starts with /v1/files/; throws ApiError for the error answers. */
  async handle(req: http.IncomingMessage, res: http.ServerResponse, pathname: string): Promise<void> {
    req.resume();
    // Who asks comes first: a stranger learns nothing, not even which hashes exist.
    let from: string;
    try {
      const sender = await judgeForward(req, Buffer.alloc(0), this.#o.mode, this.#o.members, () => {}, this.#o.self);
      if (sender.kind !== 'forward') throw errors.forbiddenFiles(this.#o.mode.mode === 'secured' ? 'the request is not signed by a member' : 'the request does not come from an alive member');
      from = sender.from;
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) throw errors.forbiddenFiles(err.message.replace(/^forward rejected: /, ''));
      throw err;
    }
    const method = req.method ?? 'GET';
    if (method !== 'GET' && method !== 'HEAD') throw errors.methodNotAllowed(method, FILES_PREFIX + '{sha256}', 'GET');
    // The URL names a hash and nothing else: a query could only be a probe, or a cache key a proxy might split on.
    if ((req.url ?? '').includes('?')) throw errors.fileQuery();
    const name = pathname.startsWith(FILES_PREFIX) ? pathname.slice(FILES_PREFIX.length) : pathname;
    if (!SHA256.test(name)) throw errors.unknownFile(name);
    const file = this.#o.byHash(name);
    if (!file) throw errors.unknownFile(name);
    const max = this.#o.maxTransfers ?? MAX_TRANSFERS;
    if (this.active >= max) throw errors.transfersBusy(this.active);

    const range = parseRange(typeof req.headers.range === 'string' ? req.headers.range : undefined, file.size);
    if (range.kind === 'unsatisfiable') throw errors.badRange(file.size);
    const start = range.kind === 'part' ? range.start : 0;
    const end = range.kind === 'part' ? range.end : file.size - 1;
    const headers: Record<string, string | number> = {
      'content-type': 'application/octet-stream',
      'content-length': end - start + 1,
      'accept-ranges': 'bytes',
      etag: `"${file.sha256}"`,
    };
    if (range.kind === 'part') headers['content-range'] = `bytes ${start}-${end}/${file.size}`;
    if (method === 'HEAD') {
      res.writeHead(range.kind === 'part' ? 206 : 200, headers);
      return void res.end();
    }

    let fh: fs.promises.FileHandle;
    try {
      fh = await fs.promises.open(file.path, 'r');
    } catch {
      throw errors.unknownFile(name);
    }
    this.active++;
    const t0 = Date.now();
    let sent = 0;
    try {
      res.writeHead(range.kind === 'part' ? 206 : 200, headers);
      // A few buffers used in turn, each refilled once the socket has taken its last bytes: a 20 GB file
      // read through fresh 1 MiB buffers would make thousands of allocations for the collector to chase.
      const size = Math.min(chunkFor(this.#gate.rate), end - start + 1);
      const bufs = Array.from({ length: BUFFERS }, () => Buffer.allocUnsafe(size));
      const taken: Promise<void>[] = bufs.map(() => Promise.resolve());
      const closed = new Promise<void>((resolve) => res.once('close', resolve));
      let at = start;
      for (let k = 0; at <= end && !res.destroyed; k = (k + 1) % BUFFERS) {
        const want = Math.min(size, end - at + 1);
        const wait = this.#gate.reserve(want);
        if (wait > 0) await sleep(wait);
        await taken[k];
        const buf = bufs[k];
        const { bytesRead } = await fh.read(buf, 0, want, at);
        // The file shrank under us: end the answer short; the receiver's hash check refuses it.
        if (bytesRead === 0 || res.destroyed) break;
        at += bytesRead;
        sent += bytesRead;
        this.#o.onSent?.(bytesRead);
        let ok = true;
        const written = new Promise<void>((resolve) => {
          ok = res.write(bytesRead === buf.length ? buf : buf.subarray(0, bytesRead), () => resolve());
        });
        taken[k] = Promise.race([written, closed]);
        if (!ok) await untilDrained(res);
      }
      if (at <= end) res.destroy();
      else {
        // Every buffer handed over (their callbacks), then the answer ends; a closed socket settles them too.
        await Promise.all(taken);
        res.end();
        if (end === file.size - 1) this.#o.onServed?.(file.sha256);
      }
    } finally {
      this.active--;
      await fh.close();
      this.#o.log?.(`sent ${sent} bytes of ${file.path} (sha256 ${file.sha256.slice(0, 12)}…, bytes ${start}-${end}) to ${from} in ${Date.now() - t0} ms`);
    }
  }
}
