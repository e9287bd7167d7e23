/**
 * memberlist's messages: type bytes, the structs (field names as Go spells
 * them), compound messages, the CRC wrapper and the compress wrapper.
 * Mirrors net.go and util.go of hashicorp/memberlist 0.2.x.
 */
import { crc32 } from 'node:zlib';
import { Reader, StructView, Writer } from './msgpack.ts';
import { lzwCompress, lzwDecompress } from './lzw.ts';

/** Message type bytes (net.go `messageType`, iota order). */
export enum MessageType {
  ping = 0,
  indirectPing = 1,
  ackResp = 2,
  suspect = 3,
  alive = 4,
  dead = 5,
  pushPull = 6,
  compound = 7,
  user = 8,
  compress = 9,
  encrypt = 10,
  nackResp = 11,
  hasCrc = 12,
  err = 13,
  /** Upstream label.go's label header marker (not in 0.2.x). */
  hasLabel = 244,
}

/** Node states as memberlist numbers them (NodeStateType). */
export enum NodeStateType {
  alive = 0,
  suspect = 1,
  dead = 2,
  left = 3,
}

export const META_MAX_SIZE = 512;
export const COMPOUND_HEADER_OVERHEAD = 2;
export const COMPOUND_OVERHEAD = 2;
export const USER_MSG_OVERHEAD = 1;
/**
 * Largest stream message we accept (memberlist's maxPushStateBytes, which Go
 * applies to encrypted streams; we apply it to every stream message, and to
 * the decompressed size of a compressed one).
 */
export const MAX_PUSH_STATE_BYTES = 20 * 1024 * 1024;
/**
 * Largest decompressed packet (UDP): a packet is at most 65,507 bytes and
 * memberlist only compresses when that makes it smaller, so nothing legal
 * expands beyond 64 KiB. The budget covers every compressed part of one
 * packet together (compounds and nesting included).
 */
export const MAX_PACKET_DECOMPRESSED_BYTES = 64 * 1024;
/** Largest decompressed stream message: the same 20 MiB as MAX_PUSH_STATE_BYTES. */
export const MAX_STREAM_DECOMPRESSED_BYTES = MAX_PUSH_STATE_BYTES;
/** Compression algorithm numbers; 0 is LZW. */
export const LZW_ALGO = 0;

export interface Ping {
  seqNo: number;
  node: string;
  sourceAddr?: Buffer | null;
  sourcePort?: number;
  sourceNode?: string;
}
export interface IndirectPingReq {
  seqNo: number;
  target: Buffer;
  port: number;
  node: string;
  nack: boolean;
  sourceAddr?: Buffer | null;
  sourcePort?: number;
  sourceNode?: string;
}
export interface AckResp {
  seqNo: number;
  payload: Buffer | null;
}
export interface NackResp {
  seqNo: number;
}
export interface ErrResp {
  error: string;
}
export interface Suspect {
  incarnation: number;
  node: string;
  from: string;
}
export interface Alive {
  incarnation: number;
  node: string;
  addr: Buffer;
  port: number;
  meta: Buffer | null;
  /** pmin, pmax, pcur, dmin, dmax, dcur */
  vsn: number[];
}
export interface Dead {
  incarnation: number;
  node: string;
  from: string;
}
export interface PushPullHeader {
  nodes: number;
  userStateLen: number;
  join: boolean;
}
export interface UserMsgHeader {
  userMsgLen: number;
}
export interface PushNodeState {
  name: string;
  addr: Buffer;
  port: number;
  meta: Buffer | null;
  incarnation: number;
  state: NodeStateType;
  vsn: number[];
}
export interface Compress {
  algo: number;
  buf: Buffer;
}

// --- struct bodies (msgpack only, no type byte) -------------------------

const vsnBytes = (v: number[] | null | undefined): Buffer | null => (v ? Buffer.from(v) : null);
const vsnArray = (b: Buffer | null): number[] => (b ? [...b] : []);

