/** Issue 41, item 4: what a many-model endpoint lists, and the entries the node makes of it (pure; engines/many/listing.ts). */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { validateConfig } from '../../src/config/load.ts';
import { entryKey } from '../../src/engines/factory.ts';
import { expandModels, MAX_LISTED, parallelFromArgs, parseListing, routerState } from '../../src/engines/many/listing.ts';

describe("an endpoint's model list", () => {
  it('keeps each id once, in order; tells a router by its statuses; skips ids no client could name', () => {
    const l = parseListing({ data: [{ id: 'a' }, { id: 'a' }, { id: '' }, { nope: 1 }, { id: 'x'.repeat(300) }, { id: 'b' }] }, 256)!;
    assert.deepEqual(l.ids, ['a', 'b']);
    assert.equal(l.router, false);
    assert.equal(l.skipped.length, 1);
    const r = parseListing({ data: [{ id: 'alpha', status: { value: 'unloaded', failed: true, exit_code: 1, args: ['--parallel', '2'] } }] }, 256)!;
    assert.equal(r.router, true);
    assert.deepEqual(r.status.get('alpha'), { value: 'unloaded', failed: true, exitCode: 1, args: ['--parallel', '2'] });
    assert.equal(parseListing({ error: 'x' }, 256), undefined, 'not a list: the caller keeps what it had');
    const many = parseListing({ data: Array.from({ length: MAX_LISTED + 5 }, (_, i) => ({ id: `m${i}` })) }, 256)!;
    assert.equal(many.ids.length, MAX_LISTED);
  });

  it("reads a router's states and a child's slots in our words", () => {
    const s = (value: string) => ({ value, failed: false, args: [] });
    assert.deepEqual(['loaded', 'sleeping', 'loading', 'downloading', 'unloaded', 'what'].map((v) => routerState(s(v))), ['loaded', 'loaded', 'loading', 'loading', 'unloaded', 'unloaded']);
    assert.equal(parallelFromArgs(['llama-server', '--parallel', '3']), 3);
    assert.equal(parallelFromArgs(['llama-server', '-np', '2']), 2);
    assert.equal(parallelFromArgs(['llama-server', '--model', 'x.gguf']), undefined);
  });
});

describe('the entries of a models: auto entry', () => {
  const config = validateConfig({
    models: [
      { name: 'here', engine: 'sim' },
      { name: 'many', engine: 'openai', url: 'http://127.0.0.1:8080', models: 'auto', idle_unload: '5m' },
    ],
  });

  it('are one per listed id, named by it; a router keeps the entry on demand, another endpoint is always', () => {
    const router = parseListing({ data: [{ id: 'alpha', status: { value: 'loaded' } }, { id: 'emb', status: { value: 'unloaded', args: ['--embeddings'] } }] }, 256)!;
    const out = expandModels(config.models, (m) => (m.name === 'many' ? router : undefined));
    assert.deepEqual(
      out.map((m) => [m.name, m.load, m.workloads, m.listed]),
      [
        ['here', 'always', undefined, undefined],
        ['alpha', 'on_demand', undefined, { group: 'many', router: true }],
        ['emb', 'on_demand', ['embeddings'], { group: 'many', router: true }],
      ],
    );
    assert.ok(!('models' in out[1]), 'a listed entry is one model');
    const plain = parseListing({ data: [{ id: 'alpha' }] }, 256)!;
    assert.equal(expandModels(config.models, () => plain)[1].load, 'always', 'the node cannot load or unload through an endpoint that is not a router');
    assert.deepEqual(expandModels(config.models, () => undefined).map((m) => m.name), ['here'], 'nothing listed yet: no entries');
  });

  it('are equal for equal lists, whatever the statuses say now, so a refresh keeps their backends', () => {
    const loaded = parseListing({ data: [{ id: 'alpha', status: { value: 'loaded', args: ['--port', '41000'] } }] }, 256)!;
    const unloaded = parseListing({ data: [{ id: 'alpha', status: { value: 'unloaded', args: ['--port', '0'] } }] }, 256)!;
    assert.equal(entryKey(expandModels(config.models, () => loaded)[1]), entryKey(expandModels(config.models, () => unloaded)[1]));
  });
});
