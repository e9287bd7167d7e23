/**
 * A request body's Content-Encoding (RFC 9110 §8.4): gzip (x-gzip) and
 * deflate are decoded, each step bounded by `api.max_body` (a small body
 * that inflates past it is 413, the decompression stopped there); identity
 * is nothing; any other coding is 415, and a body that is not what its
 * coding says is 400. Decoding runs on libuv's thread pool, off the event
 * loop.
 */
import type http from 'node:http';
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import { errors } from './errors.ts';

const gunzip = promisify(zlib.gunzip);
const inflate = promisify(zlib.inflate);
const inflateRaw = promisify(zlib.inflateRaw);

type Coding = 'gzip' | 'deflate';

/** More codings than this on one body is not a client, it is a probe. */
const MAX_CODINGS = 4;

/** The codings to undo, in the order they were applied; identity left out. Throws 415 for one not supported. */
export function codingsOf(header: string | string[] | undefined): Coding[] {
  if (header === undefined) return [];
  const list = (Array.isArray(header) ? header.join(',') : header).split(',').map((c) => c.trim().toLowerCase()).filter((c) => c !== '' && c !== 'identity');
  if (list.length > MAX_CODINGS) throw errors.unsupportedEncoding(list.join(', '));
  return list.map((c) => {
    if (c === 'gzip' || c === 'x-gzip') return 'gzip';
    if (c === 'deflate') return 'deflate';
    throw errors.unsupportedEncoding(c);
  });
}

/** The body as its sender meant it: every coding of its Content-Encoding undone, last applied first. */
export async function decodeBody(req: http.IncomingMessage, body: Buffer, limit: number): Promise<Buffer> {
  const codings = codingsOf(req.headers['content-encoding']);
  let out = body;
  for (let i = codings.length - 1; i >= 0; i--) out = await decodeOne(codings[i], out, limit);
  return out;
}

async function decodeOne(coding: Coding, body: Buffer, limit: number): Promise<Buffer> {
  const opts = { maxOutputLength: limit };
  try {
    if (coding === 'gzip') return await gunzip(body, opts);
    try {
      return await inflate(body, opts);
    } catch (err) {
      // "deflate" means the zlib format, but some clients send a raw deflate stream under that name.
      if ((err as NodeJS.ErrnoException).code !== 'Z_DATA_ERROR') throw err;
      return await inflateRaw(body, opts);
    }
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (e.code === 'ERR_BUFFER_TOO_LARGE' || e instanceof RangeError) throw errors.tooLarge(limit, true);
    throw errors.badEncoding(coding, e.message);
  }
}
