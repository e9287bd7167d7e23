/**
 * The cache digest on the wire (SPEC section 7; docs/api.md "Cache digest"):
 * per target `{"v": version, "links": base64}`, where the base64 packs, most
 * recently used first, one record per chain link: its 8-byte hash (the 16
 * hex digits of a ChainLink) then, as an unsigned LEB128 varint, twice its
 * tokens plus one when only busy slots hold it (CacheDigest.busy).
 * At most 1,024 links and 16 KiB of JSON per target. A poll that says which
 * version it holds (`?digests=<epoch>.<version>`) gets `{"v": version}` alone
 * for every target unchanged since, and keeps the digest it has.
 *
 * Pure: encode and decode, no I/O.
 */
import type { CacheDigest, SlotHold } from '../prompt/held.ts';

/**
 * One slot on the wire (SPEC section 7, "Slot state"): the hash its cached
 * prompt ends at ("" for an empty slot), that link's tokens, the tokens no
 * other slot of the target holds, and the ms since its last request ended
 * (-1: busy; 0 with no hash and never used: empty); then, optionally, the
 * hash and tokens of its prompt's head link (tools and system), and after
 * them the hash and tokens of the link before its last (SlotHold.prev), and
 * after those the turns its conversation has had (SlotHold.turns; the pairs
 * before it padded `"", 0` when absent). A reader that knows only the first
 * four (or six, or eight) ignores the rest.
 */
export type SlotWire =
  | [string, number, number, number]
  | [string, number, number, number, string, number]
  | [string, number, number, number, string, number, string, number]
  | [string, number, number, number, string, number, string, number, number];

/** Turns a slot says at most (past a few, the return chance no longer changes with them). */
export const MAX_WIRE_TURNS = 999;

/**
 * The wire form: `links` absent means "unchanged since the version you hold" (the slots and the RAM pool too).
 * `ram` (SPEC 7, "RAM pool"): the links of the prompts held in the target's host-RAM prompt caches, packed as
 * `links` are; present, even empty, when its engines keep one. An older reader ignores it.
 */
export interface DigestWire {
  v: number;
  links?: string;
  slots?: SlotWire[];
  ram?: string;
}

/** Room a target's RAM-pool links may take of the digest's bound (the slots' links keep the rest). */
export const RAM_WIRE_BYTES = 4 * 1024;

/** Slots listed per target at most; each takes about 45 bytes of JSON (70 with its head, 98 with the link before its last too, 102 with its turns), taken off the links' room. */
export const DIGEST_MAX_SLOTS = 128;
export const SLOT_WIRE_BYTES = 104;

/** A target's slots for a report made at `now` (the executor's clock): idle times relative to it. */
export function encodeSlots(slots: readonly SlotHold[], now: number): SlotWire[] {
  return slots.slice(0, DIGEST_MAX_SLOTS).map((s): SlotWire => {
    const w: [string, number, number, number] = [
      s.last && HEX16.test(s.last.hash) ? s.last.hash : '',
      s.last ? Math.max(0, Math.round(s.last.tokens)) : 0,
      Math.max(0, Math.round(s.unique)),
      s.busy ? -1 : Math.max(0, Math.round(now - (s.idleSince ?? now))),
    ];
    const turns = s.last && s.turns !== undefined && s.turns >= 1 ? Math.min(MAX_WIRE_TURNS, Math.round(s.turns)) : undefined;
    const hasHead = s.last && s.head && HEX16.test(s.head.hash);
    if (!hasHead && turns === undefined) return w;
    const head: [string, number, number, number, string, number] = [...w, hasHead ? s.head!.hash : '', hasHead ? Math.max(0, Math.round(s.head!.tokens)) : 0];
    const prev: [string, number] = hasHead && s.prev && HEX16.test(s.prev.hash) ? [s.prev.hash, Math.max(0, Math.round(s.prev.tokens))] : ['', 0];
    if (turns === undefined) return prev[0] ? [...head, ...prev] : head;
    return [...head, ...prev, turns];
  });
}

/**
 * Slots as received, their idle times turned into moments on this node's
 * clock (`at`: when the poll was sent, so an idle time is never counted
 * short); undefined when malformed.
 */
export function decodeSlots(x: unknown, at: number): SlotHold[] | undefined {
  if (!Array.isArray(x) || x.length > DIGEST_MAX_SLOTS) return undefined;
  const out: SlotHold[] = [];
  for (const w of x) {
    if (!Array.isArray(w) || w.length < 4) return undefined;
    const [hash, tokens, unique, idle] = w as unknown[];
    if (typeof hash !== 'string' || (hash !== '' && !HEX16.test(hash))) return undefined;
    if (![tokens, unique, idle].every((n) => typeof n === 'number' && Number.isFinite(n))) return undefined;
    const busy = (idle as number) < 0;
    const last = hash ? { last: { hash, tokens: Math.max(0, tokens as number) } } : {};
    // The head (optional): ignored when malformed, as an older reader would.
    const [headHash, headTokens] = [w[4], w[5]];
    const head = hash && typeof headHash === 'string' && HEX16.test(headHash) && typeof headTokens === 'number' && Number.isFinite(headTokens) ? { head: { hash: headHash, tokens: Math.max(0, headTokens) } } : {};
    // The link before the last (optional, only after a head), ignored when malformed.
    const [prevHash, prevTokens] = [w[6], w[7]];
    const prev = head.head && typeof prevHash === 'string' && HEX16.test(prevHash) && typeof prevTokens === 'number' && Number.isFinite(prevTokens) ? { prev: { hash: prevHash, tokens: Math.max(0, prevTokens) } } : {};
    const t = w[8];
    const turns = hash && typeof t === 'number' && Number.isSafeInteger(t) && t >= 1 ? { turns: Math.min(MAX_WIRE_TURNS, t) } : {};
    out.push({ ...last, ...head, ...prev, unique: Math.max(0, unique as number), busy, ...(busy ? {} : { idleSince: at - (idle as number) }), ...turns });
  }
  return out;
}

