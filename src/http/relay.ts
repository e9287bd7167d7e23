/**
 * One upstream call (an engine on loopback, or another node), relayed to the
 * client without buffering. What happens before the first byte reaches the
 * client is reported back so the caller can retry or answer; after it, a
 * failure ends an SSE stream with an error event (or cuts a whole answer).
 *
 * Bounds after the first byte: a stream that receives nothing for
 * `streamStallMs` after its first event ends with an error event; a client
 * that reads nothing for `writeStallMs` has its request cancelled (the
 * upstream aborted, so the engine frees its slot); `quiet` lets the caller
 * end a stream whose executor went quiet.
 */
import type http from 'node:http';
import type { Readable } from 'node:stream';
import { Agent, type Dispatcher } from 'undici';
import { engineCachedTokens, usageOfBody, type EngineUsage } from './engine-usage.ts';
import { SseScanner, type SseObservation } from './sse.ts';
import { cachedTokensValue, RES_CACHED_TOKENS, RES_PASSED_ON } from './viiwork-headers.ts';

/** One keep-alive pool for every engine this node talks to. */
export const engineAgent = new Agent({
  keepAliveTimeout: 30_000,
  headersTimeout: 15 * 60_000,
  bodyTimeout: 15 * 60_000,
  connectTimeout: 5_000,
  connections: 256,
});

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'content-length']);

export interface UpstreamCall {
  origin: string;
  path: string;
  method: string;
  headers: Record<string, string>;
  body: Buffer | Readable;
  /** The client went away: abort everything. */
  signal: AbortSignal;
  dispatcher?: Dispatcher;
}

/** What the caller makes of an upstream status before anything reached the client. */
export type Verdict = 'answer' | 'refused';

export interface RelayOptions {
  /** Headers the node adds to the client's response (X-Viiwork-*). */
  responseHeaders: Record<string, string>;
  /** Drop the usage-only SSE chunk (the node asked for it, the client did not). */
  stripUsage: boolean;
  /** Keep a copy of a non-stream body (up to this many bytes) to read usage from it. */
  keepBody?: number;
  /** Whether an upstream answer is relayed or refused (default: 5xx is refused). */
  verdict?: (status: number, headers: http.IncomingHttpHeaders) => Verdict;
  /** Aborted by the caller when the upstream goes quiet (before the first byte: refused; after: an error event). */
  quiet?: AbortSignal;
  /** Say why `quiet` fired, for the error event. */
  quietReason?: () => string;
  /** After the first event of a stream, the longest silence allowed (default: none). */
  streamStallMs?: number;
  /** The longest a client may leave its answer unread (default: none). */
  writeStallMs?: number;
  /** Rewrite a 2xx answer (default: pass it through). */
  translate?: AnswerTranslator;
  /**
   * Tell the client the engine's cached-token count (X-Viiwork-Cached-Tokens):
   * a header on a whole answer (held until its end, up to `keepBody` bytes,
   * unless the upstream already sent the header), a trailer on a stream.
   */
  cachedOut?: boolean;
}

/**
 * Rewrites a successful answer on its way to the client (the Responses API
 * for a chat-only engine). Errors from the upstream pass unchanged.
 */
export interface AnswerTranslator {
  /**
   * A streamed answer: `start` before the first event, `push` per upstream chunk, `end` at its end, `error`
   * when it breaks; `keepAlive`, when set, is written whenever nothing was written for `everyMs`.
   */
  stream: { start(): string; push(chunk: Buffer): string; end(): string; error(message: string): string; keepAlive?: { everyMs: number; text: string } };
  /** A whole answer (at most `WHOLE_MAX` bytes): the client's body. */
  whole(body: Buffer): { status: number; body: Buffer };
  /** An error answer of the upstream (status ≥ 300), rewritten into the client's error shape; absent: passed unchanged. */
  failure?(status: number, body: Buffer | undefined): Buffer;
}

/** The largest whole answer a translator reads. */
export const WHOLE_MAX = 32 * 1024 * 1024;

/** At most this much of a refused answer's body is kept (its error text is shown to the client). */
export const REFUSAL_BODY_MAX = 16 * 1024;

export type RelayResult =
  | { kind: 'refused'; status?: number; detail: string; headers?: http.IncomingHttpHeaders; body?: Buffer }
  /** cachedTokens: the engine's own count (its usage, timings, or the executor's header or trailer), when it said. */
  /** `usage`: a whole answer's, when the relay parsed it (so nobody parses the body again). */
  | { kind: 'done'; status: number; firstContentAt?: number; promptTokens?: number; cachedTokens?: number; body?: Buffer; usage?: EngineUsage }
  | { kind: 'broken'; detail: string }
  | { kind: 'aborted' };

function describe(err: unknown): string {
  const e = err as { code?: string; message?: string; cause?: { code?: string; message?: string } };
  return e.cause?.code ?? e.code ?? e.cause?.message ?? e.message ?? String(err);
}

