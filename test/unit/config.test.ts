import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { parseConfigText } from '../../src/config/load.ts';
import { parseDuration, parseSize } from '../../src/config/units.ts';
import { tempDir } from '../helpers/node.ts';
import { problems } from '../helpers/config.ts';

const run = promisify(execFile);
const BIN = path.resolve('bin/viiwork.js');

describe('config', () => {
  it('fills every default of SPEC section 2', () => {
    const c = parseConfigText('models: [{name: m, engine: sim}]');
    assert.equal(c.api.port, 8086);
    assert.equal(c.api.host, '0.0.0.0');
    assert.equal(c.api.max_body, 32 * 1024 * 1024);
    assert.equal(c.mesh.port, 7946);
    assert.equal(c.mesh.network, 'auto');
    assert.equal(c.mesh.open, false);
    assert.equal(c.mesh.mdns, true);
    assert.equal(c.mesh.rejoin_interval, 60_000);
    assert.equal(c.mesh.capacity_poll, 1000);
    assert.equal(c.mesh.label, 'viiwork-v2');
    assert.equal(c.mesh.tailnet_socket, '/var/run/tailscale/tailscaled.sock');
    assert.deepEqual(c.routing, { performance: true, queue_max: 64, queue_timeout: 20_000, batch_queue_timeout: 600_000, forward_retry: 1, forward_wait: 0, interactive_reserve: 1, interactive_reserve_for: 30_000, stale_after: 3000, prefix_affinity: true, load_wait: 300_000, scale_after: 10_000 });
    assert.deepEqual(c.api.allowed_hosts, []);
    assert.equal(c.api.keys_env, '');
    assert.equal(c.api.keys_file, '');
    assert.equal(c.api.protect_ops, false);
    assert.equal(c.api.stream_stall, 60_000);
    assert.equal(c.api.max_model_name, 256);
    assert.equal(c.api.header_timeout, 30_000);
    assert.equal(c.api.body_idle_timeout, 30_000);
    assert.equal(c.api.write_stall, 60_000);
    assert.equal(c.api.max_json_depth, 64);
    assert.equal(c.models[0].api_key_env, undefined);
    assert.equal(c.models[0].parallel, 4);
    assert.equal(c.models[0].replicas, 1);
    assert.equal(c.models[0].context, 8192);
    assert.ok(c.node.state_dir.endsWith('.local/state/viiwork') && !c.node.state_dir.startsWith('~'));
  });

  it('names the key path of a bad value', () => {
    assert.deepEqual(problems('models:\n - {name: a, engine: sim}\n - {name: b, engine: sim, parallel: 0}'), ['models[1].parallel: expected a positive integer']);
    assert.deepEqual(problems('routing: {queue_timeout: soon}'), ['routing.queue_timeout: expected a duration such as "500ms", "20s" or "10m", got "soon"']);
    assert.deepEqual(problems('node: {name: "-bad"}'), ['node.name: expected a name matching [A-Za-z0-9][A-Za-z0-9._-]{0,62}']);
    assert.deepEqual(problems('routing: {forward_wait: soon}'), ['routing.forward_wait: expected 0 (off) or a duration such as "500ms" or "2s", got "soon"']);
  });

  it('routing.forward_wait may be off: 0 or 0s', () => {
    for (const v of ['0', '0s', '"0"']) assert.equal(parseConfigText(`routing: {forward_wait: ${v}}`).routing.forward_wait, 0);
  });

  it('rejects unknown keys, including another engine’s keys', () => {
    assert.deepEqual(problems('apii: {}'), ['apii: unknown key']);
    assert.deepEqual(problems('models: [{name: a, engine: sim, url: "http://x"}]'), ['models[0].url: unknown key']);
    assert.deepEqual(problems('models: [{name: a, engine: openai, url: "http://127.0.0.1:1", path: /m.gguf}]'), ['models[0].path: unknown key']);
    assert.deepEqual(problems('models: [{name: a, engine: vllm}]'), ['models[0].engine: expected one of llamacpp, openai, embedded, sim']);
  });

  it('refuses a zero or negative duration, naming the key', () => {
    for (const key of ['mesh.rejoin_interval', 'mesh.capacity_poll', 'routing.queue_timeout', 'routing.stale_after', 'api.stream_stall', 'api.header_timeout', 'api.body_idle_timeout', 'api.write_stall']) {
      const [section, name] = key.split('.');
      assert.deepEqual(problems(`${section}: {${name}: 0s}`), [`${key}: expected a duration greater than zero, got "0s"`]);
    }
    assert.deepEqual(problems('models: [{name: m, engine: llamacpp, path: /m.gguf, startup_timeout: 0ms}]'), ['models[0].startup_timeout: expected a duration greater than zero, got "0ms"']);
  });

  it('takes api_key_env on every engine, as the name of a variable', () => {
    const c = parseConfigText(
      'models:\n - {name: a, engine: sim, api_key_env: K}\n - {name: b, engine: openai, url: "http://127.0.0.1:1", api_key_env: K}\n - {name: c, engine: llamacpp, path: /m.gguf, api_key_env: K}\n - {name: d, engine: embedded, path: /m.gguf, api_key_env: K}',
    );
    assert.deepEqual(c.models.map((m) => m.api_key_env), ['K', 'K', 'K', 'K']);
    assert.deepEqual(problems('models: [{name: a, engine: sim, api_key_env: "my key"}]'), ['models[0].api_key_env: expected the name of an environment variable, such as LLAMA_KEY']);
  });

  it('parses durations and sizes', () => {
    assert.equal(parseDuration('500ms'), 500);
    assert.equal(parseDuration('20s'), 20_000);
    assert.equal(parseDuration('10m'), 600_000);
    assert.equal(parseDuration('10'), undefined);
    assert.equal(parseSize('32MiB'), 33_554_432);
    assert.equal(parseSize('1KB'), 1000);
    assert.equal(parseSize('big'), undefined);
    assert.equal(parseConfigText('api: {max_body: 1KiB}').api.max_body, 1024);
  });

  it('viiwork check exits non-zero naming the key path, and passes a good file', async () => {
    const dir = tempDir();
    const bad = path.join(dir, 'bad.yaml');
    fs.writeFileSync(bad, 'models:\n  - {name: a, engine: sim}\n  - {name: b, engine: sim, parallel: -1}\n');
    await assert.rejects(run(process.execPath, [BIN, 'check', '--config', bad]), (err: { code: number; stderr: string }) => {
      assert.notEqual(err.code, 0);
      assert.match(err.stderr, /models\[1\]\.parallel: expected a positive integer/);
      return true;
    });
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('VIIWORK_')));
    const { stdout } = await run(process.execPath, [BIN, 'check', '--no-ports', '--config', 'examples/single-node.yaml'], { env });
    assert.match(stdout, /ok/);
  });
});
