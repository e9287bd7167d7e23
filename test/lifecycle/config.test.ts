import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseConfigText } from '../../src/config/load.ts';
import { problems } from '../helpers/config.ts';

describe('model lifecycle config (SPEC section 11)', () => {
  it('defaults: always, 15m idle unload, memory auto, budget auto, load_wait 5m, scale_after 10s', () => {
    const c = parseConfigText('models: [{name: m, engine: sim}]');
    const m = c.models[0];
    assert.equal(m.load, 'always');
    assert.equal(m.idle_unload, 15 * 60_000);
    assert.equal(m.memory, 'auto');
    assert.equal(c.node.memory_budget, 'auto');
    assert.equal(c.routing.load_wait, 300_000);
    assert.equal(c.routing.scale_after, 10_000);
  });

  it('reads sizes, "0" for never and sim.load_ms', () => {
    const c = parseConfigText(
      'node: {memory_budget: 16GiB}\nrouting: {load_wait: 30s, scale_after: 2s}\nmodels: [{name: m, engine: sim, load: on_demand, idle_unload: "0", memory: 4GiB, sim: {load_ms: 1500}}]',
    );
    assert.equal(c.node.memory_budget, 16 * 1024 ** 3);
    const m = c.models[0];
    assert.equal(m.load, 'on_demand');
    assert.equal(m.idle_unload, 0);
    assert.equal(m.memory, 4 * 1024 ** 3);
    assert.equal(m.engine === 'sim' && m.sim.load_ms, 1500);
    assert.equal(c.routing.load_wait, 30_000);
  });

  it('an openai entry on demand is an error that says why', () => {
    const p = problems('models: [{name: m, engine: openai, url: "http://127.0.0.1:9", load: on_demand}]');
    assert.equal(p.length, 1, p.join('\n'));
    assert.match(p[0], /models\[0\]\.load/);
    assert.match(p[0], /cannot start or stop a server it does not run/);
  });

  it('bad values name their key', () => {
    assert.match(problems('models: [{name: m, engine: sim, load: sometimes}]').join('\n'), /models\[0\]\.load.*always or on_demand/);
    assert.match(problems('models: [{name: m, engine: sim, memory: lots}]').join('\n'), /models\[0\]\.memory/);
    assert.match(problems('node: {memory_budget: -1}').join('\n'), /node\.memory_budget/);
    assert.match(problems('models: [{name: m, engine: sim, idle_unload: soon}]').join('\n'), /models\[0\]\.idle_unload/);
  });
});
