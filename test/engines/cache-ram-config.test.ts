/**
 * Issue 41, item 2: the `cache_ram` key of a llamacpp model (MiB; the
 * engine's 8192 by default; 0 off) and `sim.cache_ram` (tokens), as the config
 * schema reads them; and the flags the node passes llama-server for it, the
 * operator's own flags winning.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { stringify } from 'yaml';
import { ConfigError, parseConfigText } from '../../src/config/load.ts';
import { cacheRamPlan, poolSettings, STATE_OVERHEAD_BYTES_PER_TOKEN } from '../../src/engines/llamacpp/cache-ram.ts';

function parse(model: Record<string, unknown>) {
  return parseConfigText(stringify({ node: { name: 'n1' }, models: [{ name: 'm', ...model }] }));
}

function problem(model: Record<string, unknown>): string {
  try {
    parse(model);
  } catch (err) {
    assert.ok(err instanceof ConfigError, String(err));
    return err.message;
  }
  assert.fail('the config was accepted');
}

const llama = { engine: 'llamacpp', path: '/models/m.gguf' };

describe('cache_ram in the config', () => {
  it('a llamacpp model defaults to the engine’s 8192 MiB, takes 0 (off) or a number of MiB', () => {
    const m = (x: Record<string, unknown>) => parse({ ...llama, ...x }).models[0] as { cache_ram: number };
    assert.equal(m({}).cache_ram, 8192);
    assert.equal(m({ cache_ram: 0 }).cache_ram, 0);
    assert.equal(m({ cache_ram: 2048 }).cache_ram, 2048);
  });

  it('refuses what is not a whole number of MiB, saying what to write', () => {
    assert.match(problem({ ...llama, cache_ram: -1 }), /cache_ram.*unlimited one \(-1\) is not accepted/);
    assert.match(problem({ ...llama, cache_ram: 1.5 }), /cache_ram.*whole number of MiB/);
    assert.match(problem({ ...llama, cache_ram: '8GiB' }), /cache_ram.*whole number of MiB such as 8192/);
    assert.match(problem({ engine: 'sim', cache_ram: 10 }), /cache_ram.*unknown key/, 'the sim’s pool is sim.cache_ram');
  });

  it('sim.cache_ram is a pool of simulated tokens, off when left out', () => {
    const sim = (x: Record<string, unknown>) => (parse({ engine: 'sim', sim: x }).models[0] as { sim: { cache_ram?: number } }).sim.cache_ram;
    assert.equal(sim({}), undefined);
    assert.equal(sim({ cache_ram: 100_000 }), 100_000);
    assert.match(problem({ engine: 'sim', sim: { cache_ram: -5 } }), /sim\.cache_ram.*non-negative integer/);
  });
});

describe('the flags the node passes llama-server for its RAM pool', () => {
  it('--cache-ram from the config, idle-slot copying off; nothing for an engine without the flag', () => {
    assert.deepEqual(cacheRamPlan(8192, [], true), { args: ['--cache-ram', '8192', '--no-cache-idle-slots'], mib: 8192, idleSlots: false, similarity: 0.1 });
    assert.deepEqual(cacheRamPlan(0, [], true).args, ['--cache-ram', '0'], 'off: the engine turns idle-slot copying off itself');
    assert.deepEqual(cacheRamPlan(8192, [], false), { args: [], mib: 0, idleSlots: false, similarity: 0.1 });
  });

  it('the operator’s own flags win, and the model follows them', () => {
    const p = cacheRamPlan(8192, ['-cram', '512', '--cache-idle-slots', '-sps', '0.3'], true);
    assert.deepEqual(p, { args: [], mib: 512, idleSlots: true, similarity: 0.3 });
    assert.deepEqual(cacheRamPlan(8192, ['--cache-ram=0'], true).mib, 0);
  });

  it('the pool in tokens: MiB over the KV bytes a token takes, plus its state’s overhead', () => {
    const s = poolSettings(cacheRamPlan(1, [], true), 512);
    assert.equal(s?.tokens, Math.floor(1024 * 1024 / (512 + STATE_OVERHEAD_BYTES_PER_TOKEN)));
    assert.equal(poolSettings(cacheRamPlan(0, [], true), 512), undefined, 'cache_ram 0: no pool');
    assert.equal(poolSettings(cacheRamPlan(8192, ['--cache-ram', '-1'], true), 512)?.tokens, Infinity);
  });
});
