/** What a reload (SIGHUP) applies (config/reload.ts): model entries and aliases; every other section is named as needing a restart. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { validateConfig } from '../../src/config/load.ts';
import { reloaded, restartNeeded, roleOf } from '../../src/config/reload.ts';

const base = validateConfig({ node: { name: 'a' }, models: [{ name: 'm', engine: 'sim' }] });

describe('a reload', () => {
  it('applies models and aliases and keeps every other section as it was', () => {
    const next = validateConfig({ node: { name: 'b' }, models: [], aliases: { fast: 'm' } });
    const after = reloaded(base, next);
    assert.deepEqual(after.models, []);
    assert.deepEqual(after.aliases, next.aliases);
    assert.equal(after.node.name, 'a');
  });

  it('names the sections that changed and only a restart applies', () => {
    assert.deepEqual(restartNeeded(base, base), []);
    assert.deepEqual(restartNeeded(base, validateConfig({ node: { name: 'a' }, models: [], aliases: { x: 'm' } })), []);
    assert.deepEqual(restartNeeded(base, validateConfig({ node: { name: 'b' }, routing: { queue_max: 3 }, models: [{ name: 'm', engine: 'sim' }] })), ['node', 'routing']);
  });

  it('a node serves models, a gateway none', () => {
    assert.equal(roleOf(base), 'node');
    assert.equal(roleOf({ models: [] }), 'gateway');
  });
});
