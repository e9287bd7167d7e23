/** Alias gossip bytes: kind 0x80 (one change), 0x81 (whole table), everything else ignored. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decode, encodeChange, encodeTable, KIND_CHANGE, KIND_TABLE, MAX_CHANGE_BYTES } from '../../src/aliases/codec.ts';
import { AliasTable } from '../../src/aliases/table.ts';
import { MAX_NAME_CHARS, type AliasEntry } from '../../src/aliases/types.ts';

const live: AliasEntry = { name: 'chat', version: 17, writer: 'gpu1', at: 1764441600123, value: { target: 'qwen2.5-7b-instruct', fallbacks: ['tiny', 'demo-fast'] } };
const tomb: AliasEntry = { name: 'old', version: 18, writer: 'gpu2', at: 1764441600999, value: null };

describe('alias codec', () => {
  it('round-trips one change, live or tombstone, behind kind byte 0x80', () => {
    for (const e of [live, tomb]) {
      const buf = encodeChange(e);
      assert.equal(buf[0], KIND_CHANGE);
      assert.deepEqual(decode(buf), { kind: 'change', entry: e });
    }
  });

  it('pins the wire bytes of one change', () => {
    assert.equal(
      encodeChange(live).subarray(1).toString(),
      '{"n":"chat","l":17,"w":"gpu1","t":1764441600123,"a":"qwen2.5-7b-instruct","f":["tiny","demo-fast"]}',
    );
    assert.equal(encodeChange(tomb).subarray(1).toString(), '{"n":"old","l":18,"w":"gpu2","t":1764441600999}');
  });

  it('round-trips the whole table, tombstones included, behind kind byte 0x81', () => {
    const buf = encodeTable([live, tomb]);
    assert.equal(buf[0], KIND_TABLE);
    assert.deepEqual(decode(buf), { kind: 'table', entries: [live, tomb] });
    assert.deepEqual(decode(encodeTable([])), { kind: 'table', entries: [] });
  });

  it('decodes from a view into a larger buffer', () => {
    const inner = encodeChange(live);
    const big = Buffer.concat([Buffer.from('xxxx'), inner, Buffer.from('yy')]);
    assert.deepEqual(decode(big.subarray(4, 4 + inner.length)), { kind: 'change', entry: live });
  });

  it('one change of the largest ASCII names the table accepts fits one gossip packet', () => {
    const n = (c: string) => c.repeat(MAX_NAME_CHARS);
    const t = new AliasTable({ now: () => 8_640_000_000_000_000 });
    const e = t.set(n('a'), n('b'), ['c', 'd', 'e', 'f', 'g', 'h'].map(n), 'n'.repeat(63));
    const size = encodeChange({ ...e, version: Number.MAX_SAFE_INTEGER }).length;
    assert.ok(size <= MAX_CHANGE_BYTES, `${size} bytes`);
    assert.ok(encodeChange(live).length < 200);
  });

  it('ignores bytes below 0x80, unknown kinds, garbage and malformed changes, without throwing', () => {
    const json = Buffer.from(JSON.stringify({ n: 'x', l: 1, w: 'a', t: 0, a: 'm' }));
    const withKind = (k: number, body: Buffer | string) => Buffer.concat([Buffer.from([k]), Buffer.from(body)]);
    assert.ok(decode(withKind(KIND_CHANGE, json)), 'the well-formed control case decodes');
    const cases: (Uint8Array | undefined | null)[] = [
      undefined,
      null,
      Buffer.alloc(0),
      Buffer.from([KIND_CHANGE]),
      withKind(0x00, json),
      withKind(0x7f, json),
      withKind(0x82, json),
      withKind(0xff, json),
      json,
      withKind(KIND_CHANGE, '{"n":'),
      withKind(KIND_CHANGE, Buffer.from([0xc3, 0x28, 0xff])),
      withKind(KIND_CHANGE, '[]'),
      withKind(KIND_CHANGE, 'null'),
      withKind(KIND_CHANGE, '{"n":"x","l":"1","w":"a","t":0}'),
      withKind(KIND_CHANGE, '{"n":"x y","l":1,"w":"a","t":0}'),
      withKind(KIND_CHANGE, '{"n":"x","l":1,"w":"a","t":0,"f":["m"]}'),
      withKind(KIND_CHANGE, '{"n":"x","l":1,"w":"a","t":0,"a":"m","f":"m"}'),
      withKind(KIND_TABLE, '{"n":"x"}'),
    ];
    for (const c of cases) assert.equal(decode(c), undefined, c ? Buffer.from(c).toString('hex') : String(c));
    for (let seed = 0; seed < 500; seed++) {
      const junk = Buffer.from(Array.from({ length: 1 + (seed % 40) }, (_, i) => (seed * 31 + i * 17) & 255));
      assert.doesNotThrow(() => decode(junk));
    }
  });

  it('keeps the good entries of a table and skips the malformed ones', () => {
    const body = JSON.stringify([{ n: 'x', l: 1, w: 'a', t: 0, a: 'm' }, { n: '', l: 1, w: 'a', t: 0 }, 5, { n: 'y', l: 2, w: 'b', t: 3 }]);
    const d = decode(Buffer.concat([Buffer.from([KIND_TABLE]), Buffer.from(body)]));
    assert.equal(d?.kind, 'table');
    assert.deepEqual(d?.kind === 'table' && d.entries.map((e) => e.name), ['x', 'y']);
  });
});
