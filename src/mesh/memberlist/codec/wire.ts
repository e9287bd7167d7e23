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
import { Keyring } from '../keyring.ts';
import { addLabelHeaderToPacket, removeLabelHeaderFromPacket } from './label.ts';
import {
  AckResp,
  ErrResp,
  MAX_PACKET_DECOMPRESSED_BYTES,
  MAX_PUSH_STATE_BYTES,
  MAX_STREAM_DECOMPRESSED_BYTES,
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
import { IncompleteError, MsgpackSkipper, Reader } from './msgpack.ts';
import { decryptPayload, encryptPayload, encryptedLength } from '../security.ts';

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
  expand(plain, out, 0, { left: MAX_PACKET_DECOMPRESSED_BYTES });
  return out;
}

/** `left`: decompressed bytes this packet may still produce (shared by all its compressed parts). */
function expand(buf: Buffer, out: Buffer[], depth: number, budget: { left: number }): void {
  if (buf.length === 0) return;
  if (depth > 4) throw new Error('messages nested too deeply');
  switch (buf[0]) {
    case MessageType.compound: {
      const { parts } = decodeCompoundMessage(buf.subarray(1));
      for (const p of parts) expand(p, out, depth + 1, budget);
      return;
    }
    case MessageType.compress: {
      const inner = decompressPayload(buf.subarray(1), budget.left);
      budget.left -= inner.length;
      expand(inner, out, depth + 1, budget);
      return;
    }
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

/** Largest stream message we read (plaintext or encrypted): MAX_PUSH_STATE_BYTES plus the 5-byte encryption header. */
export const MAX_STREAM_MESSAGE_BYTES = MAX_PUSH_STATE_BYTES + 5;
/** Most node states a push-pull may carry. */
export const MAX_PUSH_NODES = 100_000;

type FramePhase = 'start' | 'encrypted' | 'value' | 'header' | 'nodes' | 'known';

/**
 * Finds the end of one stream message in bytes that arrive in pieces, and
 * decodes it once complete (the label header is already removed).
 *
 * Call `step` with the unconsumed bytes each time more arrive (the same
 * start, a longer end): framing resumes where it stopped, so a message that
 * trickles in byte by byte costs O(bytes) in all, and nothing is decrypted,
 * decompressed or decoded before the whole message is there. How the end is
 * found: `[encrypt][len32]` gives it; a plaintext message is a type byte
 * and msgpack values (MsgpackSkipper), plus for push-pull the node states
 * and user state counted in its header, and for user messages the bytes
 * counted in theirs. A message may not exceed `maxBytes` (20 MiB + 5).
 */
export class StreamFramer {
  private phase: FramePhase = 'start';
  private skipper: MsgpackSkipper | null = null;
  private type = -1;
  private rawLen = 0;
  private end = -1;

  constructor(
    private readonly o: DecodeOptions,
    private readonly maxBytes = MAX_STREAM_MESSAGE_BYTES,
  ) {}

  /** The message and its length once `buf` holds all of it, else null. Throws on bad or oversized input. */
  step(buf: Buffer): { value: StreamMessage; consumed: number } | null {
    if (this.end < 0) {
      this.end = this.frame(buf);
      if (this.end < 0) {
        if (buf.length > this.maxBytes) throw new Error(`stream message larger than ${this.maxBytes} bytes`);
        return null;
      }
      if (this.end > this.maxBytes) throw new Error(`stream message of ${this.end} bytes is larger than ${this.maxBytes}`);
    }
    if (buf.length < this.end) return null;
    return { value: decodeWholeStreamMessage(buf.subarray(0, this.end), this.o), consumed: this.end };
  }

  /** Advances the framing over `buf`; the message's end once known, else -1. */
  private frame(buf: Buffer): number {
    if (this.phase === 'start') {
      if (buf.length < 1) return -1;
      const t = buf[0];
      const secured = !!(this.o.keyring && this.o.keyring.size);
      if (t === MessageType.encrypt && !secured) throw new Error('Remote state is encrypted and encryption is not configured');
      if (t !== MessageType.encrypt && secured) throw new Error('Encryption is configured but remote state is not encrypted');
      this.type = t;
      switch (t) {
        case MessageType.encrypt:
          this.phase = 'encrypted';
          break;
        case MessageType.pushPull:
        case MessageType.user:
          this.phase = 'header';
          this.skipper = new MsgpackSkipper(1);
          break;
        case MessageType.compress:
        case MessageType.ping:
        case MessageType.ackResp:
        case MessageType.err:
          this.phase = 'value';
          this.skipper = new MsgpackSkipper(1);
          break;
        default:
          return 1; // an unknown type: the caller reports it
      }
    }
    switch (this.phase) {
      case 'encrypted': {
        if (buf.length < 5) return -1;
        const len = buf.readUInt32BE(1);
        if (len > MAX_PUSH_STATE_BYTES) throw new Error(`Remote node state is larger than limit (${len})`);
        return 5 + len;
      }
      case 'value':
        return this.skipper!.scan(buf) ? this.skipper!.pos : -1;
      case 'header': {
        if (!this.skipper!.scan(buf)) return -1;
        const headerEnd = this.skipper!.pos;
        const r = new Reader(buf.subarray(0, headerEnd), 1);
        if (this.type === MessageType.pushPull) {
          const h = readPushPullHeader(r.struct());
          if (!(h.nodes >= 0 && h.nodes <= MAX_PUSH_NODES)) throw new Error(`bad push-pull node count ${h.nodes}`);
          if (!(h.userStateLen >= 0 && h.userStateLen <= MAX_PUSH_STATE_BYTES)) throw new Error(`bad push-pull user state length ${h.userStateLen}`);
          this.rawLen = h.userStateLen;
          this.skipper = new MsgpackSkipper(headerEnd, h.nodes);
          this.phase = 'nodes';
        } else {
          const h = readUserMsgHeader(r.struct());
          if (!(h.userMsgLen >= 0 && h.userMsgLen <= MAX_PUSH_STATE_BYTES)) throw new Error(`bad user message length ${h.userMsgLen}`);
          this.rawLen = h.userMsgLen;
          this.phase = 'known';
          return headerEnd + this.rawLen;
        }
      }
      // falls through
      case 'nodes':
        if (!this.skipper!.scan(buf)) return -1;
        this.phase = 'known';
        return this.skipper!.pos + this.rawLen;
    }
    throw new Error(`stream framing in phase ${this.phase}`);
  }
}

/**
 * Parses one stream message from the start of `buf` (label header already
 * removed). Returns null when more bytes are needed.
 */
export function decodeStream(buf: Buffer, o: DecodeOptions): { msg: StreamMessage; consumed: number } | null {
  const r = new StreamFramer(o).step(buf);
  return r && { msg: r.value, consumed: r.consumed };
}

/** Decodes a message known to be complete: decrypt, decompress, parse, each once. */
function decodeWholeStreamMessage(buf: Buffer, o: DecodeOptions): StreamMessage {
  let plain = buf;
  if (buf[0] === MessageType.encrypt) {
    const head = buf.subarray(0, 5);
    const aad = o.label ? Buffer.concat([head, Buffer.from(o.label)]) : head;
    plain = decryptPayload(o.keyring!.getKeys(), buf.subarray(5), aad);
  }
  try {
    if (plain.length === 0) throw new Error('empty stream message');
    const r = new Reader(plain, 1);
    if (plain[0] !== MessageType.compress) return parseStreamBody(plain[0], r);
    const inner = decompressBuffer(readCompress(r.struct()), MAX_STREAM_DECOMPRESSED_BYTES);
    if (inner.length === 0) throw new Error('empty compressed stream message');
    return parseStreamBody(inner[0], new Reader(inner, 1));
  } catch (e) {
    // The message is complete, so its contents must be too.
    if (e instanceof IncompleteError) throw new Error('stream message is truncated');
    throw e;
  }
}

function parseStreamBody(type: number, r: Reader): StreamMessage {
  switch (type) {
    case MessageType.pushPull: {
      const h = readPushPullHeader(r.struct());
      if (!(h.nodes >= 0 && h.nodes <= MAX_PUSH_NODES)) throw new Error(`bad push-pull node count ${h.nodes}`);
      const nodes = [];
      for (let i = 0; i < h.nodes; i++) nodes.push(readPushNodeState(r.struct()));
      let userState: Buffer | null = null;
      if (h.userStateLen > 0) userState = Buffer.from(r.take(h.userStateLen));
      return { type, pushPull: { join: h.join, nodes, userState } };
    }
    case MessageType.user: {
      const h = readUserMsgHeader(r.struct());
      if (!(h.userMsgLen >= 0)) throw new Error(`bad user message length ${h.userMsgLen}`);
      return { type, user: Buffer.from(r.take(h.userMsgLen)) };
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