const defaultVerdict = (status: number): Verdict => (status >= 500 ? 'refused' : 'answer');

export async function relay(call: UpstreamCall, res: http.ServerResponse, opts: RelayOptions): Promise<RelayResult> {
  if (call.signal.aborted) return { kind: 'aborted' };
  // The upstream stops for the client leaving (its signal), the caller's watchdog (`quiet`), or a stall found
  // while relaying (the body is destroyed). A local run has no watchdog: its request takes the client's signal
  // as it is, with no signal made per request.
  let stalled: string | undefined;
  let body: Dispatcher.ResponseData['body'] | undefined;
  const stop = (why?: string) => {
    if (why && stalled === undefined) stalled = why;
    body?.destroy(new Error(stalled ?? 'stopped'));
  };
  const quiet = opts.quiet;
  if (!quiet) return relayInner(call, res, opts, call.signal, stop, () => stalled, (b) => (body = b));
  // One controller that either aborts (AbortSignal.any costs more per call on Node 20: it keeps weak references).
  const either = new AbortController();
  const abort = () => either.abort();
  const onQuiet = () => {
    stop(opts.quietReason?.() ?? 'the executor went quiet');
    either.abort();
  };
  if (quiet.aborted) either.abort();
  call.signal.addEventListener('abort', abort, { once: true });
  quiet.addEventListener('abort', onQuiet, { once: true });
  try {
    return await relayInner(call, res, opts, either.signal, stop, () => stalled, (b) => (body = b));
  } finally {
    call.signal.removeEventListener('abort', abort);
    quiet.removeEventListener('abort', onQuiet);
  }
}

