/**
 * The layers around a message on the wire (net.go's rawSendMsgPacket,
 * ingestPacket, rawSendMsgStream, readStream, plus upstream's label.go):
 *
 * packet out:  msg → LZW compress (only if smaller) → CRC wrapper (peer
 *              pmax >= 5) → encrypt (AAD = label) → label header
 * stream out:  msg → LZW compress (always, when enabled) → encrypt as
 *              `[encrypt][len32][payload]` (AAD = those 5 bytes + label);
 *              the dialer writes the label header once at the start.
 * in: the reverse; compound and compress messages are unpacked
 * recursively (a CRC wrapper is only honoured at the outermost layer).
 */
import { Keyring } from './keyring.ts';
import { addLabelHeaderToPacket, removeLabelHeaderFromPacket } from './label.ts';
import {
  AckResp,
  ErrResp,
  MAX_PUSH_STATE_BYTES,
  MessageType,
  Ping,
  PushPull,
  addCrc,
  compressPayload,
  decodeCompoundMessage,
  decompressBuffer,
  decompressPayload,
  readAck,
  readCompress,
  readErr,
  readPing,
  readPushNodeState,
  readPushPullHeader,
  readUserMsgHeader,
  stripCrc,
} from './messages.ts';
import { IncompleteError, Reader } from './msgpack.ts';
import { decryptPayload, encryptPayload, encryptedLength } from './security.ts';

export interface PacketEncodeOptions {
  compress: boolean;
  crc: boolean;
  label: string;
  keyring: Keyring | null;
  /** Fixed nonce, for tests only. */
  nonce?: Buffer;
}

export interface DecodeOptions {
  label: string;
  keyring: Keyring | null;
}

/** Wraps one packet payload (a message or a compound) for the wire. */
export function encodePacket(msg: Buffer, o: PacketEncodeOptions): Buffer {
  let out = msg;
  if (o.compress) {
    const c = compressPayload(out);
    if (c.length < out.length) out = c;
  }
  if (o.crc) out = addCrc(out);
  const key = o.keyring?.getPrimaryKey();
  if (key) out = encryptPayload(1, key, out, o.label ? Buffer.from(o.label) : null, o.nonce);
  return addLabelHeaderToPacket(out, o.label);
}

/**
 * Unwraps a received packet into its plain messages (`[type][body]`),
 * expanding compound and compressed messages. Throws on a label mismatch,
 * missing or failed encryption when a keyring is set, or a bad checksum.
 */
export function decodePacket(buf: Buffer, o: DecodeOptions): Buffer[] {
  const { buf: rest, label } = removeLabelHeaderFromPacket(buf);
  if (label !== o.label) throw new Error(`label mismatch: got "${label}", want "${o.label}"`);
  let plain = rest;
  if (o.keyring && o.keyring.size) {
    plain = decryptPayload(o.keyring.getKeys(), rest, o.label ? Buffer.from(o.label) : null);
  }
  plain = stripCrc(plain);
  const out: Buffer[] = [];
  expand(plain, out, 0);
  return out;
}

function expand(buf: Buffer, out: Buffer[], depth: number): void {
  if (buf.length === 0) return;
  if (depth > 4) throw new Error('messages nested too deeply');
  switch (buf[0]) {
    case MessageType.compound: {
      const { parts } = decodeCompoundMessage(buf.subarray(1));
      for (const p of parts) expand(p, out, depth + 1);
      return;
    }
    case MessageType.compress:
      expand(decompressPayload(buf.subarray(1)), out, depth + 1);
      return;
    default:
      out.push(buf);
  }
}

export interface StreamEncodeOptions {
  compress: boolean;
  label: string;
  keyring: Keyring | null;
  nonce?: Buffer;
}

/** Wraps a stream message like rawSendMsgStream (no label header). */
export function encodeStream(msg: Buffer, o: StreamEncodeOptions): Buffer {
  let out = msg;
  if (o.compress) out = compressPayload(out);
  const key = o.keyring?.getPrimaryKey();
  if (key) {
    const head = Buffer.alloc(5);
    head[0] = MessageType.encrypt;
    head.writeUInt32BE(encryptedLength(1, out.length), 1);
    const aad = o.label ? Buffer.concat([head, Buffer.from(o.label)]) : head;
    out = Buffer.concat([head, encryptPayload(1, key, out, aad, o.nonce)]);
  }
  return out;
}

export type StreamMessage =
  | { type: MessageType.pushPull; pushPull: PushPull }
  | { type: MessageType.user; user: Buffer }
  | { type: MessageType.ping; ping: Ping }
  | { type: MessageType.ackResp; ack: AckResp }
  | { type: MessageType.err; err: ErrResp }
  | { type: number; unknown: true };

/**
 * Parses one stream message from the bytes received so far (label header
 * already removed). Returns null when more bytes are needed.
 */
export function decodeStream(buf: Buffer, o: DecodeOptions): { msg: StreamMessage; consumed: number } | null {
  if (buf.length === 0) return null;
  const secured = !!(o.keyring && o.keyring.size);
  let plain: Buffer;
  let consumed: number;
  let offset = 0;
  if (buf[0] === MessageType.encrypt) {
    if (!secured) throw new Error('Remote state is encrypted and encryption is not configured');
    if (buf.length < 5) return null;
    const len = buf.readUInt32BE(1);
    if (len > MAX_PUSH_STATE_BYTES) throw new Error(`Remote node state is larger than limit (${len})`);
    if (buf.length < 5 + len) return null;
    const head = buf.subarray(0, 5);
    const aad = o.label ? Buffer.concat([head, Buffer.from(o.label)]) : head;
    plain = decryptPayload(o.keyring!.getKeys(), buf.subarray(5, 5 + len), aad);
    consumed = 5 + len;
  } else {
    if (secured) throw new Error('Encryption is configured but remote state is not encrypted');
    plain = buf;
    consumed = -1;
  }
  try {
    let type = plain[0];
    let r = new Reader(plain, 1);
    if (type === MessageType.compress) {
      const c = readCompress(r.struct());
      const inner = decompressBuffer(c);
      offset = r.pos;
      if (inner.length === 0) throw new Error('empty compressed stream message');
      type = inner[0];
      const msg = parseStreamBody(type, new Reader(inner, 1));
      return { msg, consumed: consumed >= 0 ? consumed : offset };
    }
    const msg = parseStreamBody(type, r);
    return { msg, consumed: consumed >= 0 ? consumed : r.pos };
  } catch (e) {
    if (e instanceof IncompleteError && consumed < 0) return null;
    throw e;
  }
}

function parseStreamBody(type: number, r: Reader): StreamMessage {
  switch (type) {
    case MessageType.pushPull: {
      const h = readPushPullHeader(r.struct());
      if (h.nodes < 0 || h.nodes > 100000) throw new Error('bad push-pull node count');
      const nodes = [];
      for (let i = 0; i < h.nodes; i++) nodes.push(readPushNodeState(r.struct()));
      let userState: Buffer | null = null;
      if (h.userStateLen > 0) userState = Buffer.from(r.take(h.userStateLen));
      return { type, pushPull: { join: h.join, nodes, userState } };
    }
    case MessageType.user: {
      const h = readUserMsgHeader(r.struct());
      return { type, user: Buffer.from(r.take(Math.max(0, h.userMsgLen))) };
    }
    case MessageType.ping:
      return { type, ping: readPing(r.struct()) };
    case MessageType.ackResp:
      return { type, ack: readAck(r.struct()) };
    case MessageType.err:
      return { type, err: readErr(r.struct()) };
    default:
      return { type, unknown: true };
  }
}
