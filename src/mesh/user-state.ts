/**
 * The push-pull user state: the alias table alone (kind 0x81, exactly as
 * before keys) while the key table is empty, else both in one bundle:
 *
 *   0x84 (<u32 big-endian length> <part>)*   each part a state of its own kind (0x81 aliases, 0x83 keys)
 *
 * A node that predates keys ignores a bundle (an unknown kind) and keeps
 * learning aliases from gossip messages until it is upgraded.
 */
export const KIND_BUNDLE = 0x84;

export function encodeUserState(parts: readonly (Buffer | undefined)[]): Buffer {
  const present = parts.filter((p): p is Buffer => p !== undefined);
  if (present.length === 1) return present[0];
  const out: Buffer[] = [Buffer.of(KIND_BUNDLE)];
  for (const p of present) {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(p.length);
    out.push(len, p);
  }
  return Buffer.concat(out);
}

/** The parts of a user state (one part unless a bundle); a truncated bundle yields the parts before the cut. */
export function userStateParts(buf: Uint8Array | undefined | null): Uint8Array[] {
  if (!buf || buf.length === 0) return [];
  if (buf[0] !== KIND_BUNDLE) return [buf];
  const parts: Uint8Array[] = [];
  const view = Buffer.from(buf.buffer, buf.byteOffset, buf.length);
  let at = 1;
  while (at + 4 <= view.length) {
    const len = view.readUInt32BE(at);
    if (at + 4 + len > view.length) break;
    parts.push(view.subarray(at + 4, at + 4 + len));
    at += 4 + len;
  }
  return parts;
}
