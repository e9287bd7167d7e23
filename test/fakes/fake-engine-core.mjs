// The fake OpenAI-compatible engine, in plain JavaScript so that both the
// in-process test helper (fake-engine.ts, through tsx) and the standalone
// fake llama-server (fake-llama-server.mjs, plain node) share one
// implementation. Types live in fake-engine-core.d.mts; the behaviour is
// documented there and in fake-engine.ts.
import { createHash } from 'node:crypto';
import { EventEmitter } from 'node:events';
import http from 'node:http';

const INFERENCE_PATHS = new Set([
  '/v1/chat/completions',
  '/v1/responses',
  '/v1/completions',
  '/v1/embeddings',
  '/v1/rerank',
  '/rerank',
  '/v1/audio/transcriptions',
  '/v1/audio/translations',
  '/v1/audio/speech',
]);

const WORDS = ['The', 'fake', 'engine', 'says', 'hello', 'to', 'you', 'and', 'everyone', 'else'];

/** The i-th piece of generated text: deterministic, one "token" per piece. */
export function fakePiece(i) {
  const w = WORDS[i % WORDS.length];
  return i === 0 ? w : ` ${w}`;
}

/** A deterministic unit vector of `dim` floats for `text`. */
export function fakeEmbedding(text, dim = 8) {
  const out = [];
  let block = Buffer.alloc(0);
  for (let i = 0; out.length < dim; i++) {
    if (block.length < 4) block = createHash('sha256').update(`${i}:${text}`).digest();
    out.push(block.readUInt32BE(0) / 0xffffffff - 0.5);
    block = block.subarray(4);
  }
  const norm = Math.sqrt(out.reduce((s, v) => s + v * v, 0)) || 1;
  return out.map((v) => v / norm);
}

/** A vector as OpenAI's `encoding_format: "base64"` sends it: little-endian float32s, base64. */
export function fakeEmbeddingBase64(vector) {
  const buf = Buffer.alloc(vector.length * 4);
  vector.forEach((v, i) => buf.writeFloatLE(v, i * 4));
  return buf.toString('base64');
}

/** A deterministic relevance score in [0, 1): word overlap with the query, a hash for ties. */
export function fakeRelevance(query, doc) {
  const q = new Set(String(query).toLowerCase().split(/\W+/).filter(Boolean));
  const d = String(doc).toLowerCase().split(/\W+/).filter(Boolean);
  const hits = d.filter((w) => q.has(w)).length;
  const overlap = d.length ? hits / d.length : 0;
  const tie = createHash('sha256').update(`${query}\u0000${doc}`).digest().readUInt16BE(0) / 0xffff;
  return Math.round((0.9 * overlap + 0.09 * tie) * 1e6) / 1e6;
}

/**
 * Parse a multipart/form-data body into parts {name, filename, contentType, data}.
 * Returns undefined when the content type has no boundary.
 */
export function parseMultipart(body, contentType) {
  const m = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType || '');
  if (!m) return undefined;
  const delimiter = Buffer.from(`--${m[1] ?? m[2]}`);
  const parts = [];
  let pos = body.indexOf(delimiter);
  while (pos !== -1) {
    pos += delimiter.length;
    if (body[pos] === 0x2d && body[pos + 1] === 0x2d) break; // closing delimiter
    if (body[pos] === 0x0d && body[pos + 1] === 0x0a) pos += 2;
    const next = body.indexOf(delimiter, pos);
    if (next === -1) break;
    let end = next;
    if (body[end - 2] === 0x0d && body[end - 1] === 0x0a) end -= 2;
    const headEnd = body.indexOf('\r\n\r\n', pos);
    if (headEnd !== -1 && headEnd < end) {
      const head = body.subarray(pos, headEnd).toString('latin1');
      parts.push({
        name: /[;\s]name="([^"]*)"/i.exec(head)?.[1],
        filename: /[;\s]filename="([^"]*)"/i.exec(head)?.[1],
        contentType: /^content-type:\s*(.+)$/im.exec(head)?.[1]?.trim(),
        data: body.subarray(headEnd + 4, end),
      });
    }
    pos = next;
  }
  return parts;
}

