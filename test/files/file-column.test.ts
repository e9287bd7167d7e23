/** Where a model's file is per host, as `viiwork status` prints it (SPEC section 11): a table of fleet documents → FILE column. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fileColumn, fileSenders, type FleetHost } from '../../src/cli/ops.ts';
import { chunkFor } from '../../src/files/serve.ts';

const A = 'a'.repeat(64);
const B = 'b'.repeat(64);
const host = (node: string, extra: Partial<FleetHost> = {}): FleetHost => ({ node, fresh: true, report_age_ms: 0, slots: 1, busy: 0, free: 1, ...extra });
const MiB = 1024 * 1024;

describe('status FILE column', () => {
  const table: [string, FleetHost[], Record<string, string>][] = [
    ['no file concept (sim, openai, older node): -', [host('x'), host('y')], { x: '-', y: '-' }],
    ['here, and fetchable from it', [host('x', { has_file: true, file: { size: 10, sha256: A } }), host('y', { has_file: false })], { x: 'here', y: 'fetchable from x' }],
    ['no host has it: missing everywhere', [host('x', { has_file: false }), host('y', { has_file: false })], { x: 'missing everywhere', y: 'missing everywhere' }],
    [
      'a fetch in progress: bytes of size, whole percent, never rounded up to 100',
      [host('x', { has_file: true, file: { size: 2 * MiB, sha256: A } }), host('y', { has_file: false, state: 'fetching', fetch: { bytes: 2 * MiB - 1, size: 2 * MiB } })],
      { x: 'here', y: 'fetching 2.0 MiB of 2.0 MiB (99%)' },
    ],
    ['fetching, before the first bytes are counted', [host('x', { has_file: false, state: 'fetching' }), host('y', { has_file: true, file: { size: 1, sha256: A } })], { x: 'fetching', y: 'here' }],
    [
      'two hashes: the one most hosts publish is the one fetched',
      [host('x', { has_file: true, file: { size: 1, sha256: B } }), host('y', { has_file: true, file: { size: 1, sha256: A } }), host('w', { has_file: true, file: { size: 1, sha256: B } }), host('z', { has_file: false })],
      { x: 'here', y: 'here', w: 'here', z: 'fetchable from w, x' },
    ],
    [
      'a tie between hashes: the smaller hash, as every node picks',
      [host('x', { has_file: true, file: { size: 1, sha256: B } }), host('y', { has_file: true, file: { size: 1, sha256: A } }), host('z', { has_file: false })],
      { x: 'here', y: 'here', z: 'fetchable from y' },
    ],
  ];
  for (const [name, hosts, want] of table) {
    it(name, () => {
      assert.deepEqual(Object.fromEntries(fileColumn(hosts)), want);
    });
  }
  it('senders are sorted by name and empty when no host publishes a file', () => {
    assert.deepEqual(fileSenders([host('m', { file: { size: 1, sha256: A } }), host('c', { file: { size: 1, sha256: A } })]), ['c', 'm']);
    assert.deepEqual(fileSenders([host('m', { has_file: false })]), []);
  });
});

describe('send steps under transfer_rate', () => {
  it('about an eighth of a second of the rate, between 16 KiB and 1 MiB; no limit: 1 MiB', () => {
    assert.equal(chunkFor(0), MiB);
    assert.equal(chunkFor(64 * 1024), 16 * 1024);
    assert.equal(chunkFor(1024 * 1024), 128 * 1024);
    assert.equal(chunkFor(100 * MiB), MiB);
  });
});
