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
 *
 * The call goes through undici's handler interface (`dispatch`), a callback
 * per chunk written straight to the client: no body stream and no async
 * iteration in between, which cost a Readable, an iterator and a promise
 * per chunk on every request.
 */
import type http from 'node:http';
import type { Readable } from 'node:stream';
import { Agent, type Dispatcher } from 'undici';
import type { ChatReply } from '../chat/index.ts';
import { answerOfBody, engineCachedTokens, type EngineUsage } from './engine-usage.ts';
import type { Gone, GoneEvent } from './gone.ts';
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
  signal: Gone;
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
  quiet?: Gone;
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
  /**
   * Read the assistant's reply of a 2xx chat answer (chat/reply.ts): from a whole answer's body as it is parsed
   * for usage, from a stream's content strings. The executor records it with the prompt its engine cached.
   */
  reply?: boolean;
  /** Sees every write of a stream to the client (whole events), so a caller knows what the client holds (survive/transcript.ts). */
  tap?: (out: Buffer | string) => void;
  /**
   * A stream whose upstream fails after the client's headers (the connection reset, the engine or member gone, quiet
   * or stalled) is handed back open as `cut` instead of ended with an error event: the caller continues it (SPEC 13)
   * or ends it itself.
   */
  handBack?: boolean;
  /**
   * The client already holds this stream's headers and first events (a continuation, SPEC 13): only a 2xx stream is
   * an answer (anything else is refused, for the caller to try elsewhere or end the stream), and it is written through
   * `translate` without headers of its own.
   */
  continuing?: boolean;
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
  /** `reply`: the assistant's reply, when asked for and known. */
  | { kind: 'done'; status: number; firstContentAt?: number; promptTokens?: number; cachedTokens?: number; completionTokens?: number; body?: Buffer; usage?: EngineUsage; reply?: ChatReply }
  /** `streamed`: for a stream cut short, the events relayed from its first content on (about one token each). */
  | { kind: 'broken'; detail: string; streamed?: number }
  /** A stream broken after its headers and handed back open (`handBack`): the client's response is not ended. */
  | { kind: 'cut'; detail: string; streamed?: number }
  | { kind: 'aborted'; streamed?: number };

function describe(err: unknown): string {
  const e = err as { code?: string; message?: string; cause?: { code?: string; message?: string } };
  return e.cause?.code ?? e.code ?? e.cause?.message ?? e.message ?? String(err);
}

const defaultVerdict = (status: number): Verdict => (status >= 500 ? 'refused' : 'answer');

/**
 * What a kept-alive socket the engine closed as the request went out looks like (undici reuses an idle connection the
 * server has just given up: llama-server's cpp-httplib closes connections without a Keep-Alive hint to say when).
 */
const STALE_SOCKET = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE', 'UND_ERR_CLOSED']);

/**
 * One call to the engine, its answer relayed to `res`. A call whose connection was reset before any answer came is made
 * once more, on a new connection, when its body can be sent again: nothing reached the client, and without it one
 * stale pooled socket answered 502 and marked a healthy engine unhealthy (seen under load in the suite: the request
 * right after a stream on the same engine). A dead engine refuses the connection instead, and is not asked twice.
 */
export async function relay(call: UpstreamCall, res: http.ServerResponse, opts: RelayOptions): Promise<RelayResult> {
  const first = await relayOnce(call, res, opts);
  const again = first.kind === 'refused' && first.status === undefined && STALE_SOCKET.has(first.detail) && Buffer.isBuffer(call.body) && !call.signal.aborted && !res.headersSent && !opts.quiet?.aborted;
  return again ? relayOnce(call, res, opts) : first;
}

function relayOnce(call: UpstreamCall, res: http.ServerResponse, opts: RelayOptions): Promise<RelayResult> {
  if (call.signal.aborted) return Promise.resolve({ kind: 'aborted' });
  return new Promise((resolve) => {
    const up = new Upstream(call, res, opts, resolve);
    try {
      (call.dispatcher ?? engineAgent).dispatch({ origin: call.origin, path: call.path, method: call.method as 'POST', headers: call.headers, body: call.body }, up);
    } catch (err) {
      // Options undici refuses outright (a malformed origin): no request was made.
      up.onResponseError(undefined, err as Error);
    }
  });
}