export function writePing(w: Writer, p: Ping): Writer {
  return w.struct([
    { name: 'SeqNo', kind: 'uint', value: p.seqNo },
    { name: 'Node', kind: 'str', value: p.node },
    { name: 'SourceAddr', kind: 'bytes', value: p.sourceAddr ?? null, omitEmpty: true },
    { name: 'SourcePort', kind: 'uint', value: p.sourcePort ?? 0, omitEmpty: true },
    { name: 'SourceNode', kind: 'str', value: p.sourceNode ?? '', omitEmpty: true },
  ]);
}
export function readPing(s: StructView): Ping {
  return {
    seqNo: s.uint('SeqNo'),
    node: s.str('Node'),
    sourceAddr: s.bytes('SourceAddr'),
    sourcePort: s.uint('SourcePort'),
    sourceNode: s.str('SourceNode'),
  };
}

export function writeIndirectPing(w: Writer, p: IndirectPingReq): Writer {
  return w.struct([
    { name: 'SeqNo', kind: 'uint', value: p.seqNo },
    { name: 'Target', kind: 'bytes', value: p.target },
    { name: 'Port', kind: 'uint', value: p.port },
    { name: 'Node', kind: 'str', value: p.node },
    { name: 'Nack', kind: 'bool', value: p.nack },
    { name: 'SourceAddr', kind: 'bytes', value: p.sourceAddr ?? null, omitEmpty: true },
    { name: 'SourcePort', kind: 'uint', value: p.sourcePort ?? 0, omitEmpty: true },
    { name: 'SourceNode', kind: 'str', value: p.sourceNode ?? '', omitEmpty: true },
  ]);
}
export function readIndirectPing(s: StructView): IndirectPingReq {
  return {
    seqNo: s.uint('SeqNo'),
    target: s.bytes('Target') ?? Buffer.alloc(0),
    port: s.uint('Port'),
    node: s.str('Node'),
    nack: s.bool('Nack'),
    sourceAddr: s.bytes('SourceAddr'),
    sourcePort: s.uint('SourcePort'),
    sourceNode: s.str('SourceNode'),
  };
}

export function writeAck(w: Writer, a: AckResp): Writer {
  return w.struct([
    { name: 'SeqNo', kind: 'uint', value: a.seqNo },
    { name: 'Payload', kind: 'bytes', value: a.payload },
  ]);
}
export function readAck(s: StructView): AckResp {
  return { seqNo: s.uint('SeqNo'), payload: s.bytes('Payload') };
}

export function writeNack(w: Writer, n: NackResp): Writer {
  return w.struct([{ name: 'SeqNo', kind: 'uint', value: n.seqNo }]);
}
export function readNack(s: StructView): NackResp {
  return { seqNo: s.uint('SeqNo') };
}

export function writeErr(w: Writer, e: ErrResp): Writer {
  return w.struct([{ name: 'Error', kind: 'str', value: e.error }]);
}
export function readErr(s: StructView): ErrResp {
  return { error: s.str('Error') };
}

export function writeSuspect(w: Writer, m: Suspect): Writer {
  return w.struct([
    { name: 'Incarnation', kind: 'uint', value: m.incarnation },
    { name: 'Node', kind: 'str', value: m.node },
    { name: 'From', kind: 'str', value: m.from },
  ]);
}
export function readSuspect(s: StructView): Suspect {
  return { incarnation: s.uint('Incarnation'), node: s.str('Node'), from: s.str('From') };
}
export const writeDead = writeSuspect as (w: Writer, m: Dead) => Writer;
export const readDead = readSuspect as (s: StructView) => Dead;

export function writeAlive(w: Writer, a: Alive): Writer {
  return w.struct([
    { name: 'Incarnation', kind: 'uint', value: a.incarnation },
    { name: 'Node', kind: 'str', value: a.node },
    { name: 'Addr', kind: 'bytes', value: a.addr },
    { name: 'Port', kind: 'uint', value: a.port },
    { name: 'Meta', kind: 'bytes', value: a.meta },
    { name: 'Vsn', kind: 'bytes', value: vsnBytes(a.vsn) },
  ]);
}
export function readAlive(s: StructView): Alive {
  return {
    incarnation: s.uint('Incarnation'),
    node: s.str('Node'),
    addr: s.bytes('Addr') ?? Buffer.alloc(0),
    port: s.uint('Port'),
    meta: s.bytes('Meta'),
    vsn: vsnArray(s.bytes('Vsn')),
  };
}