async function relayInner(
  call: UpstreamCall,
  res: http.ServerResponse,
  opts: RelayOptions,
  signal: AbortSignal,
  stop: (why?: string) => void,
  stalled: () => string | undefined,
  started: (body: Dispatcher.ResponseData['body']) => void,
): Promise<RelayResult> {
  let upstream: Dispatcher.ResponseData;
  try {
    upstream = await (call.dispatcher ?? engineAgent).request({ origin: call.origin, path: call.path, method: call.method as 'POST', headers: call.headers, body: call.body, signal });
  } catch (err) {
    if (call.signal.aborted) return { kind: 'aborted' };
    return { kind: 'refused', detail: stalled() ?? describe(err) };
  }
  started(upstream.body);
  if (opts.quiet?.aborted) stop(opts.quietReason?.() ?? 'the executor went quiet');

  const status = upstream.statusCode;
  if ((opts.verdict ?? defaultVerdict)(status, upstream.headers) === 'refused') {
    return { kind: 'refused', status, detail: `HTTP ${status}`, headers: upstream.headers, body: await readSome(upstream.body, REFUSAL_BODY_MAX) };
  }

  const contentType = String(upstream.headers['content-type'] ?? '');
  const isSse = contentType.startsWith('text/event-stream');
  if (opts.translate && status < 300) return relayTranslated(upstream, status, isSse, res, opts, opts.translate, stop, stalled, call);
  if (opts.translate?.failure) {
    const out = opts.translate.failure(status, await readSome(upstream.body, REFUSAL_BODY_MAX));
    if (call.signal.aborted || res.destroyed) return { kind: 'aborted' };
    res.writeHead(status, { ...opts.responseHeaders, 'content-type': 'application/json', 'content-length': out.length });
    res.end(out);
    return { kind: 'done', status };
  }
  const headers: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(upstream.headers)) {
    if (v === undefined || HOP_BY_HOP.has(k) || (k.startsWith('x-viiwork-') && !RES_PASSED_ON.has(k))) continue;
    headers[k] = v;
  }
  if (!isSse && upstream.headers['content-length'] !== undefined) headers['content-length'] = String(upstream.headers['content-length']);
  Object.assign(headers, opts.responseHeaders);
  if (isSse) {
    headers['cache-control'] = 'no-cache';
    headers['x-accel-buffering'] = 'no';
  }
  // An executor's count (a forward's answer) passes on as it came; a stream's comes as a trailer.
  const upstreamCached = cachedTokensValue(upstream.headers[RES_CACHED_TOKENS]);
  if (opts.cachedOut && upstreamCached !== undefined) headers[RES_CACHED_TOKENS] = String(upstreamCached);
  const trailers = isSse && opts.cachedOut && canTrail(res);
  if (trailers) headers.trailer = RES_CACHED_TOKENS;
  // A whole answer whose count only its body tells is held to its end (up to keepBody), so the count can be a header.
  let deferred = !isSse && opts.cachedOut === true && upstreamCached === undefined && (opts.keepBody ?? 0) > 0;
  // Headers leave with the first event (one write, not two): a client learns nothing useful from them earlier.
  if (!deferred) res.writeHead(status, headers);

  const scanner = isSse ? new SseScanner(opts.stripUsage) : undefined;
  const kept: Buffer[] = [];
  let keptBytes = 0;
  const stall = stallWatch(isSse ? opts.streamStallMs : undefined, stop);
  // A whole answer is written one chunk behind, so a body that arrives in one piece leaves with the
  // headers and the end in a single write (most JSON answers); a stream is written as it comes.
  let held: Buffer | undefined;
  try {
    for await (const chunk of upstream.body) {
      const buf = chunk as Buffer;
      let out: Buffer | undefined = buf;
      if (scanner) {
        out = scanner.push(buf);
        stall.arm();
      } else {
        if (opts.keepBody && keptBytes < opts.keepBody) {
          kept.push(buf);
          keptBytes += buf.length;
        }
        if (deferred) {
          if (keptBytes < opts.keepBody!) continue;
          // Too large to hold: it goes as it comes, without the count.
          deferred = false;
          res.writeHead(status, headers);
          out = Buffer.concat(kept.slice(0, -1));
          held = buf;
        } else {
          out = held;
          held = buf;
        }
      }
      if (out && out.length && !res.write(out)) {
        const drained = await waitDrain(res, opts.writeStallMs);
        if (!drained) {
          // The client stopped reading: cancel the engine's work and free the slot.
          stop();
          res.destroy();
          return { kind: 'aborted' };
        }
      }
      if (res.destroyed) break;
    }
  } catch (err) {
    if (call.signal.aborted || res.destroyed) return { kind: 'aborted' };
    const detail = stalled() ?? describe(err);
    if (scanner) {
      const rest = scanner.flush();
      if (rest) res.write(rest);
      res.end(errorEvent(midStream(stalled(), detail)));
    } else {
      res.destroy();
    }
    return { kind: 'broken', detail };
  } finally {
    stall.clear();
  }
  if (call.signal.aborted || res.destroyed) return { kind: 'aborted' };
  if (scanner) {
    const done = doneOf(status, scanner.seen, cachedTokensValue(upstream.trailers?.[RES_CACHED_TOKENS]));
    const rest = scanner.flush();
    // The trailer goes with the stream's last bytes and its end, in one write.
    if (trailers && done.cachedTokens !== undefined) res.addTrailers({ [RES_CACHED_TOKENS]: String(done.cachedTokens) });
    res.end(rest);
    return done;
  }
  const body = kept.length ? Buffer.concat(kept) : undefined;
  // Parsed once, here: the executor's bookkeeping and score measurement read the same usage.
  const usage = upstreamCached === undefined && (opts.cachedOut || opts.keepBody) ? usageOfBody(body) : undefined;
  const cached = upstreamCached ?? (usage ? engineCachedTokens(usage) : undefined);
  if (deferred) {
    if (cached !== undefined) headers[RES_CACHED_TOKENS] = String(cached);
    res.writeHead(status, headers);
    res.end(body);
  } else res.end(held);
  return { kind: 'done', status, body, ...(usage ? { usage } : {}), ...(cached !== undefined ? { cachedTokens: cached } : {}) };
}

/** Can this response carry trailers (chunked: HTTP/1.1 and no fixed length)? */
function canTrail(res: http.ServerResponse): boolean {
  const req = res.req as http.IncomingMessage | undefined;
  return req !== undefined && (req.httpVersionMajor > 1 || (req.httpVersionMajor === 1 && req.httpVersionMinor >= 1));
}

