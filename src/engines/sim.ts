/**
 * The simulated engine: an OpenAI-compatible server on loopback with timings
 * from the config (`ttft_ms`, `prefill_ms_per_1k`, `tokens_per_s`,
 * `output_tokens`) and deterministic, clearly labelled answers. For demos,
 * benchmarks and tests; never the default.
 *
 * Chat and completions run in `parallel` slots with a prompt cache the way
 * llama-server's `cache_prompt` works (see prompt-cache.ts): prefill covers
 * only the prompt tokens past what the chosen slot already holds, the cached
 * count is reported as `usage.prompt_tokens_details.cached_tokens`, and a
 * request that finds every slot busy waits for one in arrival order.
 * `sim.host`/`sim.port` fix where it listens (loopback only; default
 * 127.0.0.1, any port), so a benchmark can reach the same engine without
 * the node; `POST /slots/{id}?action=erase` empties a slot's cache as
 * llama-server's does (its RAM pool stays), `POST /cache/clear` (the sim's
 * own) empties every slot and the pool as a restart would, and a body's
 * `id_slot` runs the request in that slot (waiting for it if busy), as
 * llama-server's does. A chat whose last message is the assistant's is
 * continued from that text, as llama-server's `--prefill-assistant` does:
 * when the text is the start of the sim's own answer, the rest of that
 * answer follows (so a stream cut and continued elsewhere reads as one),
 * and, as today's llama-server does, the answer repeats that text first
 * (the first streamed delta, or the whole answer's content, starts with it).
 */
import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { SimSettings } from '../config/schema.ts';
import type { Descriptor } from '../workloads/workloads.ts';
import { estimateTokens } from '../prompt/tokens.ts';
import { Backend, type BackendInfo, type Logger } from './backend.ts';
import { renderPrompt, SlotPool, tokenCount, type SlotLease } from './prompt-cache.ts';

const SIM_FINGERPRINT = 'viiwork-sim';
const WORDS = ['simulated', 'tokens', 'from', 'the', 'viiwork', 'sim', 'engine', 'no', 'model', 'ran'];

/** The sim's answer's `i`th word (without the space after it). */
function simWord(i: number): string {
  return (i === 0 ? '[simulated] ' : '') + WORDS[i % WORDS.length];
}

/** The text of a chat body's final assistant message (the answer's start to continue), or undefined. */
function prefilled(body: Record<string, unknown>): string | undefined {
  const messages = body.messages;
  if (!Array.isArray(messages) || messages.length === 0) return undefined;
  const last = messages[messages.length - 1] as { role?: unknown; content?: unknown; tool_calls?: unknown } | null;
  if (!last || last.role !== 'assistant' || last.tool_calls) return undefined;
  if (typeof last.content === 'string') return last.content;
  if (Array.isArray(last.content)) return last.content.map((p: { text?: unknown }) => (typeof p?.text === 'string' ? p.text : '')).join('');
  return undefined;
}

/** How many of the sim's `total` answer words `text` is (each with the space that followed it); 0 when it is not such a start. */
function answerStart(text: string, total: number): number {
  let at = 0;
  for (let i = 0; i < total && at < text.length; i++) {
    const w = simWord(i) + ' ';
    if (!text.startsWith(w, at)) return 0;
    at += w.length;
    if (at === text.length) return i + 1;
  }
  return 0;
}

/** Deterministic unit vector from text (FNV-seeded xorshift), so equal inputs embed equally. */
export function simEmbedding(text: string, dims = 16): number[] {
  let seed = 2166136261;
  for (let i = 0; i < text.length; i++) seed = Math.imul(seed ^ text.charCodeAt(i), 16777619) >>> 0;
  const v: number[] = [];
  for (let i = 0; i < dims; i++) {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    seed >>>= 0;
    v.push(seed / 0xffffffff - 0.5);
  }
  const norm = Math.hypot(...v) || 1;
  return v.map((x) => Number((x / norm).toFixed(6)));
}

function promptTokens(bodyBytes: number): number {
  return estimateTokens(bodyBytes);
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (ms <= 0 || signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    }
  });
}