interface DrainWait {
  onDrain: () => void;
  onClose: () => void;
  timer?: NodeJS.Timeout;
}

/** What the upstream's bytes are for, decided by its status and headers. */
type Mode =
  | { kind: 'head' }
  /** Read whole up to `max` bytes (a refusal's hint, an error to rewrite, an answer to translate), then `done`. */
  | { kind: 'collect'; max: number; parts: Buffer[]; bytes: number; done: (body: Buffer | undefined) => RelayResult }
  /** Relayed as it comes: a stream event by event, a whole answer one chunk behind. */
  | { kind: 'pass'; status: number; isSse: boolean; headers: Record<string, string | string[]>; trailers: boolean; deferred: boolean; upstreamCached?: number; scanner?: SseScanner; kept: Buffer[]; keptBytes: number; held?: Buffer }
  /** A 2xx stream rewritten on its way (AnswerTranslator). */
  | { kind: 'translate'; status: number; tr: AnswerTranslator; scanner: SseScanner };

/**
 * One upstream call through undici's handler interface: a callback per
 * chunk, no body stream and no async iteration between the engine's socket
 * and the client's. The upstream stops for the client leaving (its signal),
 * the caller's watchdog (`quiet`), a stall found while relaying, or a client
 * that stops reading; whichever comes first says why.
 */
class Upstream implements Dispatcher.DispatchHandler {
  #controller: Dispatcher.DispatchController | undefined;
  #mode: Mode = { kind: 'head' };
  #settled = false;
  #stalled: string | undefined;
  #stall: { arm(): void; clear(): void } | undefined;
  #keepAlive: NodeJS.Timeout | undefined;
  #wrote = 0;
  /** Waiting for the client to drain: the drain and close listeners and the write-stall timer. */
  #drainWait: DrainWait | undefined;

  constructor(
    private readonly call: UpstreamCall,
    private readonly res: http.ServerResponse,
    private readonly opts: RelayOptions,
    private readonly resolve: (r: RelayResult) => void,
  ) {
    call.signal.addEventListener('abort', this, { once: true });
    if (opts.quiet) {
      if (opts.quiet.aborted) this.#stalled = opts.quietReason?.() ?? 'the executor went quiet';
      else opts.quiet.addEventListener('abort', this, { once: true });
    }
  }

  /** The client's signal or the watchdog fired (an EventListener object: no closure per call). */
  handleEvent(e: GoneEvent): void {
    if (e.target === this.call.signal) this.#abort(new Error('the client went away'));
    else this.stop(this.opts.quietReason?.() ?? 'the executor went quiet');
  }

