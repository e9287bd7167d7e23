/**
 * An engine connection reset before any answer came (a kept-alive socket
 * the engine had just closed: llama-server closes idle ones without saying
 * so) is asked once more on a new connection. Found in the suite under
 * load: the request right after a stream on the same llama-server got 502
 * `UND_ERR_SOCKET` and the node marked a healthy engine unhealthy. A fake
 * OpenAI-compatible engine over real HTTP resets the connections it is told
 * to; the node under test is the real one.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { waitFor } from '../fakes/wait.ts';
import { startNode, type TestNode } from '../helpers/node.ts';

describe('an engine connection reset before its answer', () => {
  let resets = 0;
  let asked = 0;
  const engine = http.createServer((req, res) => {
    if (req.method === 'GET') return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ object: 'list', data: [{ id: 'm', object: 'model' }] }));
    asked++;
    req.resume();
    req.on('end', () => {
      if (resets > 0) {
        resets--;
        req.socket.destroy();
        return;
      }
      const answer = { id: 'x', object: 'chat.completion', model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: 'hello' }, finish_reason: 'stop' }], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } };
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answer));
    });
  });
  let t: TestNode;
  const ask = () =>
    request(`${t.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }) });

  before(async () => {
    await new Promise<void>((r) => engine.listen(0, '127.0.0.1', r));
    t = await startNode({ api: { host: '127.0.152.1' }, models: [{ name: 'm', engine: 'openai', url: `http://127.0.0.1:${(engine.address() as AddressInfo).port}`, parallel: 1 }] });
    await waitFor(() => t.node.backends[0].state === 'healthy', { what: 'the engine healthy' });
  });
  after(async () => {
    await t?.stop();
    engine.closeAllConnections();
    engine.close();
  });

  it('is asked once more: the client gets the answer and the engine stays healthy', async () => {
    resets = 1;
    asked = 0;
    const r = await ask();
    const text = await r.body.text();
    assert.equal(r.statusCode, 200, text);
    assert.equal(JSON.parse(text).choices[0].message.content, 'hello');
    assert.equal(asked, 2, 'one reset, one answer');
    assert.equal(t.node.backends[0].state, 'healthy');
  });

  it('is not asked a third time: a second reset is the engine failing, answered 502 with what happened', async () => {
    resets = 2;
    asked = 0;
    const r = await ask();
    const text = await r.body.text();
    assert.equal(r.statusCode, 502, text);
    assert.match(JSON.parse(text).error.message, /engine/);
    assert.equal(asked, 2);
  });
});
