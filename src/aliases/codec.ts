/**
 * Alias gossip on the wire. viiwork's memberlist user messages and push-pull
 * user state start with a kind byte >= 0x80 (SPEC section 5); anything else
 * in them is someone else's and is ignored.
 *
 *   0x80 <JSON wire entry>              one alias change (a gossip user message)
 *   0x81 <JSON array of wire entries>   the whole table, tombstones included
 *                                        (push-pull user state)
 *
 * A wire entry is the JSON object
 *   {"n": name, "l": lamport version, "w": writer node, "t": wall clock ms,
 *    "a": target, "f": [fallback, ...]}
 * with "a" and "f" absent for a tombstone. Keys are short because one change
 * must fit one UDP gossip packet: memberlist's packets are at most 1,400
 * bytes, and the label header (2 + label bytes; 12 for the default
 * `viiwork-v2`), AES-GCM (29 bytes), the CRC wrapper (5), the user-message
 * type byte and a compound header come off that. `MAX_CHANGE_BYTES` (1,200)
 * leaves room for labels up to ~150 bytes; `AliasTable.set` refuses a change
 * whose encoding is larger. With ASCII names of the maximum 128 characters,
 * an alias with a target and 6 fallbacks still fits (1,176 bytes); the push-pull state
 * rides TCP and has no such limit.
 *
 * A later format takes a new kind byte (0x82, ...): old nodes ignore it.
 */
import { parseEntry, type AliasEntry } from './types.ts';

export const KIND_CHANGE = 0x80;
export const KIND_TABLE = 0x81;
/** The largest encoded single change (kind byte included), so it fits one gossip packet. */
export const MAX_CHANGE_BYTES = 1200;

export type Decoded = { kind: 'change'; entry: AliasEntry } | { kind: 'table'; entries: AliasEntry[] } | undefined;

type WireEntry = { n: string; l: number; w: string; t: number; a?: string; f?: string[] };

function toWire(e: AliasEntry): WireEntry {
  const w: WireEntry = { n: e.name, l: e.version, w: e.writer, t: e.at };
  if (e.value) {
    w.a = e.value.target;
    w.f = e.value.fallbacks;
  }
  return w;
}

function fromWire(x: unknown): AliasEntry | undefined {
  if (typeof x !== 'object' || x === null || Array.isArray(x)) return undefined;
  const w = x as Record<string, unknown>;
  const value = w.a === undefined ? (w.f === undefined ? null : undefined) : { target: w.a, fallbacks: w.f ?? [] };
  if (value === undefined) return undefined;
  return parseEntry({ name: w.n, version: w.l, writer: w.w, at: w.t, value });
}

function frame(kind: number, body: unknown): Buffer {
  const json = Buffer.from(JSON.stringify(body), 'utf8');
  const out = Buffer.allocUnsafe(json.length + 1);
  out[0] = kind;
  json.copy(out, 1);
  return out;
}

/** One change as a gossip user message. Its length may exceed `MAX_CHANGE_BYTES` only for entries `AliasTable` would refuse. */
export function encodeChange(entry: AliasEntry): Buffer {
  return frame(KIND_CHANGE, toWire(entry));
}

/** The whole table (every entry, tombstones included) as push-pull user state. */
export function encodeTable(entries: readonly AliasEntry[]): Buffer {
  return frame(KIND_TABLE, entries.map(toWire));
}

/**
 * Decode a user message or push-pull user state. Undefined for anything that
 * is not viiwork's alias gossip (first byte < 0x80, unknown kind, bad JSON, a
 * malformed change); never throws. In a table, malformed entries are skipped
 * and the rest kept.
 */
export function decode(buf: Uint8Array | undefined | null): Decoded {
  if (!buf || buf.length < 2) return undefined;
  const kind = buf[0];
  if (kind !== KIND_CHANGE && kind !== KIND_TABLE) return undefined;
  let body: unknown;
  try {
    body = JSON.parse(Buffer.from(buf.buffer, buf.byteOffset + 1, buf.length - 1).toString('utf8'));
  } catch {
    return undefined;
  }
  if (kind === KIND_CHANGE) {
    const entry = fromWire(body);
    return entry ? { kind: 'change', entry } : undefined;
  }
  if (!Array.isArray(body)) return undefined;
  const entries: AliasEntry[] = [];
  for (const item of body) {
    const entry = fromWire(item);
    if (entry) entries.push(entry);
  }
  return { kind: 'table', entries };
}
