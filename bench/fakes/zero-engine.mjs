// A zero-delay OpenAI-compatible engine for the overhead benchmark: plain
// node:http, nothing but the answer. POST with "stream":true in the body
// gets a 16-chunk SSE stream (14 content chunks, the finish chunk, a usage
// chunk, then [DONE]), written chunk by chunk; any other POST a small chat
// completion JSON. GET /health and /v1/models answer for the node's probes.
// Usage: node zero-engine.mjs HOST PORT
import http from 'node:http';

const [host = '127.0.0.1', port = '18700'] = process.argv.slice(2);
const created = Math.floor(Date.now() / 1000);
const JSON_ANSWER = JSON.stringify({
  id: 'chatcmpl-zero', object: 'chat.completion', created, model: 'm',
  choices: [{ index: 0, message: { role: 'assistant', content: 'The zero engine says hello.' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 8, completion_tokens: 6, total_tokens: 14 },
});
const chunk = (delta, finish) =>
  `data: ${JSON.stringify({ id: 'chatcmpl-zero', object: 'chat.completion.chunk', created, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const SSE = [];
for (let i = 0; i < 14; i++) SSE.push(chunk(i === 0 ? { role: 'assistant', content: 'tok0' } : { content: ` tok${i}` }, null));
SSE.push(chunk({}, 'stop'));
SSE.push(`data: ${JSON.stringify({ id: 'chatcmpl-zero', object: 'chat.completion.chunk', created, model: 'm', choices: [], usage: { prompt_tokens: 8, completion_tokens: 14, total_tokens: 22 } })}\n\n`);
SSE.push('data: [DONE]\n\n');
const MODELS = JSON.stringify({ object: 'list', data: [{ id: 'm', object: 'model', owned_by: 'bench' }] });

http
  .createServer((req, res) => {
    if (req.method === 'GET') {
      if (req.url === '/health') return void res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
      if (req.url === '/v1/models') return void res.writeHead(200, { 'content-type': 'application/json' }).end(MODELS);
      return void res.writeHead(404).end();
    }
    const parts = [];
    req.on('data', (d) => parts.push(d));
    req.on('end', () => {
      const body = Buffer.concat(parts).toString('latin1');
      if (/"stream"\s*:\s*true/.test(body)) {
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
        for (const c of SSE) res.write(c);
        res.end();
      } else {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(JSON_ANSWER) });
        res.end(JSON_ANSWER);
      }
    });
  })
  .listen(Number(port), host, () => console.log(`zero engine on ${host}:${port}`));
