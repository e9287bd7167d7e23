import assert from 'node:assert/strict';
import { test } from 'node:test';
import { requestUrl } from '../../src/api/request-url.ts';

// The fast path must read every path exactly as WHATWG's URL does, or a request would reach another handler.
const PATHS = [
  '/v1/chat/completions',
  '/v1/models',
  '/',
  '/v1/models/my-model_7',
  '/v1//chat/completions',
  '//evil.example/v1/models',
  '/v1/../v1/chat/completions',
  '/v1/./models',
  '/v1/models/a.gguf',
  '/v1/models/caf%C3%A9',
  '/v1/models/café',
  '/v1/chat/completions?host=a&host=b&prefer=c',
  '/v1/decisions?since=12',
  '/v1\\chat\\completions',
  '/v1/chat/completions#frag',
  '/v1/models/a b',
  '',
];

test('a request path reads as WHATWG URL reads it, plain or odd', () => {
  for (const raw of PATHS) {
    const ours = requestUrl(raw);
    const theirs = new URL(raw || '/', 'http://node');
    assert.equal(ours.pathname, theirs.pathname, raw);
    assert.deepEqual([...ours.searchParams], [...theirs.searchParams], raw);
  }
});

test('a query is still read on a plain path', () => {
  const u = requestUrl('/v1/chat/completions?host=a&host=b');
  assert.deepEqual(u.searchParams.getAll('host'), ['a', 'b']);
  assert.equal(requestUrl('/v1/chat/completions').searchParams.get('host'), null);
  assert.equal(requestUrl(undefined).pathname, '/');
});