/** A 2xx answer rewritten on its way (see AnswerTranslator); measurement still reads the upstream's own events. */
async function relayTranslated(
  upstream: Dispatcher.ResponseData,
  status: number,
  isSse: boolean,
  res: http.ServerResponse,
  opts: RelayOptions,
  tr: AnswerTranslator,
  stop: (why?: string) => void,
  stalled: () => string | undefined,
  call: UpstreamCall,
): Promise<RelayResult> {
  if (!isSse) {
    const body = await readSome(upstream.body, WHOLE_MAX);
    if (call.signal.aborted || res.destroyed) return { kind: 'aborted' };
    const out = tr.whole(body ?? Buffer.alloc(0));
    const cached = engineCachedTokens(usageOfBody(body));
    const count = opts.cachedOut && cached !== undefined ? { [RES_CACHED_TOKENS]: String(cached) } : {};
    res.writeHead(out.status, { ...opts.responseHeaders, ...count, 'content-type': 'application/json', 'content-length': out.body.length });
    res.end(out.body);
    return { kind: 'done', status: out.status, body, ...(cached !== undefined ? { cachedTokens: cached } : {}) };
  }
  res.writeHead(status, { ...opts.responseHeaders, 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' });
  res.write(tr.stream.start());
  const scanner = new SseScanner(false);
  const stall = stallWatch(opts.streamStallMs, stop);
  // While the engine is silent (a long prefill), the client's protocol may want a sign of life.
  const ka = tr.stream.keepAlive;
  let wrote = performance.now();
  const keepAlive = ka
    ? setInterval(() => {
        if (performance.now() - wrote >= ka.everyMs && !res.destroyed) {
          wrote = performance.now();
          res.write(ka.text);
        }
      }, ka.everyMs)
    : undefined;
  try {
    for await (const chunk of upstream.body) {
      const seen = scanner.push(chunk as Buffer);
      stall.arm();
      const out = seen ? tr.stream.push(seen) : '';
      if (out) wrote = performance.now();
      if (out && !res.write(out) && !(await waitDrain(res, opts.writeStallMs))) {
        stop();
        res.destroy();
        return { kind: 'aborted' };
      }
    }
  } catch (err) {
    if (call.signal.aborted || res.destroyed) return { kind: 'aborted' };
    const detail = stalled() ?? describe(err);
    res.end(tr.stream.error(midStream(stalled(), detail)));
    return { kind: 'broken', detail };
  } finally {
    stall.clear();
    clearInterval(keepAlive);
  }
  if (call.signal.aborted || res.destroyed) return { kind: 'aborted' };
  const rest = scanner.flush();
  const done = doneOf(status, scanner.seen);
  res.end((rest ? tr.stream.push(rest) : '') + tr.stream.end());
  return done;
}

/** What a client is told when its stream ends early: the stall or quiet member, else the engine's failure. */
function midStream(stalled: string | undefined, detail: string): string {
  return stalled ?? `the engine failed mid-stream: ${detail}`;
}

/** After a stream's first event, silence longer than `ms` stops the upstream (api.stream_stall); `arm` on every chunk. */
function stallWatch(ms: number | undefined, stop: (why: string) => void): { arm(): void; clear(): void } {
  let timer: NodeJS.Timeout | undefined;
  return {
    arm() {
      if (!ms) return;
      if (timer) timer.refresh();
      else timer = setTimeout(() => stop(`the stream received nothing for ${ms} ms (api.stream_stall)`), ms);
    },
    clear: () => clearTimeout(timer),
  };
}

function doneOf(status: number, seen: SseObservation, fromExecutor?: number): RelayResult & { kind: 'done' } {
  const cached = fromExecutor ?? engineCachedTokens(seen);
  return { kind: 'done', status, firstContentAt: seen.firstContentAt, promptTokens: seen.promptTokens, ...(cached !== undefined ? { cachedTokens: cached } : {}) };
}

/** An SSE `error` event in OpenAI's error shape. */
export function errorEvent(message: string, code = 'engine_failed'): string {
  return `event: error\ndata: ${JSON.stringify({ error: { message, type: 'server_error', code } })}\n\n`;
}

async function readSome(body: Dispatcher.ResponseData['body'], max: number): Promise<Buffer | undefined> {
  // A translator gets the first `max` bytes of a larger answer (and fails to parse it, which it reports).
  const parts: Buffer[] = [];
  let n = 0;
  try {
    for await (const chunk of body) {
      const b = chunk as Buffer;
      if (n < max) parts.push(b.subarray(0, max - n));
      n += b.length;
      if (n >= max) {
        body.destroy();
        break;
      }
    }
  } catch {
    // The body of a refusal is only a hint.
  }
  return parts.length ? Buffer.concat(parts) : undefined;
}

/** True once the client has room again; false when it read nothing for `timeoutMs` or went away. */
function waitDrain(res: http.ServerResponse, timeoutMs?: number): Promise<boolean> {
  return new Promise((resolve) => {
    const timer = timeoutMs ? setTimeout(() => done(false), timeoutMs) : undefined;
    const onDrain = () => done(true);
    const onClose = () => done(false);
    function done(ok: boolean) {
      clearTimeout(timer);
      res.off('drain', onDrain);
      res.off('close', onClose);
      resolve(ok);
    }
    res.on('drain', onDrain);
    res.on('close', onClose);
  });
}

/** The error text an upstream gave with a refusal: its OpenAI-shaped message, else its text, at most `max` characters. */
export function upstreamErrorText(body: Buffer | undefined, max = 1024): string | undefined {
  if (!body || body.length === 0) return undefined;
  const text = body.toString('utf8');
  let msg: string | undefined;
  try {
    const doc = JSON.parse(text) as { error?: { message?: unknown } | string; message?: unknown };
    if (typeof doc.error === 'string') msg = doc.error;
    else if (doc.error && typeof doc.error.message === 'string') msg = doc.error.message;
    else if (typeof doc.message === 'string') msg = doc.message;
  } catch {
    msg = text.trim();
  }
  if (!msg) return undefined;
  return msg.length > max ? `${msg.slice(0, max)}…` : msg;
}
