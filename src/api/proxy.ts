/**
 * One upstream call, relayed to the client without buffering: an engine on
 * loopback, or (later) another node. What happens before the first byte
 * reaches the client is reported back so the caller can retry or answer 502;
 * after that, a failure ends an SSE stream with an error event.
 */
import type http from 'node:http';
import type { Readable } from 'node:stream';
import { Agent } from 'undici';
import { SseScanner } from './sse.ts';

/** One keep-alive pool for every engine and peer this node talks to. */
export const engineAgent = new Agent({
  keepAliveTimeout: 30_000,
  headersTimeout: 15 * 60_000,
  bodyTimeout: 15 * 60_000,
  connectTimeout: 5_000,
  connections: 256,
});

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'content-length',
]);

export interface UpstreamCall {
  origin: string;
  path: string;
  method: string;
  headers: Record<string, string>;
  body: Buffer | Readable;
  signal: AbortSignal;
  dispatcher?: Agent;
}

export interface RelayOptions {
  /** Headers the node adds to the client's response (X-Viiwork-*). */
  responseHeaders: Record<string, string>;
  /** Drop the usage-only SSE chunk (the node asked for it, the client did not). */
  stripUsage: boolean;
  /** Keep a copy of a non-stream body (up to this many bytes) to read usage from it. */
  keepBody?: number;
  /** Which upstream statuses are a refusal before the first byte (default: 500 and above). */
  isRefusal?: (status: number) => boolean;
}

export type RelayResult =
  | { kind: 'refused'; status?: number; detail: string; retryAfter?: string; body?: Buffer }
  | { kind: 'done'; status: number; firstContentAt?: number; promptTokens?: number; body?: Buffer }
  | { kind: 'broken'; detail: string }
  | { kind: 'aborted' };

function describe(err: unknown): string {
  const e = err as { code?: string; message?: string; cause?: { code?: string; message?: string } };
  return e.cause?.code ?? e.code ?? e.cause?.message ?? e.message ?? String(err);
}

export async function relay(call: UpstreamCall, res: http.ServerResponse, opts: RelayOptions): Promise<RelayResult> {
  let upstream;
  try {
    upstream = await (call.dispatcher ?? engineAgent).request({
      origin: call.origin,
      path: call.path,
      method: call.method as 'POST',
      headers: call.headers,
      body: call.body,
      signal: call.signal,
    });
  } catch (err) {
    if (call.signal.aborted) return { kind: 'aborted' };
    return { kind: 'refused', detail: describe(err) };
  }

  const status = upstream.statusCode;
  if (opts.isRefusal ? opts.isRefusal(status) : status >= 500) {
    let body: Buffer | undefined;
    try {
      body = Buffer.from(await upstream.body.arrayBuffer());
    } catch {
      // The body of a refusal is only a hint.
    }
    const ra = upstream.headers['retry-after'];
    return { kind: 'refused', status, detail: `HTTP ${status}`, retryAfter: Array.isArray(ra) ? ra[0] : ra, body };
  }

  const contentType = String(upstream.headers['content-type'] ?? '');
  const isSse = contentType.startsWith('text/event-stream');
  const headers: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(upstream.headers)) {
    if (v === undefined || HOP_BY_HOP.has(k) || k.startsWith('x-viiwork-')) continue;
    headers[k] = v;
  }
  if (!isSse && upstream.headers['content-length'] !== undefined) headers['content-length'] = String(upstream.headers['content-length']);
  Object.assign(headers, opts.responseHeaders);
  if (isSse) {
    headers['cache-control'] = 'no-cache';
    headers['x-accel-buffering'] = 'no';
  }
  res.writeHead(status, headers);
  if (isSse) res.flushHeaders();

  const scanner = isSse ? new SseScanner(opts.stripUsage) : undefined;
  const kept: Buffer[] = [];
  let keptBytes = 0;
  try {
    for await (const chunk of upstream.body) {
      const buf = chunk as Buffer;
      if (scanner) {
        const out = scanner.push(buf);
        if (out && !res.write(out)) await waitDrain(res);
      } else {
        if (opts.keepBody && keptBytes < opts.keepBody) {
          kept.push(buf);
          keptBytes += buf.length;
        }
        if (!res.write(buf)) await waitDrain(res);
      }
      if (res.destroyed) break;
    }
  } catch (err) {
    if (call.signal.aborted || res.destroyed) return { kind: 'aborted' };
    const detail = describe(err);
    if (scanner) {
      const rest = scanner.flush();
      if (rest) res.write(rest);
      const event = { error: { message: `the engine failed mid-stream: ${detail}`, type: 'server_error', code: 'engine_failed' } };
      res.end(`event: error\ndata: ${JSON.stringify(event)}\n\n`);
    } else {
      res.destroy();
    }
    return { kind: 'broken', detail };
  }
  if (call.signal.aborted || res.destroyed) return { kind: 'aborted' };
  if (scanner) {
    const rest = scanner.flush();
    res.end(rest || undefined);
    return { kind: 'done', status, firstContentAt: scanner.seen.firstContentAt, promptTokens: scanner.seen.promptTokens };
  }
  res.end();
  return { kind: 'done', status, body: kept.length ? Buffer.concat(kept) : undefined };
}

function waitDrain(res: http.ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

