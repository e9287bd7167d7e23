/**
 * `viiwork init` finds what is on the machine (issue 19): two GGUF files in
 * --models DIR, the real llama-server on PATH and an OpenAI-compatible server
 * on 127.0.0.1:8080 become three entries; the file passes `check` and a node
 * runs it (the GGUF entries load on demand through the real llama-server).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { describeGguf, modelName } from '../../src/cli/discover.ts';
import { startNode, tempDir, type TestNode } from '../helpers/node.ts';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { realLlamaServer } from '../helpers/engine.ts';

const run = promisify(execFile);
const BIN = path.resolve('bin/viiwork.js');
const { binary: LLAMA, skip } = realLlamaServer();

describe('describing a GGUF from its metadata', () => {
  it('names, context and workloads', () => {
    assert.equal(modelName({ 'general.name': 'Qwen2.5 7B Instruct' }, '/m/x.gguf'), 'qwen2.5-7b-instruct');
    assert.equal(modelName({}, '/m/Llama-3.2-1B.Q4_K_M.gguf'), 'llama-3.2-1b.q4_k_m');
    const chat = describeGguf({ 'general.architecture': 'llama', 'llama.context_length': 131072 }, '/m/a.gguf');
    assert.deepEqual([chat.context, chat.workloads], [8192, ['chat', 'completion']]);
    const emb = describeGguf({ 'general.architecture': 'bert', 'bert.context_length': 512, 'bert.pooling_type': 2 }, '/m/e.gguf');
    assert.deepEqual([emb.context, emb.workloads], [512, ['embeddings']]);
    assert.deepEqual(describeGguf({ 'general.architecture': 'qwen3', 'qwen3.pooling_type': 4 }, '/m/r.gguf').workloads, ['rerank']);
  });
});

describe('viiwork init on a machine with GGUFs, llama-server and an engine on loopback', { skip }, () => {
  const dir = tempDir('od-init');
  const models = path.join(dir, 'models');
  const bin = path.join(dir, 'bin');
  let fake: http.Server | undefined;
  let port8080 = true;
  let node: TestNode | undefined;
  before(async () => {
    fs.mkdirSync(models);
    fs.mkdirSync(bin);
    writeTinyGguf(path.join(models, 'alpha.gguf'), { seed: 1 });
    writeTinyGguf(path.join(models, 'beta.gguf'), { seed: 2 });
    fs.symlinkSync(LLAMA, path.join(bin, 'llama-server'));
    fake = http.createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ id: 'served-elsewhere', object: 'model' }] }));
    });
    await new Promise<void>((resolve) => {
      fake!.once('error', () => ((port8080 = false), resolve()));
      fake!.listen(8080, '127.0.0.1', () => resolve());
    });
  });
  after(async () => {
    await node?.stop();
    await new Promise((r) => (fake?.listening ? fake.close(r) : r(undefined)));
  });

  it('writes the three entries with why, check passes, and a node serves a found GGUF on demand', async (t) => {
    if (!port8080) t.diagnostic('127.0.0.1:8080 is taken on this machine: the openai entry is not asserted');
    const file = path.join(dir, 'viiwork.yaml');
    const env = { ...process.env, PATH: `${bin}:/usr/bin:/bin`, HOME: dir };
    const r = await run(process.execPath, [BIN, 'init', '-o', file, '--name', 'initbox', '--open', '--models', models], { env });
    // Either format llama-server prints: "(build b4748-c392e50)" or "(version 0.5.0-dev, commit de3ff81)".
    assert.match(r.stdout, /llama-server: .*llama-server \((build b\d+-[0-9a-f]+|version \d+\.\d+\S*(, build \d+)?, commit [0-9a-f]+)\)/);
    assert.match(r.stdout, /model viiwork-tiny-test: .*alpha\.gguf: llama, trained context 256/);
    const doc = parse(fs.readFileSync(file, 'utf8'));
    const gguf = doc.models.filter((m: any) => m.engine === 'llamacpp');
    assert.deepEqual(gguf.map((m: any) => m.name).sort(), ['viiwork-tiny-test', 'viiwork-tiny-test-2']);
    for (const m of gguf) {
      assert.equal(m.load, 'on_demand');
      assert.equal(m.memory, 'auto');
      assert.equal(m.context, 512);
      assert.deepEqual(m.workloads, ['chat', 'completion']);
    }
    if (port8080) {
      assert.match(r.stdout, /llama-server answers on http:\/\/127\.0\.0\.1:8080: served-elsewhere/);
      assert.deepEqual(doc.models.find((m: any) => m.engine === 'openai'), { name: 'served-elsewhere', engine: 'openai', url: 'http://127.0.0.1:8080', parallel: 4 });
    }
    const check = await run(process.execPath, [BIN, 'check', '--config', file, '--no-ports'], { env });
    assert.match(check.stdout, /ok \(node "initbox"/);
    // serve runs it (in this process, on loopback, with the file's models): a found GGUF loads on its first request.
    node = await startNode({ node: { name: 'initbox' }, routing: { queue_timeout: '60s' }, models: doc.models.map((m: any) => (m.engine === 'llamacpp' ? { ...m, llamacpp: { ...m.llamacpp, args: ['-t', '1'] } } : m)) });
    const a = await fetch(`${node.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'viiwork-tiny-test', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
    });
    assert.equal(a.status, 200, await a.clone().text());
  });
});