function sendJson(res, status, obj, headers = {}) {
  const body = Buffer.from(JSON.stringify(obj));
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': body.length, ...headers });
  res.end(body);
}

function errorBody(status, message) {
  const type = status === 503 ? 'unavailable_error' : status >= 500 ? 'server_error' : status === 404 ? 'not_found_error' : 'invalid_request_error';
  return { error: { code: status, message, type } };
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (!(ms > 0)) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

export class FakeEngine extends EventEmitter {
  constructor(opts = {}) {
    super();
    this.opts = {
      host: '127.0.0.1',
      port: 0,
      model: 'fake-model',
      name: 'fake',
      buildInfo: 'b4500-abcdef',
      totalSlots: 4,
      contextPerSlot: 4096,
      loadingMs: 0,
      delayMs: 0,
      chunkDelayMs: 0,
      outputTokens: 4,
      embeddingDim: 8,
      healthEndpoint: true,
      propsEndpoint: true,
      audio: false,
      control: false,
      onCrash: undefined,
      info: undefined,
      env: undefined,
      keepRequests: true,
      // POST /tokenize (llama-server's): one token per character of `content`, answered after this many ms; undefined: 404.
      tokenizeMs: undefined,
      ...opts,
    };
    this.delayMs = this.opts.delayMs;
    this.chunkDelayMs = this.opts.chunkDelayMs;
    this.outputTokens = this.opts.outputTokens;
    this.buildInfo = this.opts.buildInfo;
    this.totalSlots = this.opts.totalSlots;
    this.received = {};
    this.requests = [];
    this.inFlight = 0;
    this.maxInFlight = 0;
    this.completed = 0;
    this.aborted = 0;
    this.loading = false;
    this.healthStatus = undefined;
    this.holding = false;
    this.held = [];
    this.failQueue = [];
    this.midStreamFailures = 0;
    this.server = http.createServer((req, res) => this.#handle(req, res));
    this.server.keepAliveTimeout = 5000;
    this.port = 0;
    this.host = this.opts.host;
    this.#loadTimer = undefined;
  }

  #loadTimer;

  /** Listen; resolves with this engine once bound. The loading phase (opts.loadingMs) starts now. */
  async start() {
    await new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.opts.port, this.opts.host, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    this.port = this.server.address().port;
    if (this.opts.loadingMs > 0) {
      this.loading = true;
      this.#loadTimer = setTimeout(() => {
        this.loading = false;
        this.emit('loaded');
      }, this.opts.loadingMs);
    }
    return this;
  }

  get url() {
    const h = this.host.includes(':') ? `[${this.host}]` : this.host;
    return `http://${h}:${this.port}`;
  }

  // ---- controls -----------------------------------------------------------

  setLoading(on) {
    clearTimeout(this.#loadTimer);
    this.loading = !!on;
    if (!on) this.emit('loaded');
  }

  setHealthStatus(status) {
    this.healthStatus = status || undefined;
  }

  setDelay(ms) {
    this.delayMs = ms;
  }

  hold(on = true) {
    this.holding = !!on;
    if (!on) this.releaseAll();
  }

  release(n = 1) {
    const batch = this.held.splice(0, n);
    for (const h of batch) h.release();
    return batch.length;
  }

  releaseAll() {
    return this.release(this.held.length);
  }

  get heldCount() {
    return this.held.length;
  }

  failNext(status = 500, message) {
    this.failQueue.push({ status, message: message ?? `fake failure ${status}` });
  }

  failMidStream(times = 1) {
    this.midStreamFailures += times;
  }

  count(path) {
    return this.received[path] ?? 0;
  }

  bodiesFor(path) {
    return this.requests.filter((r) => r.path === path).map((r) => r.json);
  }

  resetCounters() {
    this.received = {};
    this.requests = [];
    this.maxInFlight = this.inFlight;
    this.completed = 0;
    this.aborted = 0;
  }

  async waitFor(pred, deadlineMs = 5000, what = 'condition') {
    const deadline = Date.now() + deadlineMs;
    while (!pred(this)) {
      if (Date.now() >= deadline) throw new Error(`fake engine ${this.opts.name}: timed out after ${deadlineMs} ms waiting for ${what}`);
      await sleep(5);
    }
  }

  async close() {
    clearTimeout(this.#loadTimer);
    this.holding = false;
    for (const h of this.held.splice(0)) h.release();
    await new Promise((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }

  // ---- request handling ---------------------------------------------------

  async #handle(req, res) {
    const url = new URL(req.url ?? '/', 'http://fake');
    const path = url.pathname;
    this.received[path] = (this.received[path] ?? 0) + 1;
    res.setHeader('X-Fake-Engine', this.opts.name);

    const inference = req.method === 'POST' && INFERENCE_PATHS.has(path);
    let done = false;
    let sabotaged = false;
    const ac = new AbortController();
    if (inference) {
      this.inFlight++;
      this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
      res.on('close', () => {
        this.inFlight--;
        if (res.writableFinished) this.completed++;
        else if (!sabotaged) {
          this.aborted++;
          this.emit('aborted', path);
        }
        done = true;
        ac.abort();
        this.emit('settled', path);
      });
    }

    let body;
    try {
      body = await readBody(req);
    } catch {
      return;
    }
    const record = {
      method: req.method ?? 'GET',
      path,
      query: Object.fromEntries(url.searchParams),
      headers: req.headers,
      body,
      json: undefined,
      at: Date.now(),
    };
    if ((req.headers['content-type'] ?? '').includes('json') && body.length) {
      try {
        record.json = JSON.parse(body.toString('utf8'));
      } catch {
        record.json = undefined;
      }
    }
    if (this.opts.keepRequests) this.requests.push(record);
    this.emit('request', record);

    try {
      if (path.startsWith('/_control/') && this.opts.control) return this.#control(req, res, path, url, record);
      if (req.method === 'GET') return this.#get(res, path);
      if (req.method === 'POST' && path === '/tokenize' && this.opts.tokenizeMs !== undefined) {
        await sleep(this.opts.tokenizeMs);
        const content = typeof record.json?.content === 'string' ? record.json.content : '';
        return sendJson(res, 200, { tokens: [...content].map((c) => c.codePointAt(0)) });
      }
      if (!inference) return sendJson(res, INFERENCE_PATHS.has(path) ? 405 : 404, errorBody(INFERENCE_PATHS.has(path) ? 405 : 404, `no route ${req.method} ${path}`));

      if (this.holding) {
        await new Promise((resolve) => {
          const entry = { path, release: resolve };
          this.held.push(entry);
          this.emit('held', path);
          ac.signal.addEventListener(
            'abort',
            () => {
              const i = this.held.indexOf(entry);
              if (i !== -1) this.held.splice(i, 1);
              resolve();
            },
            { once: true },
          );
        });
        if (done) return;
      }
      const hdrDelay = Number(req.headers['x-fake-delay-ms']);
      await sleep(Number.isFinite(hdrDelay) && hdrDelay >= 0 ? hdrDelay : this.delayMs, ac.signal);
      if (done) return;
      if (this.loading) return sendJson(res, 503, errorBody(503, 'Loading model'));
      const fail = this.failQueue.shift();
      if (fail) return sendJson(res, fail.status, errorBody(fail.status, fail.message), fail.status === 429 || fail.status === 503 ? { 'Retry-After': '1' } : {});

      const promptTokens = Math.max(1, Math.round(body.length / 4));
      const json = record.json ?? {};
      switch (path) {
        case '/v1/chat/completions':
        case '/v1/completions': {
          const chat = path === '/v1/chat/completions';
          if (json.stream) {
            const sabotage = this.midStreamFailures > 0;
            if (sabotage) this.midStreamFailures--;
            return await this.#stream(res, json, chat, promptTokens, ac.signal, sabotage, () => (sabotaged = true));
          }
          return sendJson(res, 200, this.#completion(json, chat, promptTokens));
        }
        case '/v1/responses': {
          // A native Responses API engine, as far as a test needs one: a fixed whole response naming itself.
          const text = `native ${this.opts.name}`;
          return sendJson(res, 200, {
            id: 'resp_native',
            object: 'response',
            created_at: Math.floor(Date.now() / 1000),
            status: 'completed',
            model: json.model ?? this.opts.model,
            output: [{ type: 'message', id: 'msg_native', status: 'completed', role: 'assistant', content: [{ type: 'output_text', text, annotations: [] }] }],
            usage: { input_tokens: promptTokens, output_tokens: 2, total_tokens: promptTokens + 2 },
          });
        }
        case '/v1/embeddings': {
          const inputs = Array.isArray(json.input) ? json.input : [json.input ?? ''];
          // encoding_format "base64" (what the openai SDK asks for by default) as OpenAI answers it; anything else: floats.
          const encode = json.encoding_format === 'base64' ? fakeEmbeddingBase64 : (v) => v;
          return sendJson(res, 200, {
            object: 'list',
            model: json.model ?? this.opts.model,
            data: inputs.map((inp, index) => ({ object: 'embedding', index, embedding: encode(fakeEmbedding(typeof inp === 'string' ? inp : JSON.stringify(inp), this.opts.embeddingDim)) })),
            usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
          });
        }
        case '/v1/rerank':
        case '/rerank': {
          const docs = Array.isArray(json.documents) ? json.documents : [];
          let results = docs.map((d, index) => ({ index, relevance_score: fakeRelevance(json.query ?? '', typeof d === 'string' ? d : (d?.text ?? JSON.stringify(d))) }));
          results.sort((a, b) => b.relevance_score - a.relevance_score || a.index - b.index);
          if (Number.isInteger(json.top_n) && json.top_n >= 0) results = results.slice(0, json.top_n);
          return sendJson(res, 200, {
            model: json.model ?? this.opts.model,
            object: 'list',
            usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
            results,
          });
        }
        case '/v1/audio/transcriptions':
        case '/v1/audio/translations': {
          const parts = parseMultipart(body, req.headers['content-type']);
          const file = parts?.find((p) => p.name === 'file');
          if (!file) return sendJson(res, 400, errorBody(400, 'expected a multipart upload with a "file" part'));
          const fields = Object.fromEntries(parts.filter((p) => p.filename === undefined).map((p) => [p.name, p.data.toString('utf8')]));
          return sendJson(res, 200, {
            text: `${path.endsWith('translations') ? 'translated' : 'transcribed'} ${file.data.length} bytes of ${file.filename ?? 'audio'}`,
            sha256_of_file: createHash('sha256').update(file.data).digest('hex'),
            bytes: file.data.length,
            filename: file.filename,
            model: fields.model,
            fields,
            usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
          });
        }
        case '/v1/audio/speech': {
          const text = String(json.input ?? '');
          const audio = Buffer.concat([Buffer.from('ID3\u0004\u0000\u0000'), createHash('sha256').update(text).digest(), Buffer.alloc(Math.min(text.length * 16, 1 << 20), 0x55)]);
          res.writeHead(200, { 'Content-Type': 'audio/mpeg', 'Content-Length': audio.length });
          return res.end(audio);
        }
      }
    } catch (err) {
      if (!res.headersSent) sendJson(res, 500, errorBody(500, String(err)));
      else res.destroy();
    }
  }

  #get(res, path) {
    switch (path) {
      case '/health':
        if (!this.opts.healthEndpoint) return sendJson(res, 404, errorBody(404, 'File Not Found'));
        if (this.healthStatus) return sendJson(res, this.healthStatus, errorBody(this.healthStatus, 'fake health failure'));
        if (this.loading) return sendJson(res, 503, { error: { code: 503, message: 'Loading model', type: 'unavailable_error' } });
        return sendJson(res, 200, { status: 'ok' });
      case '/v1/models':
      case '/models':
        if (this.healthStatus) return sendJson(res, this.healthStatus, errorBody(this.healthStatus, 'fake health failure'));
        return sendJson(res, 200, { object: 'list', data: [{ id: this.opts.model, object: 'model', created: 1700000000, owned_by: this.opts.name }] });
      case '/props':
        if (!this.opts.propsEndpoint) return sendJson(res, 404, errorBody(404, 'File Not Found'));
        return sendJson(res, 200, {
          build_info: this.buildInfo,
          total_slots: this.totalSlots,
          model_path: this.opts.modelPath ?? this.opts.model,
          default_generation_settings: { n_ctx: this.opts.contextPerSlot },
          modalities: { vision: false, audio: Boolean(this.opts.audio) },
        });
      default:
        return sendJson(res, 404, errorBody(404, 'File Not Found'));
    }
  }

  /**
   * A chat request offering function tools whose last message is not a tool result gets a call of the
   * first tool (arguments {"city":"Oslo"}); one asking for a JSON schema or object gets {"ok":true}.
   */
  #special(json) {
    const scripted = this.opts.script?.(json);
    if (scripted?.call) return { call: { id: scripted.call.id ?? `call_fake_${Date.now().toString(36)}`, type: 'function', function: { name: scripted.call.name, arguments: scripted.call.arguments } } };
    if (scripted) return { text: scripted.text, scripted: true };
    const tools = Array.isArray(json.tools) ? json.tools.filter((t) => t?.type === 'function') : [];
    const last = Array.isArray(json.messages) ? json.messages[json.messages.length - 1] : undefined;
    if (tools.length && last?.role !== 'tool') return { call: { id: 'call_fake_1', type: 'function', function: { name: tools[0].function?.name ?? 'tool', arguments: '{"city":"Oslo"}' } } };
    const fmt = json.response_format?.type;
    if (fmt === 'json_schema' || fmt === 'json_object') return { text: '{"ok":true}' };
    return undefined;
  }

  #completion(json, chat, promptTokens) {
    const special = chat ? this.#special(json) : undefined;
    if (special) {
      const base = { id: `fake-${Date.now().toString(36)}`, created: Math.floor(Date.now() / 1000), model: json.model ?? this.opts.model, system_fingerprint: this.buildInfo };
      const usage = { prompt_tokens: promptTokens, completion_tokens: 5, total_tokens: promptTokens + 5 };
      const message = special.call ? { role: 'assistant', content: null, tool_calls: [special.call] } : { role: 'assistant', content: special.text };
      return { ...base, object: 'chat.completion', choices: [{ index: 0, message, finish_reason: special.call ? 'tool_calls' : 'stop' }], usage };
    }
    const n = this.#tokens(json);
    let text = '';
    for (let i = 0; i < n; i++) text += fakePiece(i);
    const base = { id: `fake-${Date.now().toString(36)}`, created: Math.floor(Date.now() / 1000), model: json.model ?? this.opts.model, system_fingerprint: this.buildInfo };
    const usage = { prompt_tokens: promptTokens, completion_tokens: n, total_tokens: promptTokens + n };
    return chat
      ? { ...base, object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop' }], usage }
      : { ...base, object: 'text_completion', choices: [{ index: 0, text, finish_reason: 'stop' }], usage };
  }

  #tokens(json) {
    const max = json.max_tokens ?? json.max_completion_tokens;
    return Number.isInteger(max) && max >= 0 ? Math.min(max, this.outputTokens) : this.outputTokens;
  }

  async #stream(res, json, chat, promptTokens, signal, sabotage, markSabotaged) {
    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', Connection: 'keep-alive' });
    const n = this.#tokens(json);
    const base = { id: `fake-${Date.now().toString(36)}`, created: Math.floor(Date.now() / 1000), model: json.model ?? this.opts.model, system_fingerprint: this.buildInfo };
    const object = chat ? 'chat.completion.chunk' : 'text_completion';
    const write = (obj) => res.write(`data: ${JSON.stringify(obj)}\n\n`);
    const special = chat ? this.#special(json) : undefined;
    if (special?.scripted) {
      // A scripted text streamed in two pieces, the way engines split words.
      const t = special.text;
      const half = Math.ceil(t.length / 2);
      write({ ...base, object, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] });
      for (const piece of [t.slice(0, half), t.slice(half)]) {
        if (piece) write({ ...base, object, choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] });
        if (sabotage) {
          markSabotaged();
          await new Promise((r) => setImmediate(r));
          res.socket?.destroy();
          return;
        }
      }
      write({ ...base, object, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] });
      if (json.stream_options?.include_usage) write({ ...base, object, choices: [], usage: { prompt_tokens: promptTokens, completion_tokens: 5, total_tokens: promptTokens + 5 } });
      res.end('data: [DONE]\n\n');
      return;
    }
    if (special?.call) {
      // The call streamed the way OpenAI does: id and name first, then the arguments in pieces.
      const f = special.call.function;
      write({ ...base, object, choices: [{ index: 0, delta: { role: 'assistant', tool_calls: [{ index: 0, id: special.call.id, type: 'function', function: { name: f.name, arguments: '' } }] }, finish_reason: null }] });
      for (const piece of [f.arguments.slice(0, 5), f.arguments.slice(5)]) write({ ...base, object, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: piece } }] }, finish_reason: null }] });
      write({ ...base, object, choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] });
      if (json.stream_options?.include_usage) write({ ...base, object, choices: [], usage: { prompt_tokens: promptTokens, completion_tokens: 5, total_tokens: promptTokens + 5 } });
      res.end('data: [DONE]\n\n');
      return;
    }
    const choice = (piece, finish) => (chat ? { index: 0, delta: piece === undefined ? {} : { ...(piece === '' ? { role: 'assistant' } : {}), content: piece }, finish_reason: finish } : { index: 0, text: piece ?? '', finish_reason: finish });
    if (chat) write({ ...base, object, choices: [choice('', null)] });
    for (let i = 0; i < n; i++) {
      if (i > 0 || !chat) await sleep(this.chunkDelayMs, signal);
      if (signal.aborted) return;
      write({ ...base, object, choices: [choice(fakePiece(i), null)] });
      if (sabotage) {
        markSabotaged();
        // Let the chunk reach the socket, then cut the connection.
        await new Promise((r) => setImmediate(r));
        res.socket?.destroy();
        return;
      }
    }
    write({ ...base, object, choices: [choice(undefined, 'stop')] });
    if (json.stream_options?.include_usage) {
      write({ ...base, object, choices: [], usage: { prompt_tokens: promptTokens, completion_tokens: n, total_tokens: promptTokens + n } });
    }
    res.end('data: [DONE]\n\n');
  }

  #control(req, res, path, url, record) {
    const q = url.searchParams;
    const on = (q.get('on') ?? '1') !== '0';
    switch (path) {
      case '/_control/crash':
        sendJson(res, 200, { crashing: true });
        if (this.opts.onCrash) this.opts.onCrash();
        return;
      case '/_control/hold':
        this.hold(on);
        return sendJson(res, 200, { holding: this.holding });
      case '/_control/release':
        return sendJson(res, 200, { released: q.get('all') ? this.releaseAll() : this.release(Number(q.get('n') ?? 1)) });
      case '/_control/fail-next':
        this.failNext(Number(q.get('status') ?? 500));
        return sendJson(res, 200, { ok: true });
      case '/_control/fail-mid-stream':
        this.failMidStream();
        return sendJson(res, 200, { ok: true });
      case '/_control/loading':
        this.setLoading(on);
        return sendJson(res, 200, { loading: this.loading });
      case '/_control/health':
        this.setHealthStatus(q.get('status') ? Number(q.get('status')) : undefined);
        return sendJson(res, 200, { healthStatus: this.healthStatus ?? null });
      case '/_control/delay':
        this.setDelay(Number(q.get('ms') ?? 0));
        return sendJson(res, 200, { delayMs: this.delayMs });
      case '/_control/env':
        if (!this.opts.env) break;
        return sendJson(res, 200, this.opts.env());
      case '/_control/state':
        return sendJson(res, 200, {
          name: this.opts.name,
          inFlight: this.inFlight,
          maxInFlight: this.maxInFlight,
          held: this.held.length,
          completed: this.completed,
          aborted: this.aborted,
          loading: this.loading,
          received: this.received,
          ...(this.opts.info ? this.opts.info() : {}),
        });
    }
    void record;
    return sendJson(res, 404, errorBody(404, `unknown control ${path}`));
  }
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
    req.on('aborted', () => reject(new Error('aborted')));
  });
}
