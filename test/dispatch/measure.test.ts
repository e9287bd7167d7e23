/** Score measurement counts the prompt tokens the engine processed, not those its prompt cache served. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { measure } from '../../src/dispatch/execute/measure.ts';

describe('measure', () => {
  it('a stream: first content chunk since the slot grant, prompt tokens less cached ones', () => {
    assert.deepEqual(measure(100, { firstContentAt: 350, promptTokens: 2000, cachedTokens: 1500 }), { ttftMs: 250, promptTokens: 500 });
    assert.deepEqual(measure(100, { firstContentAt: 350, promptTokens: 2000 }), { ttftMs: 250, promptTokens: 2000 });
  });
  it('a whole answer: the engine’s own prompt time and usage, cached tokens taken off', () => {
    const body = Buffer.from(JSON.stringify({ usage: { prompt_tokens: 900, prompt_tokens_details: { cached_tokens: 800 } }, timings: { prompt_ms: 12 } }));
    assert.deepEqual(measure(0, { body }), { ttftMs: 12, promptTokens: 100 });
  });
  it('nothing to learn without both a time and a token count', () => {
    assert.equal(measure(0, { body: Buffer.from('{"usage":{"prompt_tokens":9}}') }), undefined);
    assert.equal(measure(0, { body: Buffer.from('not json') }), undefined);
    assert.equal(measure(0, { firstContentAt: 5 }), undefined);
  });
});
