/**
 * Key gossip on the wire, beside the alias kinds (aliases/codec.ts):
 *
 *   0x82 <JSON entry>             one key change (a gossip user message)
 *   0x83 <JSON array of entries>  the whole key table, tombstones included
 *
 * An entry is `{name, version, writer, at, value}` as in types.ts; `value`
 * holds the SHA-256 of the secret, never the secret. One change must fit a
 * gossip packet, as an alias change must: `MAX_KEY_CHANGE_BYTES`.
 */
import { parseKeyEntry, type KeyEntry } from './types.ts';

export const KIND_KEY_CHANGE = 0x82;
export const KIND_KEY_TABLE = 0x83;
export const MAX_KEY_CHANGE_BYTES = 1200;

function frame(kind: number, body: unknown): Buffer {
  return Buffer.concat([Buffer.of(kind), Buffer.from(JSON.stringify(body), 'utf8')]);
}

export const encodeKeyChange = (e: KeyEntry): Buffer => frame(KIND_KEY_CHANGE, e);
export const encodeKeyTable = (entries: readonly KeyEntry[]): Buffer => frame(KIND_KEY_TABLE, entries);

/** A key change or table, or undefined for anything else (never throws; malformed table entries are skipped). */
export function decodeKeys(buf: Uint8Array | undefined | null): { kind: 'change'; entry: KeyEntry } | { kind: 'table'; entries: KeyEntry[] } | undefined {
  if (!buf || buf.length < 2 || (buf[0] !== KIND_KEY_CHANGE && buf[0] !== KIND_KEY_TABLE)) return undefined;
  let body: unknown;
  try {
    body = JSON.parse(Buffer.from(buf.buffer, buf.byteOffset + 1, buf.length - 1).toString('utf8'));
  } catch {
    return undefined;
  }
  if (buf[0] === KIND_KEY_CHANGE) {
    const entry = parseKeyEntry(body);
    return entry ? { kind: 'change', entry } : undefined;
  }
  if (!Array.isArray(body)) return undefined;
  return { kind: 'table', entries: body.map(parseKeyEntry).filter((e): e is KeyEntry => e !== undefined) };
}
