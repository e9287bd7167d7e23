// A fake engine that queues like llama-server: at most SLOTS requests in
// progress, the rest wait FIFO inside the engine. A request that gets a
// slot sends its first token FIRST_MS later, then TOKENS more tokens
// TOKEN_MS apart (so it holds the slot FIRST_MS + TOKENS × TOKEN_MS), then
// finish, usage (when stream_options.include_usage) and [DONE]. The
// response headers go out with the first token, as llama-server's do.
// A non-streamed request gets the whole JSON at the end, with usage and
// llama-server's `timings.prompt_ms`.
// GET /health, /v1/models; GET /stats: slots, busy, queued, served, and the
// time requests waited in this engine's queue.
// Usage: node slot-engine.mjs HOST PORT SLOTS FIRST_MS [TOKENS=5] [TOKEN_MS=10]
import http from 'node:http';

const [host, port, slotsArg, firstArg, tokensArg = '5', tokenMsArg = '10'] = process.argv.slice(2);
const SLOTS = Number(slotsArg);
const FIRST_MS = Number(firstArg);
const TOKENS = Number(tokensArg);
const TOKEN_MS = Number(tokenMsArg);

let busy = 0;
let served = 0;
let maxQueued = 0;
let waitedSum = 0;
let waitedMax = 0;
let waitedCount = 0;
const queue = [];

const created = Math.floor(Date.now() / 1000);
const chunk = (id, delta, finish) =>
  `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;

function pump() {
  while (busy < SLOTS && queue.length) {
    const job = queue.shift();
    if (job.gone) continue;
    busy++;
    const waited = performance.now() - job.at;
    waitedSum += waited;
    waitedCount++;
    if (waited > waitedMax) waitedMax = waited;
    run(job);
  }
}

function run(job) {
  const { res, stream, usage, id } = job;
  let step = 0;
  let timer;
  const finish = () => {
    clearTimeout(timer);
    if (job.released) return;
    job.released = true;
    busy--;
    served++;
    setImmediate(pump);
  };
  res.on('close', finish);
  const tick = () => {
    if (res.destroyed) return finish();
    if (stream) {
      if (step === 0) res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.write(chunk(id, step === 0 ? { role: 'assistant', content: 'tok0' } : { content: ` tok${step}` }, null));
    }
    if (step < TOKENS) {
      step++;
      timer = setTimeout(tick, TOKEN_MS);
      return;
    }
    const u = { prompt_tokens: 12, completion_tokens: TOKENS + 1, total_tokens: 13 + TOKENS };
    if (stream) {
      let tail = chunk(id, {}, 'stop');
      if (usage) tail += `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model: 'm', choices: [], usage: u })}\n\n`;
      res.end(`${tail}data: [DONE]\n\n`);
    } else {
      const text = Array.from({ length: TOKENS + 1 }, (_, i) => `tok${i}`).join(' ');
      const body = JSON.stringify({ id, object: 'chat.completion', created, model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop' }], usage: u, timings: { prompt_ms: FIRST_MS } });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
    }
    finish();
  };
  timer = setTimeout(tick, FIRST_MS);
}

let seq = 0;
http
  .createServer((req, res) => {
    if (req.method === 'GET') {
      const json = (o) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(o));
      if (req.url === '/health') return json({ status: 'ok' });
      if (req.url === '/v1/models') return json({ object: 'list', data: [{ id: 'm', object: 'model', owned_by: 'bench' }] });
      if (req.url === '/stats') return json({ slots: SLOTS, first_ms: FIRST_MS, busy, queued: queue.filter((j) => !j.gone).length, served, max_queued: maxQueued, queue_wait_mean_ms: waitedCount ? waitedSum / waitedCount : 0, queue_wait_max_ms: waitedMax });
      if (req.url === '/stats/reset') {
        served = maxQueued = waitedSum = waitedMax = waitedCount = 0;
        return json({ ok: true });
      }
      return void res.writeHead(404).end();
    }
    const parts = [];
    req.on('data', (d) => parts.push(d));
    req.on('end', () => {
      let doc = {};
      try {
        doc = JSON.parse(Buffer.concat(parts).toString('utf8'));
      } catch {
        return void res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":{"message":"bad json"}}');
      }
      const job = { res, at: performance.now(), stream: doc.stream === true, usage: doc.stream_options?.include_usage === true, id: `chatcmpl-${port}-${seq++}`, gone: false, released: false };
      res.on('close', () => (job.gone = true));
      queue.push(job);
      if (queue.length > maxQueued) maxQueued = queue.length;
      pump();
    });
  })
  .listen(Number(port), host, () => console.log(`slot engine on ${host}:${port}: ${SLOTS} slots, first token ${FIRST_MS} ms, ${TOKENS} × ${TOKEN_MS} ms`));
