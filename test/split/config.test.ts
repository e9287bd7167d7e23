/**
 * Issue 45: the config keys of a model bigger than one host. `split` on a
 * llamacpp entry (false, auto, or the members that may lend) and
 * `node.lend_memory` (off by default); every bad value is an error naming
 * its key and the fix.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, parseConfigText } from '../../src/config/load.ts';
import { preflight } from '../../src/preflight/preflight.ts';

function findings(text: string): { key: string; message: string; fix: string }[] {
  try {
    parseConfigText(text);
  } catch (err) {
    if (err instanceof ConfigError) return err.findings.map((f) => ({ key: f.key, message: f.message, fix: f.fix }));
    throw err;
  }
  return [];
}

const entry = (extra: string) => `models: [{name: big, engine: llamacpp, path: /m/big.gguf${extra}}]`;

describe('config: split and lend_memory', () => {
  it('defaults: split false, lend_memory false, rpc_server beside llama-server', () => {
    const c = parseConfigText(entry(''));
    assert.equal((c.models[0] as { split?: unknown }).split, false);
    assert.equal(c.node.lend_memory, false);
    assert.equal(c.node.rpc_server, '');
  });

  it('takes split: auto, a list of members, and lend_memory: true', () => {
    assert.equal((parseConfigText(entry(', split: auto')).models[0] as { split?: unknown }).split, 'auto');
    assert.deepEqual((parseConfigText(entry(', split: [gpu2, gpu3]')).models[0] as { split?: unknown }).split, ['gpu2', 'gpu3']);
    assert.equal(parseConfigText('node: {lend_memory: true}').node.lend_memory, true);
  });

  it('refuses bad split values, each naming the key and the fix', () => {
    const cases: [string, RegExp, string][] = [
      [', split: yes', /expected false, auto, or a list of member names/, 'models[0].split'],
      [', split: true', /expected false, auto, or a list of member names/, 'models[0].split'],
      [', split: []', /at least one member name/, 'models[0].split'],
      [', split: [gpu2, gpu2]', /each member once/, 'models[0].split'],
      [', split: ["-bad"]', /member names/, 'models[0].split[0]'],
      [', split: auto, replicas: 2', /one llama-server.*replicas is 2/, 'models[0].split'],
    ];
    for (const [extra, message, key] of cases) {
      const f = findings(entry(extra));
      assert.equal(f.length, 1, `${extra}: ${JSON.stringify(f)}`);
      assert.equal(f[0].key, key);
      assert.match(f[0].message, message);
      assert.match(f[0].fix, /split: false|remove replicas/, `${extra}: the fix names what to write: ${f[0].fix}`);
    }
  });

  it('split on an engine that is not llamacpp is an error that says why', () => {
    for (const e of ['engine: sim', 'engine: embedded, path: /m.gguf', 'engine: openai, url: "http://127.0.0.1:9"']) {
      const f = findings(`models: [{name: m, ${e}, split: auto}]`);
      assert.equal(f.length, 1, JSON.stringify(f));
      assert.equal(f[0].key, 'models[0].split');
      assert.match(f[0].message, /split is for llamacpp entries/);
      assert.match(f[0].fix, /remove split/);
    }
  });

  it('lend_memory takes only true or false', () => {
    const f = findings('node: {lend_memory: yes}');
    assert.deepEqual(f.map((x) => [x.key, x.message]), [['node.lend_memory', 'expected true or false']]);
  });
});

describe('viiwork check on a model bigger than one host', () => {
  const llama = '/bin/true';
  const doc = (extra: string, node = '') => parseConfigText(`node: {name: n1${node}}\nmesh: {open: true}\nmodels: [{name: big, engine: llamacpp, path: /m/big.gguf, llamacpp: {binary: ${llama}}${extra}}]`);
  const findingsOf = (c: ReturnType<typeof parseConfigText>) => preflight(c, { env: { PATH: '/nowhere' }, cwd: '/' }).filter((f) => /ggml-rpc-server|RPC traffic/.test(f.message));

  it('warns when ggml-rpc-server cannot be found, naming the fix, for a split entry and for lend_memory', () => {
    const f = findingsOf(doc(', split: auto', ', lend_memory: true'));
    const missing = f.filter((x) => /not found/.test(x.message));
    assert.deepEqual(missing.map((x) => x.key).sort(), ['models[0].split', 'node.lend_memory']);
    for (const x of missing) {
      assert.equal(x.level, 'warning');
      assert.match(x.fix, /-DGGML_RPC=ON.*node\.rpc_server/);
    }
  });

  it('warns that an open mesh carries the RPC traffic unencrypted', () => {
    const f = findingsOf(doc(', split: auto'));
    assert.ok(f.some((x) => /unencrypted/.test(x.message) && /VIIWORK_MESH_SECRET/.test(x.fix)), JSON.stringify(f));
  });

  it('says nothing of it for an entry that does not split on a node that does not lend', () => {
    assert.deepEqual(findingsOf(doc('')), []);
  });

  it('finds node.rpc_server when set', () => {
    const f = findingsOf(doc(', split: auto', `, rpc_server: ${process.execPath}`));
    assert.deepEqual(f.filter((x) => /not found/.test(x.message)), []);
  });
});