export function writePushPullHeader(w: Writer, h: PushPullHeader): Writer {
  return w.struct([
    { name: 'Nodes', kind: 'int', value: h.nodes },
    { name: 'UserStateLen', kind: 'int', value: h.userStateLen },
    { name: 'Join', kind: 'bool', value: h.join },
  ]);
}
export function readPushPullHeader(s: StructView): PushPullHeader {
  return { nodes: s.int('Nodes'), userStateLen: s.int('UserStateLen'), join: s.bool('Join') };
}

export function writePushNodeState(w: Writer, n: PushNodeState): Writer {
  return w.struct([
    { name: 'Name', kind: 'str', value: n.name },
    { name: 'Addr', kind: 'bytes', value: n.addr },
    { name: 'Port', kind: 'uint', value: n.port },
    { name: 'Meta', kind: 'bytes', value: n.meta },
    { name: 'Incarnation', kind: 'uint', value: n.incarnation },
    { name: 'State', kind: 'int', value: n.state },
    { name: 'Vsn', kind: 'bytes', value: vsnBytes(n.vsn) },
  ]);
}
export function readPushNodeState(s: StructView): PushNodeState {
  return {
    name: s.str('Name'),
    addr: s.bytes('Addr') ?? Buffer.alloc(0),
    port: s.uint('Port'),
    meta: s.bytes('Meta'),
    incarnation: s.uint('Incarnation'),
    state: s.int('State') as NodeStateType,
    vsn: vsnArray(s.bytes('Vsn')),
  };
}

export function writeUserMsgHeader(w: Writer, h: UserMsgHeader): Writer {
  return w.struct([{ name: 'UserMsgLen', kind: 'int', value: h.userMsgLen }]);
}
export function readUserMsgHeader(s: StructView): UserMsgHeader {
  return { userMsgLen: s.int('UserMsgLen') };
}

export function writeCompress(w: Writer, c: Compress): Writer {
  return w.struct([
    { name: 'Algo', kind: 'uint', value: c.algo },
    { name: 'Buf', kind: 'bytes', value: c.buf },
  ]);
}
export function readCompress(s: StructView): Compress {
  return { algo: s.uint('Algo'), buf: s.bytes('Buf') ?? Buffer.alloc(0) };
}

// --- whole messages: type byte + body ------------------------------------

/** Encodes `[type][msgpack body]` like memberlist's `encode(msgType, in)`. */
export function encodeMessage<T>(type: MessageType, write: (w: Writer, v: T) => Writer, v: T): Buffer {
  const w = new Writer().byte(type);
  write(w, v);
  return w.toBuffer();
}

export const encodePing = (p: Ping) => encodeMessage(MessageType.ping, writePing, p);
export const encodeIndirectPing = (p: IndirectPingReq) => encodeMessage(MessageType.indirectPing, writeIndirectPing, p);
export const encodeAck = (a: AckResp) => encodeMessage(MessageType.ackResp, writeAck, a);
export const encodeNack = (n: NackResp) => encodeMessage(MessageType.nackResp, writeNack, n);
export const encodeSuspect = (s: Suspect) => encodeMessage(MessageType.suspect, writeSuspect, s);
export const encodeAlive = (a: Alive) => encodeMessage(MessageType.alive, writeAlive, a);
export const encodeDead = (d: Dead) => encodeMessage(MessageType.dead, writeDead, d);
export const encodeErr = (e: ErrResp) => encodeMessage(MessageType.err, writeErr, e);

/** Decodes the msgpack body of a packet message (after the type byte). */
export function decodeBody<T>(body: Buffer, read: (s: StructView) => T): T {
  return read(new Reader(body).struct());
}

