/**
 * What we accept into our node table, and therefore relay (gossip) and send
 * in push-pulls. memberlist 0.2.x trusts these fields; a peer that sends a
 * short `Vsn` makes every Go 0.2.2 process that hears it panic, and an empty
 * address made us probe our own localhost. So every alive message and every
 * push-pull entry is checked here first, and a failing one is dropped whole:
 * never stored, never relayed, never part of a version check.
 *
 * - name: 1..MAX_NODE_NAME_BYTES bytes (the same for suspect/dead `from`);
 * - address: 4 or 16 bytes, not unspecified (0.0.0.0, ::), not multicast,
 *   not the IPv4 broadcast address, of the family our sockets speak (IPv6
 *   only when we are on IPv6; IPv4-mapped IPv6 counts as IPv4), and
 *   loopback only when we ourselves advertise a loopback address;
 * - port: 1..65535 (0 is memberlist's "same as mine" and is filled in by the
 *   caller, like Go does);
 * - Vsn: exactly 6 bytes, or absent (nil or empty) for a node we already
 *   know (its stored versions stay); a node we do not know without versions
 *   is refused, because storing zeros would break every later version check
 *   (ours and, through push-pull, Go's);
 * - versions consistent (min <= cur <= max, for protocol and delegate) and
 *   compatible with ours (each side's current version inside the other's
 *   range; alive messages only, a push-pull with such an entry is refused
 *   whole, as memberlist does): memberlist checks every live member's versions against every
 *   other's before a push-pull, so one stored alive with, say, protocol
 *   min 3 would make every later join through us fail. Such a node could
 *   never talk to us anyway;
 * - meta: at most META_MAX_SIZE (512) bytes; incarnation a uint32.
 */
import { META_MAX_SIZE, NodeStateType } from './messages.ts';

/** Longest node name we store or relay, in bytes (a DNS name's bound). */
export const MAX_NODE_NAME_BYTES = 255;
export const VSN_LENGTH = 6;

/** What "routable" means for this node. */
export interface AddressPolicy {
  /** The family our sockets use. */
  family: 4 | 6;
  /** Whether loopback addresses are peers (only when we advertise one ourselves). */
  loopback: boolean;
}

/** The policy that follows from our own advertise address. */
export function addressPolicy(advertiseAddr: string): AddressPolicy {
  const v6 = advertiseAddr.includes(':');
  const loopback = v6 ? advertiseAddr === '::1' : advertiseAddr.startsWith('127.');
  return { family: v6 ? 6 : 4, loopback };
}

const isV4Mapped = (a: Uint8Array) => a.length === 16 && a.subarray(0, 10).every((b) => b === 0) && a[10] === 0xff && a[11] === 0xff;

/** Why `addr` (4 or 16 raw bytes) is not a peer address under `policy`; null when it is. */
export function addressProblem(addr: Uint8Array | null | undefined, policy: AddressPolicy): string | null {
  if (!addr || addr.length === 0) return 'empty address';
  let v4: Uint8Array | null = null;
  if (addr.length === 4) v4 = addr;
  else if (isV4Mapped(addr)) v4 = addr.subarray(12);
  else if (addr.length !== 16) return `address of ${addr.length} bytes`;
  if (v4) {
    if (policy.family !== 4) return 'IPv4 address on an IPv6 mesh';
    if (v4.every((b) => b === 0)) return 'unspecified address';
    if (v4[0] >= 224 && v4[0] <= 239) return 'multicast address';
    if (v4.every((b) => b === 255)) return 'broadcast address';
    if (v4[0] === 127 && !policy.loopback) return 'loopback address from a non-loopback mesh';
    if (v4[0] === 0) return 'address in 0.0.0.0/8';
    return null;
  }
  if (policy.family !== 6) return 'IPv6 address on an IPv4 mesh';
  if (addr.every((b) => b === 0)) return 'unspecified address';
  if (addr[0] === 0xff) return 'multicast address';
  const loop = addr.subarray(0, 15).every((b) => b === 0) && addr[15] === 1;
  if (loop && !policy.loopback) return 'loopback address from a non-loopback mesh';
  return null;
}

/** Why a node name (or suspect/dead `from`) is unacceptable; null when fine. */
export function nameProblem(name: string): string | null {
  if (name === '') return 'empty node name';
  if (Buffer.byteLength(name) > MAX_NODE_NAME_BYTES) return `node name longer than ${MAX_NODE_NAME_BYTES} bytes`;
  return null;
}

const isUint32 = (n: number) => Number.isInteger(n) && n >= 0 && n <= 0xffffffff;

export interface EntryFields {
  node: string;
  addr: Buffer;
  port: number;
  meta: Buffer | null;
  incarnation: number;
  vsn: number[];
}

/**
 * Why an alive message or push-pull entry must be dropped; null when it may
 * be stored and relayed. `known`: we already have a node of that name.
 */
export function entryProblem(e: EntryFields, policy: AddressPolicy, known: boolean, local?: readonly number[]): string | null {
  const n = nameProblem(e.node);
  if (n) return n;
  const a = addressProblem(e.addr, policy);
  if (a) return a;
  if (!Number.isInteger(e.port) || e.port < 0 || e.port > 65535) return `port ${e.port} out of range`;
  if (!isUint32(e.incarnation)) return `incarnation ${e.incarnation} is not a uint32`;
  if (e.meta && e.meta.length > META_MAX_SIZE) return `metadata of ${e.meta.length} bytes (max ${META_MAX_SIZE})`;
  if (e.vsn.length === 0) return known ? null : 'no protocol versions (Vsn) for a new node';
  if (e.vsn.length !== VSN_LENGTH) return `Vsn of ${e.vsn.length} bytes (want ${VSN_LENGTH})`;
  return local ? versionProblem(e.vsn, local) : null;
}

/** Why versions `v` cannot live in a cluster with a member whose versions are `local`; null when they can. */
export function versionProblem(v: readonly number[], local: readonly number[]): string | null {
  const [pmin, pmax, pcur, dmin, dmax, dcur] = v;
  if (!(pmin <= pcur && pcur <= pmax) || !(dmin <= dcur && dcur <= dmax)) return `inconsistent versions [${v.join(',')}]`;
  const inside = (cur: number, min: number, max: number) => cur >= min && cur <= max;
  if (!inside(pcur, local[0], local[1]) || !inside(local[2], pmin, pmax) || !inside(dcur, local[3], local[4]) || !inside(local[5], dmin, dmax)) {
    return `versions [${v.join(',')}] are incompatible with ours [${local.join(',')}]`;
  }
  return null;
}

/** The same for a push-pull entry, whose state must also be one we know. */
export function pushEntryProblem(e: EntryFields & { state: number }, policy: AddressPolicy, known: boolean, local?: readonly number[]): string | null {
  const states: number[] = [NodeStateType.alive, NodeStateType.suspect, NodeStateType.dead, NodeStateType.left];
  if (!states.includes(e.state)) return `unknown node state ${e.state}`;
  return entryProblem(e, policy, known, local);
}
