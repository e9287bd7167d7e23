/** Which members a node fetches a model's file from (files/sources.ts): a table. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { offerFor, type PeerFiles } from '../../src/files/sources.ts';

const H1 = '1'.repeat(64);
const H2 = '2'.repeat(64);
const peer = (name: string, sha?: string): PeerFiles => ({ name, api: `http://${name}:8086`, models: [{ name: 'm', ...(sha ? { file: { size: 10, sha256: sha } } : {}) }, { name: 'other', file: { size: 5, sha256: H1 } }] });

describe('fetch sources', () => {
  const table: { name: string; peers: PeerFiles[]; expect?: string; rotate?: number; want: { sha256: string; sources: string[] } | undefined }[] = [
    { name: 'nobody publishes the file', peers: [peer('a'), peer('b')], want: undefined },
    { name: 'the members that publish it, in name order', peers: [peer('c', H1), peer('a', H1), peer('b')], want: { sha256: H1, sources: ['a', 'c'] } },
    { name: 'two versions: the one most members publish', peers: [peer('a', H1), peer('b', H2), peer('c', H2)], want: { sha256: H2, sources: ['b', 'c'] } },
    { name: "the entry's sha256 wins over the majority", peers: [peer('a', H1), peer('b', H2), peer('c', H2)], expect: H1, want: { sha256: H1, sources: ['a'] } },
    { name: "the entry's sha256 that nobody has: none", peers: [peer('a', H1)], expect: H2, want: undefined },
    { name: 'rotation spreads fetches over the sources', peers: [peer('a', H1), peer('b', H1), peer('c', H1)], rotate: 4, want: { sha256: H1, sources: ['b', 'c', 'a'] } },
    { name: 'a member without an API address is skipped', peers: [{ ...peer('a', H1), api: undefined }, peer('b', H1)], want: { sha256: H1, sources: ['b'] } },
  ];
  for (const t of table)
    it(t.name, () => {
      const o = offerFor('m', t.peers, t.expect, t.rotate);
      assert.deepEqual(o && { sha256: o.sha256, sources: o.sources.map((s) => s.name) }, t.want);
    });
});
