/**
 * The HTTP face of the embedded engine: an OpenAI-compatible subset on
 * loopback over a model loaded by node-llama-cpp. `POST /v1/chat/completions`
 * and `POST /v1/completions` (whole answers with llama-server's `timings`, or
 * SSE chunks ending in `data: [DONE]`), `POST /v1/embeddings` (float or
 * base64), `GET /health`, `GET /v1/models`. One context sequence per request,
 * taken from a pool of `parallel` of them; a client that goes away aborts
 * the generation and gives its sequence back.
 */
import http from 'node:http';
import type { ChatWrapper, LlamaChatResponse, LlamaContextSequence, LlamaEmbeddingContext, LlamaModel, ChatHistoryItem, Token } from 'node-llama-cpp';

export const EMBEDDED_FINGERPRINT = 'viiwork-embedded';
/** llama-server's default temperature, used when a request names none. */
const DEFAULT_TEMPERATURE = 0.8;

/** What the server needs of the loaded model; the backend owns their lifetimes. */
export interface EmbeddedRuntime {
  readonly modelName: string;
  readonly model: LlamaModel;
  /** Sequences for generation (undefined when neither chat nor completion is served). */
  readonly pool: SequencePool | undefined;
  /** Tokens per sequence. */
  readonly contextSize: number;
  /** Workloads served now (the backend's descriptor). */
  workloads(): readonly string[];
  /** The embedding context, created on first use. */
  embeddingContext(): Promise<LlamaEmbeddingContext>;
  /** node-llama-cpp's classes, from the dynamic import. */
  readonly lib: typeof import('node-llama-cpp');
  /** The chat wrapper for the model's template, resolved once (resolving it per request costs ~0.5 s). */
  readonly chatWrapper: ChatWrapper;
}

/**
 * A pool of context sequences, one per slot. The sequence freed last is
 * handed out first, so a client that comes back soon finds its prefix still
 * evaluated there; waiters are served in arrival order.
 */
export class SequencePool {
  #free: LlamaContextSequence[];
  #waiters: Array<(s: LlamaContextSequence) => void> = [];
  constructor(sequences: LlamaContextSequence[]) {
    this.#free = [...sequences];
  }
  get free(): number {
    return this.#free.length;
  }
  /** A free sequence, waiting in arrival order when none is; rejects when `signal` aborts first. */
  acquire(signal: AbortSignal): Promise<LlamaContextSequence> {
    const s = this.#free.pop();
    if (s) return Promise.resolve(s);
    return new Promise((resolve, reject) => {
      const waiter = (seq: LlamaContextSequence) => {
        signal.removeEventListener('abort', onAbort);
        resolve(seq);
      };
      const onAbort = () => {
        this.#waiters.splice(this.#waiters.indexOf(waiter), 1);
        reject(new Error('aborted while waiting for a sequence'));
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.#waiters.push(waiter);
    });
  }
  release(s: LlamaContextSequence): void {
    const w = this.#waiters.shift();
    if (w) w(s);
    else this.#free.push(s);
  }
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code: string | null = null,
  ) {
    super(message);
  }
}

function sendJson(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function sendError(res: http.ServerResponse, status: number, message: string, code: string | null = null): void {
  sendJson(res, status, { error: { message, type: status >= 500 ? 'server_error' : 'invalid_request_error', code } });
}

function isAbort(err: unknown): boolean {
  return (err as { name?: string })?.name === 'AbortError' || /abort/i.test(String((err as Error)?.message));
}

/** OpenAI message content (a string or text parts) as plain text; any other part is the client's 400 (this engine reads text only). */
function textOnlyContent(content: unknown): string {
  if (content == null) return '';
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((p: { type?: string; text?: unknown }) => {
        if (p?.type === 'text' && typeof p.text === 'string') return p.text;
        throw new HttpError(400, `the embedded engine takes text only; got a content part of type ${String(p?.type)}`);
      })
      .join('');
  }
  throw new HttpError(400, 'message content must be a string or an array of text parts');
}

