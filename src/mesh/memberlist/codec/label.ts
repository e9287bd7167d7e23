/**
 * Label header, as upstream memberlist's label.go defines it (Debian's 0.2.x
 * predates labels): every packet and every stream of a labelled member starts
 * with `[244][len][label bytes]`, 1 <= len <= 255. An empty label means no
 * header at all. The label is also the AES-GCM additional data (security.ts).
 */
import { MessageType } from './messages.ts';

export const LABEL_MAX_SIZE = 255;

export function validateLabel(label: string): void {
  if (Buffer.byteLength(label) > LABEL_MAX_SIZE) throw new Error(`label "${label}" is too long`);
}

/** The header bytes for a label ('' gives an empty buffer). */
export function labelHeader(label: string): Buffer {
  if (label === '') return Buffer.alloc(0);
  validateLabel(label);
  const l = Buffer.from(label, 'utf8');
  return Buffer.concat([Buffer.from([MessageType.hasLabel, l.length]), l]);
}

/** Prefixes a packet with the label header (no-op for ''). */
export function addLabelHeaderToPacket(buf: Buffer, label: string): Buffer {
  if (label === '') return buf;
  return Buffer.concat([labelHeader(label), buf]);
}

/**
 * Splits a packet into its label and the rest. A packet without the header
 * has label ''. Throws on a truncated or empty header.
 */
export function removeLabelHeaderFromPacket(buf: Buffer): { buf: Buffer; label: string } {
  if (buf.length === 0 || buf[0] !== MessageType.hasLabel) return { buf, label: '' };
  if (buf.length < 2) throw new Error('cannot decode label; packet has been truncated');
  const size = buf[1];
  if (size < 1) throw new Error('label header cannot be empty when present');
  if (buf.length < 2 + size) throw new Error('cannot decode label; packet has been truncated');
  return { label: buf.subarray(2, 2 + size).toString('utf8'), buf: buf.subarray(2 + size) };
}

/**
 * The same for the start of a stream: returns null while more bytes are
 * needed, else the label and how many bytes the header took.
 */
export function peekStreamLabel(buf: Buffer): { label: string; consumed: number } | null {
  if (buf.length === 0) return null;
  if (buf[0] !== MessageType.hasLabel) return { label: '', consumed: 0 };
  if (buf.length < 2) return null;
  const size = buf[1];
  if (size < 1) throw new Error('label header cannot be empty when present');
  if (buf.length < 2 + size) return null;
  return { label: buf.subarray(2, 2 + size).toString('utf8'), consumed: 2 + size };
}