function sendJson(res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/** Header naming the slot a chat or completion ran in (also `id_slot` in whole answers and the usage chunk). */
export const SIM_SLOT_HEADER = 'x-sim-slot';

export class SimBackend extends Backend {
  #server: http.Server | undefined;
  #url: string | undefined;
  #nextId = 0;
  /** The slots of chat and completions, with what each last processed. */
  readonly slots: SlotPool;

  constructor(
    info: BackendInfo,
    descriptor: Descriptor,
    readonly sim: SimSettings,
    log: Logger,
  ) {
    super(info, descriptor, log);
    // `cache` (default on) switches the prompt cache: off, slots still queue but every request prefills its whole prompt.
    // `slot_prompt_similarity` (default 0.5, llama-server's): the share of a prompt a slot's cached prefix must exceed for that slot to be preferred.
    // `cache_ram` (default none): today's llama-server's RAM prompt cache, in tokens; the node's cache model counts it.
    this.slots = new SlotPool(info.parallel, { cache: sim.cache !== false, similarity: sim.slot_prompt_similarity, ram: sim.cache_ram });
    if (this.slots.ram && sim.cache !== false) this.promptPool = { tokens: sim.cache_ram!, ...(sim.slot_prompt_similarity !== undefined ? { similarity: sim.slot_prompt_similarity } : {}) };
  }

  get url(): string | undefined {
    return this.#url;
  }

  #loadTimer: NodeJS.Timeout | undefined;
  #loadDone: (() => void) | undefined;
  #stopped = false;

  async start(): Promise<void> {
    const loadMs = this.sim.load_ms ?? 0;
    if (loadMs > 0) {
      // A simulated model load (SPEC section 11): `starting` (loading, counted as full) for load_ms.
      this.setState('starting', `simulating a load of ${loadMs} ms`);
      await new Promise<void>((resolve) => {
        this.#loadDone = resolve;
        this.#loadTimer = setTimeout(resolve, loadMs);
      });
      this.#loadTimer = undefined;
      if (this.#stopped) return;
    }
    const server = http.createServer((req, res) => this.#handle(req, res));
    server.keepAliveTimeout = 65_000;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.sim.port ?? 0, this.sim.host ?? '127.0.0.1', () => resolve());
    });
    this.#server = server;
    const addr = server.address() as AddressInfo;
    this.#url = `http://${addr.family === 'IPv6' ? `[${addr.address}]` : addr.address}:${addr.port}`;
    this.setState('healthy', 'simulated engine ready');
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#loadTimer) {
      clearTimeout(this.#loadTimer);
      this.#loadTimer = undefined;
      this.#loadDone?.();
    }
    const server = this.#server;
    this.#server = undefined;
    if (server) {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
    this.setState('stopped', 'stopped');
  }

  async #handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const abort = new AbortController();
    res.on('close', () => abort.abort());
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/health') return sendJson(res, 200, { status: 'ok' });
    if (req.method === 'GET' && path === '/v1/models')
      return sendJson(res, 200, { object: 'list', data: [{ id: this.info.model, object: 'model', owned_by: SIM_FINGERPRINT }] });
    if (req.method === 'GET' && path === '/slots')
      // llama-server's /slots, reduced to what a benchmark needs to see the cache.
      return sendJson(
        res,
        200,
        this.slots.slots.map((s) => ({ id: s.id, is_processing: s.busy, cached_tokens: s.text.length ? tokenCount(s.text) : 0, last_used: s.lastUsed })),
      );
    const erase = /^\/slots\/(\d+)$/.exec(path);
    if (req.method === 'POST' && erase && new URLSearchParams((req.url ?? '').split('?')[1] ?? '').get('action') === 'erase') {
      // llama-server's POST /slots/{id}?action=erase: forget what the slot holds (benchmarks start their arms on cold caches).
      const id = Number(erase[1]);
      const n = this.slots.erase(id);
      if (n === undefined) return sendJson(res, id < this.slots.slots.length ? 409 : 404, { error: { message: id < this.slots.slots.length ? `slot ${id} is processing` : `no slot ${id}`, type: 'invalid_request_error', code: null } });
      return sendJson(res, 200, { id_slot: id, n_erased: n });
    }
    if (req.method === 'POST' && path === '/cache/clear') {
      // The sim only: what a restart does to today's llama-server, every slot and the RAM pool emptied. Erasing the
      // slots leaves the pool, as llama-server's erase does, so a benchmark's next arm would start on a warm pool.
      if (this.slots.slots.some((s) => s.busy)) return sendJson(res, 409, { error: { message: 'a slot is processing', type: 'invalid_request_error', code: null } });
      let n = 0;
      for (const s of this.slots.slots) n += this.slots.erase(s.id) ?? 0;
      const pooled = this.slots.ram?.entries.length ?? 0;
      this.slots.ram?.clear();
      return sendJson(res, 200, { n_erased: n, ram_entries_dropped: pooled });
    }
    if (req.method !== 'POST') return sendJson(res, 404, { error: { message: 'not found', type: 'invalid_request_error', code: 'not_found' } });

    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks);
    let body: Record<string, unknown> = {};
    try {
      body = raw.length ? JSON.parse(raw.toString('utf8')) : {};
    } catch {
      if (!path.startsWith('/v1/audio/')) return sendJson(res, 400, { error: { message: 'malformed JSON', type: 'invalid_request_error', code: null } });
    }
    const tokensIn = promptTokens(raw.length);
    const prefill = this.sim.ttft_ms + (this.sim.prefill_ms_per_1k * tokensIn) / 1000;

    switch (path) {
      case '/v1/chat/completions':
      case '/v1/completions':
        return this.#generate(path === '/v1/chat/completions', body, tokensIn, res, abort.signal);
      case '/v1/embeddings': {
        await sleep(prefill, abort.signal);
        const input = body.input;
        const inputs = Array.isArray(input) ? input.map(String) : [String(input ?? '')];
        return sendJson(res, 200, {
          object: 'list',
          model: body.model,
          data: inputs.map((t, index) => ({ object: 'embedding', index, embedding: simEmbedding(t) })),
          usage: { prompt_tokens: tokensIn, total_tokens: tokensIn },
        });
      }
      case '/v1/rerank':
      case '/rerank': {
        await sleep(prefill, abort.signal);
        const query = String(body.query ?? '');
        const docs = Array.isArray(body.documents) ? body.documents.map((d) => (typeof d === 'string' ? d : JSON.stringify(d))) : [];
        const qWords = new Set(query.toLowerCase().split(/\W+/).filter(Boolean));
        const results = docs
          .map((d, index) => {
            const words = d.toLowerCase().split(/\W+/).filter(Boolean);
            const hits = words.filter((w) => qWords.has(w)).length;
            return { index, relevance_score: Number((hits / (words.length || 1)).toFixed(6)) };
          })
          .sort((a, b) => b.relevance_score - a.relevance_score || a.index - b.index);
        return sendJson(res, 200, { model: body.model, object: 'list', results, usage: { prompt_tokens: tokensIn, total_tokens: tokensIn } });
      }
      case '/v1/audio/transcriptions':
      case '/v1/audio/translations': {
        await sleep(prefill, abort.signal);
        const sha = crypto.createHash('sha256').update(raw).digest('hex').slice(0, 16);
        return sendJson(res, 200, { text: `[simulated transcription of ${raw.length} bytes, ${sha}]` });
      }
      case '/v1/audio/speech': {
        await sleep(prefill, abort.signal);
        const audio = Buffer.alloc(1024, 0);
        res.writeHead(200, { 'content-type': 'audio/wav', 'content-length': audio.length, 'x-simulated': 'true' });
        return void res.end(audio);
      }
      default:
        return sendJson(res, 404, { error: { message: `the sim engine has no ${path}`, type: 'invalid_request_error', code: 'not_found' } });
    }
  }

  async #generate(chat: boolean, body: Record<string, unknown>, bodyTokens: number, res: http.ServerResponse, signal: AbortSignal) {
    // A final assistant message is the answer's start, continued (llama-server's --prefill-assistant): the template
    // renders the conversation before it, then that text in the assistant's open turn.
    const prefill = chat ? prefilled(body) : undefined;
    const before = prefill === undefined ? body : { ...body, messages: (body.messages as unknown[]).slice(0, -1) };
    const base = renderPrompt(chat, before);
    // The prompt as a template renders it; a body without messages or prompt is counted by its bytes and reuses nothing.
    const rendered = base === undefined || prefill === undefined ? base : base + prefill;
    // `id_slot` (as llama-server takes it): the node chose the slot (SPEC 9.6, "Slot choice").
    const idSlot = typeof body.id_slot === 'number' && body.id_slot >= 0 ? body.id_slot : undefined;
    const lease = await this.slots.acquire(rendered ?? '', signal, rendered !== undefined && body.cache_prompt !== false, idSlot);
    if (!lease) return;
    let processed = false;
    let generated = '';
    try {
      // The answer's own words, given back as its start, are the tokens they were generated as (one a word).
      const start = prefill === undefined ? 0 : answerStart(prefill, this.sim.output_tokens);
      const tokensIn = rendered === undefined ? bodyTokens : prefill === undefined || base === undefined ? lease.promptTokens : tokenCount(base) + (start || tokenCount(prefill));
      await this.#answer(chat, body, tokensIn, lease, res, signal, start, prefill ?? '', (text) => {
        processed = true;
        generated = text;
      });
    } finally {
      lease.finish(processed, generated);
    }
  }

  async #answer(
    chat: boolean,
    body: Record<string, unknown>,
    tokensIn: number,
    lease: SlotLease,
    res: http.ServerResponse,
    signal: AbortSignal,
    start: number,
    echo: string,
    generatedSoFar: (text: string) => void,
  ) {
    const cached = Math.min(lease.cachedTokens, tokensIn - 1);
    const prefill = this.sim.ttft_ms + (this.sim.prefill_ms_per_1k * (tokensIn - cached)) / 1000;
    const id = `sim-${this.info.id}-${++this.#nextId}`;
    const created = Math.floor(Date.now() / 1000);
    // A continued answer (`start` of its words already given) has the rest of the same answer to say.
    const left = Math.max(1, this.sim.output_tokens - start);
    const maxTokens = Number(body.max_tokens ?? body.max_completion_tokens) || left;
    const n = Math.max(1, Math.min(left, maxTokens));
    // Like a real engine: the answer ends on its own ('stop') unless the client's own limit cut it.
    const finish = maxTokens < left ? 'length' : 'stop';
    const tokenMs = 1000 / this.sim.tokens_per_s;
    const words = Array.from({ length: n }, (_, i) => simWord(start + i) + (i < n - 1 ? ' ' : ''));
    // report_cache: false answers as engines that do not report their cache: no cached count in any form.
    const reports = this.sim.report_cache !== false;
    const usage = { prompt_tokens: tokensIn, completion_tokens: n, total_tokens: tokensIn + n, ...(reports ? { prompt_tokens_details: { cached_tokens: cached } } : {}) };
    // llama-server's timings: prompt_n counts the tokens processed, cache_n those reused from the slot.
    const timings = { ...(reports ? { cache_n: cached, prompt_n: tokensIn - cached } : {}), prompt_ms: prefill, predicted_n: n, predicted_ms: tokenMs * (n - 1) };
    const slotHeader = { [SIM_SLOT_HEADER]: String(lease.slot) };
    const id_slot = lease.slot;
    const object = chat ? 'chat.completion' : 'text_completion';
    const model = body.model;

    await sleep(prefill, signal);
    if (signal.aborted) return;
    generatedSoFar('');
    if (body.stream !== true) {
      await sleep(tokenMs * (n - 1), signal);
      if (signal.aborted) return;
      const text = words.join('');
      generatedSoFar(text);
      const choice = chat
        ? { index: 0, message: { role: 'assistant', content: echo + text }, finish_reason: finish }
        : { index: 0, text, finish_reason: finish };
      // llama-server reports its prompt time this way; the node scores whole answers from it.
      return sendJson(res, 200, { id, object, created, model, system_fingerprint: SIM_FINGERPRINT, choices: [choice], usage, timings, id_slot }, slotHeader);
    }
    res.writeHead(200, { ...slotHeader, 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    const chunkObject = chat ? 'chat.completion.chunk' : 'text_completion';
    let sent = '';
    for (let i = 0; i < n; i++) {
      if (i > 0) await sleep(tokenMs, signal);
      if (signal.aborted) return;
      const last = i === n - 1;
      const choice = chat
        ? { index: 0, delta: i === 0 ? { role: 'assistant', content: echo + words[i] } : { content: words[i] }, finish_reason: last ? finish : null }
        : { index: 0, text: words[i], finish_reason: last ? finish : null };
      res.write(`data: ${JSON.stringify({ id, object: chunkObject, created, model, system_fingerprint: SIM_FINGERPRINT, choices: [choice] })}\n\n`);
      generatedSoFar((sent += words[i]));
    }
    const streamOptions = body.stream_options as { include_usage?: boolean } | undefined;
    if (streamOptions?.include_usage) {
      res.write(`data: ${JSON.stringify({ id, object: chunkObject, created, model, system_fingerprint: SIM_FINGERPRINT, choices: [], usage, timings, id_slot })}\n\n`);
    }
    res.end('data: [DONE]\n\n');
  }
}