/** Bound on one target's serialized digest (SPEC section 7). */
export const DIGEST_MAX_BYTES = 16 * 1024;
export const DIGEST_WIRE_MAX_ENTRIES = 1024;

/** What a poll says it holds: the executor's epoch and the node-wide digest version. */
export interface HeldDigests {
  epoch: string;
  version: number;
}

/** `?digests=<epoch>.<version>` → what it holds; undefined when absent or malformed (then everything is sent). */
export function parseHeld(param: string | null): HeldDigests | undefined {
  if (!param) return undefined;
  const m = /^([0-9a-f]{1,32})\.(\d{1,15})$/.exec(param);
  return m ? { epoch: m[1], version: Number(m[2]) } : undefined;
}

export function heldParam(h: HeldDigests): string {
  return `${h.epoch}.${h.version}`;
}

const HEX16 = /^[0-9a-f]{16}$/;
/** Byte → two hex digits (decoding a digest is on every poll: a table beats Buffer.toString per link). */
const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0'));
/** `{"v":<15 digits>,"links":""}` and a margin. */
const WIRE_OVERHEAD = 40;

/**
 * Encode links (most recently used first) within the bounds: the least
 * recently used are left out when they do not fit. Links whose hash is not
 * 16 hex digits are skipped (no chain makes them).
 */
export function encodeDigest(version: number, links: Iterable<{ hash: string; tokens: number; busy?: boolean }>, maxBytes = DIGEST_MAX_BYTES): DigestWire {
  // base64 turns 3 bytes into 4 characters.
  const maxRaw = Math.floor(((maxBytes - WIRE_OVERHEAD) * 3) / 4);
  const buf = Buffer.allocUnsafe(Math.min(maxRaw, DIGEST_WIRE_MAX_ENTRIES * 16));
  let at = 0;
  let n = 0;
  for (const l of links) {
    if (n >= DIGEST_WIRE_MAX_ENTRIES) break;
    if (!HEX16.test(l.hash)) continue;
    const field = 2 * Math.max(0, Math.min(2 ** 34, Math.round(l.tokens))) + (l.busy ? 1 : 0);
    const need = 8 + varintLength(field);
    if (at + need > buf.length) break;
    buf.write(l.hash, at, 8, 'hex');
    at = writeVarint(buf, at + 8, field);
    n++;
  }
  return { v: version, links: buf.subarray(0, at).toString('base64') };
}

/** Decode a wire digest's links; undefined when malformed. */
export function decodeLinks(version: number, b64: string): CacheDigest | undefined {
  if (b64.length > DIGEST_MAX_BYTES) return undefined;
  const buf = Buffer.from(b64, 'base64');
  const held = new Map<string, number>();
  const busy = new Set<string>();
  let at = 0;
  while (at < buf.length) {
    if (at + 9 > buf.length || held.size >= DIGEST_WIRE_MAX_ENTRIES) return undefined;
    const hash = HEX[buf[at]] + HEX[buf[at + 1]] + HEX[buf[at + 2]] + HEX[buf[at + 3]] + HEX[buf[at + 4]] + HEX[buf[at + 5]] + HEX[buf[at + 6]] + HEX[buf[at + 7]];
    const r = readVarint(buf, at + 8);
    if (!r) return undefined;
    if (!held.has(hash)) {
      held.set(hash, Math.floor(r.value / 2));
      if (r.value % 2 === 1) busy.add(hash);
    }
    at = r.next;
  }
  return busy.size ? { version, held, busy } : { version, held };
}

/** A digest member of a report as received: the wire form, or undefined when it is not one. */
export function readWire(x: unknown): DigestWire | undefined {
  if (!x || typeof x !== 'object') return undefined;
  const d = x as Record<string, unknown>;
  if (typeof d.v !== 'number' || !Number.isSafeInteger(d.v) || d.v < 0) return undefined;
  if (d.links === undefined) return { v: d.v };
  if (typeof d.links !== 'string') return undefined;
  // Slots that do not parse are left out (the links still serve); decodeSlots checks each one.
  const w: DigestWire = Array.isArray(d.slots) ? { v: d.v, links: d.links, slots: d.slots as SlotWire[] } : { v: d.v, links: d.links };
  if (typeof d.ram === 'string' && d.ram.length <= RAM_WIRE_BYTES) w.ram = d.ram;
  return w;
}

function varintLength(n: number): number {
  let len = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 0x80);
    len++;
  }
  return len;
}

function writeVarint(buf: Buffer, at: number, n: number): number {
  while (n >= 0x80) {
    buf[at++] = (n % 0x80) | 0x80;
    n = Math.floor(n / 0x80);
  }
  buf[at++] = n;
  return at;
}

function readVarint(buf: Buffer, at: number): { value: number; next: number } | undefined {
  let value = 0;
  let scale = 1;
  for (let i = 0; i < 6; i++) {
    if (at >= buf.length) return undefined;
    const b = buf[at++];
    value += (b & 0x7f) * scale;
    if ((b & 0x80) === 0) return { value, next: at };
    scale *= 0x80;
  }
  return undefined;
}
