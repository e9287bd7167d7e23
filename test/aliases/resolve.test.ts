/** Alias resolution on the entry node: real models win, fallbacks in order, served beats free. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { resolveAlias } from '../../src/aliases/resolve.ts';
import { AliasTable } from '../../src/aliases/table.ts';

const table = new AliasTable();
table.set('chat', 'big', ['medium', 'small'], 'n1');
table.set('qwen', 'other', [], 'n1'); // shadowed by a real model of that name
const servedSet = (...models: string[]) => (m: string) => models.includes(m);
const real = servedSet('big', 'medium', 'small', 'qwen', 'embedder');

describe('resolveAlias', () => {
  it('a real model name always wins over an alias of the same name', () => {
    assert.deepEqual(resolveAlias(table, 'qwen', servedSet('other'), real), { kind: 'model' });
  });

  it('a name that is neither an alias nor a model goes down the model path', () => {
    assert.deepEqual(resolveAlias(table, 'nope', servedSet('big'), real), { kind: 'model' });
  });

  it('resolves to the target when it is served', () => {
    assert.deepEqual(resolveAlias(table, 'chat', servedSet('big', 'medium', 'small'), real), { kind: 'alias', alias: 'chat', model: 'big' });
  });

  it('falls back in order to the first served fallback', () => {
    assert.deepEqual(resolveAlias(table, 'chat', servedSet('small', 'medium'), real), { kind: 'alias', alias: 'chat', model: 'medium' });
    assert.deepEqual(resolveAlias(table, 'chat', servedSet('small'), real), { kind: 'alias', alias: 'chat', model: 'small' });
  });

  it('is unserved when no target is served for this workload', () => {
    assert.deepEqual(resolveAlias(table, 'chat', servedSet('embedder'), real), { kind: 'unserved', alias: 'chat' });
  });

  it('asks only whether a model is served, so a served but full target is kept (the request queues)', () => {
    const asked: string[] = [];
    const out = resolveAlias(table, 'chat', (m) => (asked.push(m), m === 'big'), real);
    assert.deepEqual(out, { kind: 'alias', alias: 'chat', model: 'big' });
    assert.deepEqual(asked, ['big'], 'no fallback is consulted once the target is served');
  });

  it('a removed alias is no alias', () => {
    const t = new AliasTable();
    t.set('gone', 'big', [], 'n1');
    t.remove('gone', 'n1');
    assert.deepEqual(resolveAlias(t, 'gone', servedSet('big'), real), { kind: 'model' });
  });
});
