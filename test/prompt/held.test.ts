import assert from 'node:assert/strict';
import { test } from 'node:test';
import { heldTokens, type PrefixChain } from '../../src/prompt/held.ts';

const chain: PrefixChain = [
  { hash: '000000000000000a', tokens: 300 },
  { hash: '000000000000000b', tokens: 420 },
  { hash: '000000000000000c', tokens: 900 },
];

test('a host holding a conversation up to its second turn has the tokens of that turn, not of the first', () => {
  assert.equal(heldTokens(chain, new Map([['000000000000000a', 300], ['000000000000000b', 420]])), 420);
});

test('a host holding the whole prompt has every token of it', () => {
  assert.equal(heldTokens(chain, new Set(['000000000000000c'])), 900);
});

test('a host holding nothing of the prompt has 0 tokens of it', () => {
  assert.equal(heldTokens(chain, new Map([['ffffffffffffffff', 5000]])), 0);
  assert.equal(heldTokens([], new Set(['000000000000000a'])), 0);
});

test("a digest's own token counts (the engine's) win over the chain's estimate", () => {
  assert.equal(heldTokens(chain, new Map([['000000000000000b', 1700]])), 1700);
});
