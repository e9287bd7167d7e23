/**
 * The README's first command: `viiwork serve --config examples/single-node.yaml`
 * answers the official openai SDK (chat, streamed and not, and embeddings).
 * The shipped file is used as it is, except for the loopback address, so
 * this test can run beside others that use 127.0.0.1.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { request } from 'undici';
import { parse, stringify } from 'yaml';
import { waitFor } from '../fakes/wait.ts';
import { tempDir } from '../helpers/node.ts';

const IP = '127.0.26.1';

describe('examples/single-node.yaml', () => {
  let proc: ReturnType<typeof spawn>;
  let client: OpenAI;
  before(async () => {
    const doc = parse(fs.readFileSync('examples/single-node.yaml', 'utf8'));
    const dir = tempDir();
    doc.api.host = IP;
    doc.mesh.advertise = IP;
    doc.node.state_dir = path.join(dir, 'state');
    const file = path.join(dir, 'single-node.yaml');
    fs.writeFileSync(file, stringify(doc));
    proc = spawn(process.execPath, [path.resolve('bin/viiwork.js'), 'serve', '--config', file], { stdio: 'ignore' });
    const url = `http://${IP}:${doc.api.port}`;
    await waitFor(async () => (await request(`${url}/health`)).statusCode === 200, { timeoutMs: 20_000, what: 'node up' });
    client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none', maxRetries: 0 });
  });
  after(async () => {
    proc.kill('SIGTERM');
    await new Promise((r) => proc.once('exit', r));
  });

  it('answers chat, streamed and not, and embeddings through the openai SDK', async () => {
    const models = await client.models.list();
    assert.deepEqual(models.data.map((m) => m.id), ['demo-chat', 'demo-embed']);
    const c = await client.chat.completions.create({ model: 'demo-chat', messages: [{ role: 'user', content: 'hello' }] });
    assert.match(c.choices[0].message.content ?? '', /simulated/);
    const stream = await client.chat.completions.create({ model: 'demo-chat', stream: true, messages: [{ role: 'user', content: 'hello' }] });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    assert.match(text, /simulated/);
    const e = await client.embeddings.create({ model: 'demo-embed', input: 'hello' });
    assert.ok(e.data[0].embedding.length > 0);
  });
});