  /** Stop the upstream, saying why (the first reason stays). */
  stop(why?: string): void {
    if (why && this.#stalled === undefined) this.#stalled = why;
    this.#abort(new Error(this.#stalled ?? 'stopped'));
  }

  #abort(err: Error): void {
    if (this.#controller && !this.#controller.aborted) this.#controller.abort(err);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
    if (this.call.signal.aborted) controller.abort(new Error('the client went away'));
    else if (this.#stalled !== undefined) controller.abort(new Error(this.#stalled));
  }

  onResponseStart(_controller: Dispatcher.DispatchController, status: number, headers: http.IncomingHttpHeaders): void {
    // An informational answer (1xx) is not the answer.
    if (this.#settled || status < 200) return;
    const { opts, res } = this;
    const isSse = String(headers['content-type'] ?? '').startsWith('text/event-stream');
    if ((opts.verdict ?? defaultVerdict)(status, headers) === 'refused' || (opts.continuing && !(status < 300 && isSse && opts.translate))) {
      this.#collect(REFUSAL_BODY_MAX, (body) => ({ kind: 'refused', status, detail: `HTTP ${status}`, headers, body }));
      return;
    }
    const tr = opts.translate;
    if (tr && status < 300) {
      if (!isSse) {
        this.#collect(WHOLE_MAX, (body) => {
          if (this.#gone()) return { kind: 'aborted' };
          const out = tr.whole(body ?? Buffer.alloc(0));
          // Parsed once, here, for the count and the executor's bookkeeping alike.
          const answer = answerOfBody(body, opts.reply);
          const cached = engineCachedTokens(answer.usage);
          const count = opts.cachedOut && cached !== undefined ? { [RES_CACHED_TOKENS]: String(cached) } : {};
          res.writeHead(out.status, Object.assign({}, opts.responseHeaders, count, { 'content-type': 'application/json', 'content-length': out.body.length }));
          res.end(out.body);
          return { kind: 'done', status: out.status, body, usage: answer.usage, ...(answer.reply ? { reply: answer.reply } : {}), ...(cached !== undefined ? { cachedTokens: cached } : {}) };
        });
        return;
      }
      if (!opts.continuing) res.writeHead(status, Object.assign({}, opts.responseHeaders, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' }));
      const opening = tr.stream.start();
      if (opening) {
        opts.tap?.(opening);
        res.write(opening);
      }
      this.#mode = { kind: 'translate', status, tr, scanner: new SseScanner(false, undefined, opts.reply) };
      this.#stall = stallWatch(opts.streamStallMs, (why) => this.stop(why));
      // While the engine is silent (a long prefill), the client's protocol may want a sign of life.
      const ka = tr.stream.keepAlive;
      this.#wrote = performance.now();
      if (ka) this.#keepAlive = setInterval(() => this.#sendKeepAlive(ka), ka.everyMs);
      return;
    }
    if (tr?.failure) {
      const failure = tr.failure;
      this.#collect(REFUSAL_BODY_MAX, (body) => {
        if (this.#gone()) return { kind: 'aborted' };
        const out = failure(status, body);
        res.writeHead(status, Object.assign({}, opts.responseHeaders, { 'content-type': 'application/json', 'content-length': out.length }));
        res.end(out);
        return { kind: 'done', status };
      });
      return;
    }
    const out: Record<string, string | string[]> = {};
    for (const k in headers) {
      const v = headers[k];
      if (v === undefined || HOP_BY_HOP.has(k) || (k.startsWith('x-viiwork-') && !RES_PASSED_ON.has(k))) continue;
      out[k] = v;
    }
    if (!isSse && headers['content-length'] !== undefined) out['content-length'] = String(headers['content-length']);
    Object.assign(out, opts.responseHeaders);
    if (isSse) {
      out['cache-control'] = 'no-cache';
      out['x-accel-buffering'] = 'no';
    }
    // An executor's count (a forward's answer) passes on as it came; a stream's comes as a trailer.
    const upstreamCached = cachedTokensValue(headers[RES_CACHED_TOKENS]);
    if (opts.cachedOut && upstreamCached !== undefined) out[RES_CACHED_TOKENS] = String(upstreamCached);
    const trailers = isSse && opts.cachedOut === true && canTrail(res);
    if (trailers) out.trailer = RES_CACHED_TOKENS;
    // A whole answer whose count only its body tells is held to its end (up to keepBody), so the count can be a header.
    const deferred = !isSse && opts.cachedOut === true && upstreamCached === undefined && (opts.keepBody ?? 0) > 0;
    // Headers leave with the first event (one write, not two): a client learns nothing useful from them earlier.
    if (!deferred) res.writeHead(status, out);
    this.#mode = { kind: 'pass', status, isSse, headers: out, trailers, deferred, upstreamCached, scanner: isSse ? new SseScanner(opts.stripUsage, undefined, opts.reply === true && status < 300) : undefined, kept: [], keptBytes: 0 };
    if (isSse) this.#stall = stallWatch(opts.streamStallMs, (why) => this.stop(why));
  }

  onResponseData(controller: Dispatcher.DispatchController, buf: Buffer): void {
    if (this.#settled) return;
    const m = this.#mode;
    if (m.kind === 'collect') {
      if (m.bytes < m.max) m.parts.push(m.bytes + buf.length > m.max ? buf.subarray(0, m.max - m.bytes) : buf);
      m.bytes += buf.length;
      // A translator gets the first `max` bytes of a larger answer (and fails to parse it, which it reports).
      if (m.bytes >= m.max) this.#finishCollect(m);
      return;
    }
    if (m.kind === 'translate') {
      const seen = m.scanner.push(buf);
      this.#stall?.arm();
      const out = seen ? m.tr.stream.push(seen) : '';
      if (out) {
        this.opts.tap?.(out);
        this.#wrote = performance.now();
        this.#write(out);
      }
      return;
    }
    if (m.kind !== 'pass') return;
    const { opts } = this;
    let out: Buffer | undefined = buf;
    if (m.scanner) {
      out = m.scanner.push(buf);
      this.#stall?.arm();
    } else {
      if (opts.keepBody && m.keptBytes < opts.keepBody) {
        m.kept.push(buf);
        m.keptBytes += buf.length;
      }
      if (m.deferred) {
        if (m.keptBytes < opts.keepBody!) return;
        // Too large to hold: it goes as it comes, without the count.
        m.deferred = false;
        this.res.writeHead(m.status, m.headers);
        out = Buffer.concat(m.kept.slice(0, -1));
        m.held = buf;
      } else {
        // A whole answer is written one chunk behind, so a body that arrives in one piece leaves with the
        // headers and the end in a single write (most JSON answers); a stream is written as it comes.
        out = m.held;
        m.held = buf;
      }
    }
    if (out && out.length) {
      if (m.isSse) opts.tap?.(out);
      this.#write(out);
    } else if (this.res.destroyed) this.#cutOff();
  }

  onResponseEnd(_controller: Dispatcher.DispatchController, trailers: http.IncomingHttpHeaders): void {
    if (this.#settled) return;
    const m = this.#mode;
    if (m.kind === 'collect') return this.#finishCollect(m);
    if (this.#gone()) return this.#settle({ kind: 'aborted' });
    const { res, opts } = this;
    if (m.kind === 'translate') {
      const rest = m.scanner.flush();
      const done = doneOf(m.status, m.scanner.seen, undefined, m.scanner.reply?.reply);
      res.end((rest ? m.tr.stream.push(rest) : '') + m.tr.stream.end());
      return this.#settle(done);
    }
    if (m.kind !== 'pass') return this.#settle({ kind: 'broken', detail: 'the upstream ended before its headers' });
    if (m.scanner) {
      const done = doneOf(m.status, m.scanner.seen, cachedTokensValue(trailers?.[RES_CACHED_TOKENS]), m.scanner.reply?.reply);
      const rest = m.scanner.flush();
      // The trailer goes with the stream's last bytes and its end, in one write.
      if (m.trailers && done.cachedTokens !== undefined) res.addTrailers({ [RES_CACHED_TOKENS]: String(done.cachedTokens) });
      res.end(rest);
      return this.#settle(done);
    }
    const body = m.kept.length ? Buffer.concat(m.kept) : undefined;
    // Parsed once, here: the executor's bookkeeping and score measurement read the same usage.
    const answer = m.upstreamCached === undefined && (opts.cachedOut || opts.keepBody) ? answerOfBody(body, opts.reply === true && m.status < 300) : undefined;
    const usage = answer?.usage;
    const cached = m.upstreamCached ?? (usage ? engineCachedTokens(usage) : undefined);
    if (m.deferred) {
      if (cached !== undefined) m.headers[RES_CACHED_TOKENS] = String(cached);
      res.writeHead(m.status, m.headers);
      res.end(body);
    } else res.end(m.held);
    this.#settle({ kind: 'done', status: m.status, body, ...(usage ? { usage } : {}), ...(answer?.reply ? { reply: answer.reply } : {}), ...(cached !== undefined ? { cachedTokens: cached } : {}) });
  }

  onResponseError(_controller: Dispatcher.DispatchController | undefined, err: Error): void {
    if (this.#settled) return;
    const m = this.#mode;
    // The body of a refusal (or of an answer to translate) is only a hint: what came is what there is.
    if (m.kind === 'collect') return this.#finishCollect(m);
    if (this.call.signal.aborted) return this.#settle({ kind: 'aborted' });
    if (m.kind === 'head') return this.#settle({ kind: 'refused', detail: this.#stalled ?? describe(err) });
    if (this.res.destroyed) return this.#settle({ kind: 'aborted' });
    const detail = this.#stalled ?? describe(err);
    // What the client holds is whole events only (a partial one stays with the scanner): the caller continues from there.
    if (this.opts.handBack && (m.kind === 'translate' || (m.kind === 'pass' && m.scanner))) return this.#settle({ kind: 'cut', detail: midStream(this.#stalled, detail) });
    if (m.kind === 'translate') {
      this.res.end(m.tr.stream.error(midStream(this.#stalled, detail)));
    } else if (m.scanner) {
      const rest = m.scanner.flush();
      if (rest) this.res.write(rest);
      this.res.end(errorEvent(midStream(this.#stalled, detail)));
    } else {
      this.res.destroy();
    }
    this.#settle({ kind: 'broken', detail });
  }

  #collect(max: number, done: (body: Buffer | undefined) => RelayResult): void {
    this.#mode = { kind: 'collect', max, parts: [], bytes: 0, done };
  }

  #finishCollect(m: Mode & { kind: 'collect' }): void {
    if (m.bytes >= m.max) this.#abort(new Error('read enough'));
    this.#settle(m.done(m.parts.length ? Buffer.concat(m.parts) : undefined));
  }

  /** Write to the client; a client with no room pauses the upstream until it drains, or is cut off after writeStallMs. */
  #write(out: Buffer | string): void {
    const res = this.res;
    if (res.write(out)) {
      if (res.destroyed) this.#cutOff();
      return;
    }
    if (this.#drainWait) return;
    this.#controller?.pause();
    const w: DrainWait = {
      onDrain: () => {
        this.#endDrainWait();
        this.#controller?.resume();
      },
      onClose: () => this.#cutOff(),
    };
    if (this.opts.writeStallMs) w.timer = setTimeout(w.onClose, this.opts.writeStallMs);
    this.#drainWait = w;
    res.on('drain', w.onDrain);
    res.on('close', w.onClose);
  }

  #endDrainWait(): void {
    const w = this.#drainWait;
    if (!w) return;
    this.#drainWait = undefined;
    clearTimeout(w.timer);
    this.res.off('drain', w.onDrain);
    this.res.off('close', w.onClose);
  }

  /** The client stopped reading or went away: cancel the engine's work (its slot frees) and drop the client. */
  #cutOff(): void {
    if (this.#settled) return;
    this.#settle({ kind: 'aborted' });
    this.#abort(new Error('the client stopped reading'));
    this.res.destroy();
  }

  #sendKeepAlive(ka: { everyMs: number; text: string }): void {
    if (performance.now() - this.#wrote >= ka.everyMs && !this.res.destroyed) {
      this.#wrote = performance.now();
      this.res.write(ka.text);
    }
  }

  #gone(): boolean {
    return this.call.signal.aborted || this.res.destroyed;
  }

  #settle(r: RelayResult): void {
    if (this.#settled) return;
    this.#settled = true;
    if (r.kind === 'aborted' || r.kind === 'broken' || r.kind === 'cut') {
      const m = this.#mode;
      const streamed = m.kind === 'pass' || m.kind === 'translate' ? m.scanner?.seen.streamed : undefined;
      if (streamed !== undefined) r.streamed = streamed;
    }
    this.#stall?.clear();
    clearInterval(this.#keepAlive);
    this.#endDrainWait();
    this.call.signal.removeEventListener('abort', this);
    this.opts.quiet?.removeEventListener('abort', this);
    this.resolve(r);
  }
}

/** Can this response carry trailers (chunked: HTTP/1.1 and no fixed length)? */
function canTrail(res: http.ServerResponse): boolean {
  const req = res.req as http.IncomingMessage | undefined;
  return req !== undefined && (req.httpVersionMajor > 1 || (req.httpVersionMajor === 1 && req.httpVersionMinor >= 1));
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

function doneOf(status: number, seen: SseObservation, fromExecutor?: number, reply?: ChatReply): RelayResult & { kind: 'done' } {
  const cached = fromExecutor ?? engineCachedTokens(seen);
  return {
    kind: 'done',
    status,
    ...(reply ? { reply } : {}),
    firstContentAt: seen.firstContentAt,
    promptTokens: seen.promptTokens,
    ...(seen.completionTokens !== undefined ? { completionTokens: seen.completionTokens } : {}),
    ...(cached !== undefined ? { cachedTokens: cached } : {}),
  };
}

/** An SSE `error` event in OpenAI's error shape. */
export function errorEvent(message: string, code = 'engine_failed'): string {
  return `event: error\ndata: ${JSON.stringify({ error: { message, type: 'server_error', code } })}\n\n`;
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
