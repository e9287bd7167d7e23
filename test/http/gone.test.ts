import { test } from 'node:test';
import assert from 'node:assert/strict';
import { abortSignalOf, GoneFlag } from '../../src/http/gone.ts';

test('a client going away reaches every waiter once, in order, and not one that stopped waiting', () => {
  const flag = new GoneFlag();
  const heard: string[] = [];
  const relay = { handleEvent: (e: { target: unknown }) => heard.push(e.target === flag ? 'relay' : 'wrong target') };
  const left = () => heard.push('left');
  flag.addEventListener('abort', relay, { once: true });
  flag.addEventListener('abort', left, { once: true });
  flag.addEventListener('abort', () => heard.push('queue'), { once: true });
  flag.removeEventListener('abort', left);
  assert.equal(flag.aborted, false);
  flag.fire();
  flag.fire();
  assert.equal(flag.aborted, true);
  assert.deepEqual(heard, ['relay', 'queue']);
  // A waiter that arrives after the client left is not called: it reads `aborted` first, as AbortSignal's users do.
  flag.addEventListener('abort', () => heard.push('late'));
  assert.deepEqual(heard, ['relay', 'queue']);
});

test('a waiter another waiter stops while the client leaves is not called, as with AbortSignal', () => {
  const flag = new GoneFlag();
  const heard: string[] = [];
  const queueWait = () => heard.push('queue');
  flag.addEventListener('abort', () => {
    heard.push('relay');
    flag.removeEventListener('abort', queueWait);
  });
  flag.addEventListener('abort', queueWait);
  flag.fire();
  assert.deepEqual(heard, ['relay']);
});

test('a tokenizer call (undici, a real AbortSignal) is cancelled with the client', () => {
  const flag = new GoneFlag();
  const signal = abortSignalOf(flag);
  assert.ok(signal instanceof AbortSignal);
  assert.equal(abortSignalOf(flag), signal, 'one signal per request');
  assert.equal(signal.aborted, false);
  flag.fire();
  assert.equal(signal.aborted, true);
  const gone = new GoneFlag();
  gone.fire();
  assert.equal(abortSignalOf(gone).aborted, true, 'a client already gone gives an aborted signal');
  const real = new AbortController().signal;
  assert.equal(abortSignalOf(real), real);
});