/** `[compound][n][len16 x n][msgs...]`; at most 255 parts. */
export function makeCompoundMessage(msgs: Buffer[]): Buffer {
  if (msgs.length > 255) throw new RangeError('compound: too many messages');
  const head = Buffer.alloc(2 + 2 * msgs.length);
  head[0] = MessageType.compound;
  head[1] = msgs.length;
  msgs.forEach((m, i) => head.writeUInt16BE(m.length, 2 + 2 * i));
  return Buffer.concat([head, ...msgs]);
}

/** Splits a compound body (after the type byte); `truncated` counts parts that did not fit. */
export function decodeCompoundMessage(buf: Buffer): { truncated: number; parts: Buffer[] } {
  if (buf.length < 1) throw new Error('missing compound length byte');
  const n = buf[0];
  let off = 1;
  if (buf.length < off + n * 2) throw new Error('truncated len slice');
  const lens: number[] = [];
  for (let i = 0; i < n; i++) lens.push(buf.readUInt16BE(off + 2 * i));
  off += n * 2;
  const parts: Buffer[] = [];
  for (let i = 0; i < n; i++) {
    if (buf.length < off + lens[i]) return { truncated: n - i, parts };
    parts.push(buf.subarray(off, off + lens[i]));
    off += lens[i];
  }
  return { truncated: 0, parts };
}

/** `[hasCrc][crc32 IEEE big-endian of msg][msg]`. */
export function addCrc(msg: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head[0] = MessageType.hasCrc;
  head.writeUInt32BE(crc32(msg) >>> 0, 1);
  return Buffer.concat([head, msg]);
}

/** Strips a CRC wrapper if present; throws on a checksum mismatch. */
export function stripCrc(buf: Buffer): Buffer {
  if (buf.length >= 5 && buf[0] === MessageType.hasCrc) {
    const expected = buf.readUInt32BE(1);
    const inner = buf.subarray(5);
    if ((crc32(inner) >>> 0) !== expected) throw new Error('invalid checksum');
    return inner;
  }
  return buf;
}

/** `[compress]{Algo:0, Buf:lzw(msg)}` like memberlist's compressPayload. */
export function compressPayload(msg: Buffer): Buffer {
  return encodeMessage(MessageType.compress, writeCompress, { algo: LZW_ALGO, buf: lzwCompress(msg) });
}

/** Inverse of compressPayload for the body after the type byte; refuses more than `maxOutput` bytes. */
export function decompressPayload(body: Buffer, maxOutput = MAX_PACKET_DECOMPRESSED_BYTES): Buffer {
  return decompressBuffer(decodeBody(body, readCompress), maxOutput);
}

/** Refuses (DecompressLimitError) anything that would expand beyond `maxOutput` bytes. */
export function decompressBuffer(c: Compress, maxOutput: number): Buffer {
  if (c.algo !== LZW_ALGO) throw new Error(`Cannot decompress unknown algorithm ${c.algo}`);
  return lzwDecompress(c.buf, maxOutput);
}

// --- stream-only messages -------------------------------------------------

export interface PushPull {
  join: boolean;
  nodes: PushNodeState[];
  userState: Buffer | null;
}

/** `[pushPull][header][node states...][user state]` like sendLocalState. */
export function encodePushPull(p: PushPull): Buffer {
  const w = new Writer().byte(MessageType.pushPull);
  writePushPullHeader(w, { nodes: p.nodes.length, userStateLen: p.userState?.length ?? 0, join: p.join });
  for (const n of p.nodes) writePushNodeState(w, n);
  if (p.userState && p.userState.length) w.raw(p.userState);
  return w.toBuffer();
}

/** `[user][header{UserMsgLen}][msg]` like sendUserMsg. */
export function encodeUserStreamMsg(m: Buffer): Buffer {
  const w = new Writer().byte(MessageType.user);
  writeUserMsgHeader(w, { userMsgLen: m.length });
  if (m.length) w.raw(m);
  return w.toBuffer();
}