/** OpenAI messages → node-llama-cpp chat history. */
export function toChatHistory(messages: unknown): ChatHistoryItem[] {
  if (!Array.isArray(messages) || messages.length === 0) throw new HttpError(400, "'messages' must be a non-empty array");
  return messages.map((m: { role?: unknown; content?: unknown }): ChatHistoryItem => {
    const text = textOnlyContent(m?.content);
    switch (m?.role) {
      case 'system':
      case 'developer':
        return { type: 'system', text };
      case 'user':
        return { type: 'user', text };
      case 'assistant':
        return { type: 'model', response: [text] };
      default:
        throw new HttpError(400, `unsupported message role ${JSON.stringify(m?.role)}`);
    }
  });
}

interface Sampling {
  maxTokens: number;
  temperature: number;
  topP?: number;
  topK?: number;
  seed?: number;
  stop: string[];
}

function num(v: unknown, name: string): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new HttpError(400, `'${name}' must be a number`);
  return v;
}

function sampling(body: Record<string, unknown>, contextSize: number): Sampling {
  const asked = num(body.max_tokens, 'max_tokens') ?? num(body.max_completion_tokens, 'max_completion_tokens');
  if (num(body.n, 'n') !== undefined && body.n !== 1) throw new HttpError(400, "the embedded engine answers with one choice ('n' must be 1)");
  const stop = body.stop === undefined || body.stop === null ? [] : Array.isArray(body.stop) ? body.stop.map(String) : [String(body.stop)];
  return {
    // Like llama-server: without max_tokens, generate until the end of text or a full slot.
    maxTokens: Math.max(1, Math.min(asked ?? contextSize, contextSize)),
    temperature: num(body.temperature, 'temperature') ?? DEFAULT_TEMPERATURE,
    topP: num(body.top_p, 'top_p'),
    topK: num(body.top_k, 'top_k'),
    seed: num(body.seed, 'seed'),
    stop,
  };
}

/** Read the request body (the node bounds its size before it gets here). */
async function readJson(req: http.IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const raw = Buffer.concat(chunks);
  if (raw.length === 0) return {};
  try {
    const v = JSON.parse(raw.toString('utf8'));
    if (v && typeof v === 'object' && !Array.isArray(v)) return v;
  } catch {
    // fall through
  }
  throw new HttpError(400, 'the body must be a JSON object');
}

/** Counts of generations by how they ended, for dashboards and tests. */
export interface GenerationStats {
  completed: number;
  /** Ended early because the client went away or the backend stopped. */
  aborted: number;
  failed: number;
}

export class EmbeddedServer {
  #nextId = 0;
  readonly stats: GenerationStats = { completed: 0, aborted: 0, failed: 0 };
  constructor(readonly rt: EmbeddedRuntime) {}

