/** node.cache_disk and node.drain_timeout (SPEC sections 2 and 13): defaults, values, and errors that name the key. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseConfigText } from '../../src/config/load.ts';
import { problems } from '../helpers/config.ts';

describe('drain and slot cache config (SPEC section 13)', () => {
  it('defaults: 4096 MiB of slot caches, a 60 s drain', () => {
    const c = parseConfigText('models: []');
    assert.equal(c.node.cache_disk, 4096);
    assert.equal(c.node.drain_timeout, 60_000);
  });

  it('reads a number of MiB (0: keep nothing) and a duration', () => {
    const c = parseConfigText('node: {cache_disk: 0, drain_timeout: 5m}');
    assert.equal(c.node.cache_disk, 0);
    assert.equal(c.node.drain_timeout, 300_000);
    assert.equal(parseConfigText('node: {cache_disk: 512}').node.cache_disk, 512);
  });

  it('bad values are errors that name the key and say what is expected', () => {
    assert.match(problems('node: {cache_disk: -1}').join('\n'), /node\.cache_disk.*positive number of MiB/);
    assert.match(problems('node: {cache_disk: 4GiB}').join('\n'), /node\.cache_disk.*whole number of MiB/);
    assert.match(problems('node: {cache_disk: 1.5}').join('\n'), /node\.cache_disk.*whole number of MiB/);
    assert.match(problems('node: {drain_timeout: soon}').join('\n'), /node\.drain_timeout.*duration/);
    assert.match(problems('node: {drain_timeout: 0s}').join('\n'), /node\.drain_timeout.*greater than zero/);
  });
});