  /** The request listener for node:http. `stopping` aborts every request in flight. */
  handler(stopping: AbortSignal): http.RequestListener {
    return (req, res) => {
      const abort = new AbortController();
      const onStop = () => abort.abort();
      stopping.addEventListener('abort', onStop, { once: true });
      res.on('close', () => {
        stopping.removeEventListener('abort', onStop);
        abort.abort();
      });
      this.#handle(req, res, abort.signal).catch((err: unknown) => {
        if (res.headersSent) return void res.end();
        if (err instanceof HttpError) return sendError(res, err.status, err.message, err.code);
        if (abort.signal.aborted) return void res.destroy();
        sendError(res, 500, `the embedded engine failed: ${(err as Error)?.message ?? String(err)}`);
      });
    };
  }

  async #handle(req: http.IncomingMessage, res: http.ServerResponse, signal: AbortSignal): Promise<void> {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/health') return sendJson(res, 200, { status: 'ok' });
    if (req.method === 'GET' && path === '/v1/models')
      return sendJson(res, 200, { object: 'list', data: [{ id: this.rt.modelName, object: 'model', owned_by: EMBEDDED_FINGERPRINT }] });
    if (req.method === 'POST' && path === '/tokenize') {
      // llama-server's /tokenize, so /v1/messages/count_tokens counts with this model's own tokenizer.
      const body = await readJson(req);
      if (typeof body.content !== 'string') throw new HttpError(400, "'content' must be a string");
      return sendJson(res, 200, { tokens: this.rt.model.tokenize(body.content) });
    }
    const workload = { '/v1/chat/completions': 'chat', '/v1/completions': 'completion', '/v1/embeddings': 'embeddings' }[path];
    if (req.method !== 'POST' || !workload) throw new HttpError(404, `the embedded engine has no ${req.method} ${path}`, 'not_found');
    if (!this.rt.workloads().includes(workload)) throw new HttpError(404, `this model does not serve ${workload}`, 'not_found');
    const body = await readJson(req);
    if (workload === 'embeddings') return this.#embeddings(body, res);
    return this.#generate(workload === 'chat', body, res, signal);
  }

  async #embeddings(body: Record<string, unknown>, res: http.ServerResponse): Promise<void> {
    const input = body.input;
    let inputs: (string | Token[])[];
    if (typeof input === 'string') inputs = [input];
    else if (Array.isArray(input) && input.length > 0 && input.every((x) => typeof x === 'number')) inputs = [input as Token[]];
    else if (Array.isArray(input) && input.length > 0 && input.every((x) => typeof x === 'string' || (Array.isArray(x) && x.every((t) => typeof t === 'number'))))
      inputs = input as (string | Token[])[];
    else throw new HttpError(400, "'input' must be a string, an array of strings, or token arrays");
    const base64 = body.encoding_format === 'base64';
    const ctx = await this.rt.embeddingContext();
    let promptTokens = 0;
    const data = [];
    for (let index = 0; index < inputs.length; index++) {
      const tokens = typeof inputs[index] === 'string' ? this.rt.model.tokenize(inputs[index] as string) : (inputs[index] as Token[]);
      if (tokens.length > this.rt.contextSize) throw new HttpError(400, `input ${index} has ${tokens.length} tokens; the context holds ${this.rt.contextSize}`, 'context_length_exceeded');
      promptTokens += tokens.length;
      const { vector } = await ctx.getEmbeddingFor(tokens);
      const embedding = base64 ? Buffer.from(Float32Array.from(vector).buffer).toString('base64') : Array.from(vector);
      data.push({ object: 'embedding', index, embedding });
    }
    sendJson(res, 200, { object: 'list', model: body.model ?? this.rt.modelName, data, usage: { prompt_tokens: promptTokens, total_tokens: promptTokens } });
  }

  async #generate(chat: boolean, body: Record<string, unknown>, res: http.ServerResponse, signal: AbortSignal): Promise<void> {
    const { lib, pool } = this.rt;
    if (!pool) throw new HttpError(404, 'this model does not serve generation', 'not_found');
    const s = sampling(body, this.rt.contextSize);
    const history = chat ? toChatHistory(body.messages) : undefined;
    const prompt = chat ? '' : promptText(body.prompt);
    const stream = body.stream === true;
    const includeUsage = (body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
    const id = `${chat ? 'chatcmpl' : 'cmpl'}-embedded-${++this.#nextId}`;
    const created = Math.floor(Date.now() / 1000);
    const model = body.model ?? this.rt.modelName;
    const object = chat ? 'chat.completion' : 'text_completion';
    const chunkObject = chat ? 'chat.completion.chunk' : 'text_completion';

    const seq = await pool.acquire(signal);
    let clean = true;
    try {
      const t0 = performance.now();
      // Tokens evaluated before the first one is sampled: the meter counts the
      // last prompt token (the one whose logits are sampled) as output.
      const evaluated = () => seq.tokenMeter.usedInputTokens + seq.tokenMeter.usedOutputTokens;
      const evaluated0 = evaluated();
      let tFirst: number | undefined;
      let promptN = 0;
      let promptTokens = 0;
      let completionTokens = 0;
      let sentRole = false;
      const onToken = (tokens: Token[]) => {
        if (tFirst === undefined) {
          tFirst = performance.now();
          promptN = evaluated() - evaluated0;
          promptTokens = seq.contextTokens.length;
        }
        completionTokens += tokens.length;
      };
      const onTextChunk = !stream
        ? undefined
        : (text: string) => {
            if (!text || signal.aborted) return;
            if (!res.headersSent) res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
            const choice = chat
              ? { index: 0, delta: sentRole ? { content: text } : { role: 'assistant', content: text }, finish_reason: null }
              : { index: 0, text, finish_reason: null };
            sentRole = true;
            res.write(`data: ${JSON.stringify({ id, object: chunkObject, created, model, system_fingerprint: EMBEDDED_FINGERPRINT, choices: [choice] })}\n\n`);
          };
      const options = {
        onToken,
        onTextChunk,
        signal,
        stopOnAbortSignal: false,
        maxTokens: s.maxTokens,
        temperature: s.temperature,
        topP: s.topP,
        topK: s.topK,
        seed: s.seed,
        customStopTriggers: s.stop.length ? s.stop : undefined,
      };
      let text: string;
      let stopReason: string;
      clean = false;
      if (chat) {
        const llamaChat = new lib.LlamaChat({ contextSequence: seq, chatWrapper: this.rt.chatWrapper, autoDisposeSequence: false });
        try {
          const r: LlamaChatResponse = await llamaChat.generateResponse(history!, options);
          text = r.response;
          stopReason = r.metadata.stopReason;
        } finally {
          llamaChat.dispose({ disposeSequence: false });
        }
      } else {
        if (this.rt.model.tokenize(prompt).length >= this.rt.contextSize)
          throw new HttpError(400, `the prompt does not fit the context of ${this.rt.contextSize} tokens`, 'context_length_exceeded');
        const completion = new lib.LlamaCompletion({ contextSequence: seq, autoDisposeSequence: false });
        try {
          const r = await completion.generateCompletionWithMeta(prompt, options);
          text = r.response;
          stopReason = r.metadata.stopReason;
        } finally {
          completion.dispose({ disposeSequence: false });
        }
      }
      clean = true;
      const tEnd = performance.now();
      if (tFirst === undefined) {
        tFirst = tEnd;
        promptN = evaluated() - evaluated0;
        promptTokens = seq.contextTokens.length;
      }
      const finish = stopReason === 'maxTokens' ? 'length' : 'stop';
      const usage = { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
      const timings = { prompt_n: promptN, prompt_ms: round(tFirst - t0), predicted_n: completionTokens, predicted_ms: round(tEnd - tFirst) };
      if (signal.aborted) return void this.stats.aborted++;
      this.stats.completed++;
      if (!stream) {
        const choice = chat ? { index: 0, message: { role: 'assistant', content: text }, finish_reason: finish } : { index: 0, text, finish_reason: finish };
        return sendJson(res, 200, { id, object, created, model, system_fingerprint: EMBEDDED_FINGERPRINT, choices: [choice], usage, timings });
      }
      if (!res.headersSent) res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      const last = chat ? { index: 0, delta: sentRole ? {} : { role: 'assistant', content: '' }, finish_reason: finish } : { index: 0, text: '', finish_reason: finish };
      const frame = (extra: object) => `data: ${JSON.stringify({ id, object: chunkObject, created, model, system_fingerprint: EMBEDDED_FINGERPRINT, ...extra })}\n\n`;
      res.write(frame({ choices: [last], timings }));
      if (includeUsage) res.write(frame({ choices: [], usage }));
      res.end('data: [DONE]\n\n');
    } catch (err) {
      if (err instanceof HttpError) throw err;
      if (isAbort(err) || signal.aborted) return void this.stats.aborted++;
      this.stats.failed++;
      throw err;
    } finally {
      // An interrupted generation may leave half-evaluated state: start that sequence afresh.
      if (!clean) await seq.clearHistory().catch(() => {});
      pool.release(seq);
    }
  }
}

function promptText(prompt: unknown): string {
  if (typeof prompt === 'string') return prompt;
  if (Array.isArray(prompt) && prompt.length === 1 && typeof prompt[0] === 'string') return prompt[0];
  throw new HttpError(400, "'prompt' must be a string (one prompt per request)");
}

function round(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}
