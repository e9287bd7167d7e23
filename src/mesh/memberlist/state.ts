/**
 * The SWIM + Lifeguard state machine (memberlist's state.go plus the
 * message handling of net.go): probing with indirect and TCP fallback
 * pings, nacks, suspicion with confirmations, incarnation numbers and
 * refutation, alive/suspect/dead gossip piggybacked on a retransmit-limited
 * queue, push-pull anti-entropy, user messages and graceful leave.
 *
 * It owns no sockets and no real time: it is given a Transport and a Clock,
 * so tests run it on the in-memory MockNetwork with a ManualClock.
 */
import { Awareness } from './awareness.ts';
import { Broadcast, TransmitLimitedQueue } from './broadcast-queue.ts';
import { Clock, TimerHandle, sleep } from './clock.ts';
import { Keyring } from './keyring.ts';
import { labelHeader, peekStreamLabel, removeLabelHeaderFromPacket } from './codec/label.ts';
import { Reader } from './codec/msgpack.ts';
import {
  Alive,
  COMPOUND_HEADER_OVERHEAD,
  COMPOUND_OVERHEAD,
  Dead,
  IndirectPingReq,
  META_MAX_SIZE,
  MessageType,
  NodeStateType,
  Ping,
  PushNodeState,
  Suspect,
  USER_MSG_OVERHEAD,
  decodeBody,
  encodeAck,
  encodeAlive,
  encodeDead,
  encodeErr,
  encodeIndirectPing,
  encodeNack,
  encodePing,
  encodePushPull,
  encodeSuspect,
  encodeUserStreamMsg,
  makeCompoundMessage,
  readAck,
  readAlive,
  readDead,
  readIndirectPing,
  readNack,
  readPing,
  readSuspect,
} from './codec/messages.ts';
import { encryptOverhead } from './security.ts';
import { suspicionTimeout, Suspicion } from './suspicion.ts';
import { ConnReader, StreamConn, Transport, joinHostPort, splitHostPort } from './transport.ts';
import { StreamFramer, StreamMessage, decodePacket, encodePacket, encodeStream } from './codec/wire.ts';
import { DecompressLimitError } from './codec/lzw.ts';
import { WarnLimiter, WarningKind, hostOf } from './warnings.ts';
import { AddressPolicy, addressPolicy, addressProblem, entryProblem, nameProblem, pushEntryProblem } from './codec/validate.ts';

/**
 * Protocol min/max/cur and delegate min/max/cur that we advertise by
 * default: protocol 1..5 speaking 2 (memberlist 0.2.x), delegate 2..5
 * speaking 5 (Serf's range; viiwork keeps it so Serf agents join).
 */
export const VSN: readonly number[] = [1, 5, 2, 2, 5, 5];

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';
export type Logger = (level: LogLevel, msg: string, fields?: Record<string, unknown>) => void;

/** What the application plugs in (delegate.go). Every method is optional. */
export interface Delegate {
  /** Metadata for our alive messages, at most `limit` (512) bytes. */
  nodeMeta?(limit: number): Buffer;
  /** A user message arrived (gossiped, UDP best-effort or TCP reliable). */
  notifyMsg?(msg: Buffer): void;
  /** User broadcasts to piggyback, each plus `overhead` bytes within `limit`. */
  getBroadcasts?(overhead: number, limit: number): Buffer[];
  /** User state sent in a push-pull. */
  localState?(join: boolean): Buffer;
  /** User state received in a push-pull. */
  mergeRemoteState?(buf: Buffer, join: boolean): void;
}

/** Tunables; all durations in ms, defaults are memberlist's DefaultLANConfig except where noted. */
export interface StateConfig {
  name: string;
  label: string;
  keyring: Keyring | null;
  probeIntervalMs: number;
  probeTimeoutMs: number;
  indirectChecks: number;
  gossipIntervalMs: number;
  gossipNodes: number;
  gossipToTheDeadMs: number;
  suspicionMult: number;
  suspicionMaxTimeoutMult: number;
  retransmitMult: number;
  pushPullIntervalMs: number;
  deadNodeReclaimMs: number;
  awarenessMaxMultiplier: number;
  tcpTimeoutMs: number;
  udpBufferSize: number;
  enableCompression: boolean;
  disableTcpPings: boolean;
  logger: Logger;
  /** Spacing of repeated operator warnings about one peer (see warnings.ts). */
  warnIntervalMs: number;
  /** The six version bytes we advertise (VSN, with the configured delegate range). */
  vsn: readonly number[];
}

/** Counters for operators and tests. */
export interface MemberlistStats {
  /** Packets received / refused whole (label, crypto, checksum, size, framing). */
  packetsReceived: number;
  packetsDropped: number;
  /** Messages inside accepted packets that were refused (malformed or invalid). */
  messagesDropped: number;
  /** Incoming streams accepted / ended with an error. */
  streamsReceived: number;
  streamsDropped: number;
  /** Compressed messages refused for expanding beyond the cap. */
  decompressRefused: number;
  /** Alive or push-pull entries refused by validation (never stored or relayed). */
  entriesRefused: number;
}

export interface NodeState {
  name: string;
  addr: Buffer;
  port: number;
  meta: Buffer;
  incarnation: number;
  state: NodeStateType;
  stateChange: number;
  vsn: number[];
}

export interface StateEvents {
  join(n: NodeState): void;
  update(n: NodeState): void;
  leave(n: NodeState): void;
  conflict(existing: NodeState, other: NodeState, duringJoin: boolean): void;
}

export function ipToString(addr: Buffer): string {
  if (addr.length === 4) return [...addr].join('.');
  if (addr.length === 16) {
    if (addr.subarray(0, 10).every((b) => b === 0) && addr[10] === 0xff && addr[11] === 0xff) {
      return [...addr.subarray(12)].join('.');
    }
    const parts: string[] = [];
    for (let i = 0; i < 16; i += 2) parts.push(addr.readUInt16BE(i).toString(16));
    return parts.join(':').replace(/(^|:)0(:0)+(:|$)/, '::');
  }
  return '';
}

export function ipToBytes(ip: string): Buffer {
  if (/^\d+\.\d+\.\d+\.\d+$/.test(ip)) return Buffer.from(ip.split('.').map(Number));
  const [head, tail] = ip.includes('::') ? ip.split('::') : [ip, ''];
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const groups = [...h, ...Array(8 - h.length - t.length).fill('0'), ...t];
  const b = Buffer.alloc(16);
  groups.forEach((g, i) => b.writeUInt16BE(parseInt(g, 16), i * 2));
  return b;
}

/** The label header at the start of an incoming stream. */
const labelFramer = {
  step(b: Buffer): { value: string; consumed: number } | null {
    const r = peekStreamLabel(b);
    return r ? { value: r.label, consumed: r.consumed } : null;
  },
};

/** Which mismatch a decode error message stands for (null: none of them). */
export function mismatchKind(err: string): WarningKind | null {
  if (/label mismatch|unacceptable label/.test(err)) return 'label';
  if (/Remote state is encrypted and encryption is not configured|Encryption is configured but remote state is not encrypted/.test(err)) return 'mode';
  if (/No installed keys could decrypt/.test(err)) return 'encryption';
  return null;
}

const nodeAddress = (n: { addr: Buffer; port: number }) => joinHostPort(ipToString(n.addr), n.port);

interface AckHandler {
  ack(payload: Buffer | null, at: number): void;
  nack?(): void;
  timer: TimerHandle;
}

function randomOffset(n: number): number {
  return n === 0 ? 0 : Math.floor(Math.random() * n);
}

/**
 * Up to k distinct random nodes that `exclude` does not reject. (memberlist
 * draws 3n random indexes and may come back short; we pick from the
 * eligible nodes directly, which always finds k when k exist.)
 */
function kRandomNodes(k: number, nodes: NodeState[], exclude: (n: NodeState) => boolean): NodeState[] {
  const eligible = nodes.filter((n) => !exclude(n));
  for (let i = 0; i < Math.min(k, eligible.length); i++) {
    const j = i + Math.floor(Math.random() * (eligible.length - i));
    [eligible[i], eligible[j]] = [eligible[j], eligible[i]];
  }
  return eligible.slice(0, k);
}

function shuffle<T>(a: T[]): void {
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
}

function pushPullScale(intervalMs: number, n: number): number {
  const threshold = 32;
  if (n <= threshold) return intervalMs;
  return (Math.ceil(Math.log2(n) - Math.log2(threshold)) + 1) * intervalMs;
}

export class MemberlistState {
  private readonly nodes: NodeState[] = [];
  private readonly nodeMap = new Map<string, NodeState>();
  private readonly nodeTimers = new Map<string, Suspicion>();
  private readonly ackHandlers = new Map<number, AckHandler>();
  private readonly awareness: Awareness;
  readonly broadcasts: TransmitLimitedQueue;
  private seqNo = 0;
  private incarnation = 0;
  private probeIndex = 0;
  private probing = false;
  private left = false;
  private stopped = false;
  private joining = false;
  private readonly timers = new Set<TimerHandle>();
  private readonly conns = new Set<StreamConn>();
  private readonly warnings: WarnLimiter;
  private readonly policy: AddressPolicy;
  readonly stats: MemberlistStats = {
    packetsReceived: 0,
    packetsDropped: 0,
    messagesDropped: 0,
    streamsReceived: 0,
    streamsDropped: 0,
    decompressRefused: 0,
    entriesRefused: 0,
  };

  constructor(
    readonly cfg: StateConfig,
    readonly transport: Transport,
    readonly clock: Clock,
    private readonly delegate: Delegate,
    private readonly events: StateEvents,
  ) {
    this.awareness = new Awareness(cfg.awarenessMaxMultiplier);
    this.warnings = new WarnLimiter(clock, cfg.warnIntervalMs);
    this.policy = addressPolicy(transport.advertiseAddr);
    this.broadcasts = new TransmitLimitedQueue(cfg.retransmitMult, () => this.nodes.length);
    transport.setHandlers({
      packet: (buf, from, at) => this.ingestPacket(buf, from, at),
      stream: (conn) => void this.handleConn(conn),
    });
  }

  // --- lifecycle ----------------------------------------------------------

  /** Adds ourselves as alive and starts the probe, gossip and push-pull loops. */
  start(): void {
    const meta = this.localMeta();
    this.aliveNode(
      {
        incarnation: this.nextIncarnation(),
        node: this.cfg.name,
        addr: ipToBytes(this.transport.advertiseAddr),
        port: this.transport.advertisePort,
        meta,
        vsn: [...this.cfg.vsn],
      },
      true,
    );
    this.every(this.cfg.probeIntervalMs, () => void this.probe());
    this.every(this.cfg.gossipIntervalMs, () => this.gossip());
    if (this.cfg.pushPullIntervalMs > 0) {
      const loop = () => {
        if (this.stopped) return;
        const t = this.clock.setTimeout(() => {
          this.timers.delete(t);
          void this.pushPull();
          loop();
        }, pushPullScale(this.cfg.pushPullIntervalMs, this.nodes.length));
        this.timers.add(t);
      };
      const first = this.clock.setTimeout(loop, Math.random() * this.cfg.pushPullIntervalMs);
      this.timers.add(first);
    }
  }

  private every(intervalMs: number, fn: () => void): void {
    if (intervalMs <= 0) return;
    const tick = () => {
      if (this.stopped) return;
      const t = this.clock.setTimeout(() => {
        this.timers.delete(t);
        if (this.stopped) return;
        fn();
        tick();
      }, intervalMs);
      this.timers.add(t);
    };
    // random stagger like triggerFunc
    const t0 = this.clock.setTimeout(tick, Math.random() * intervalMs);
    this.timers.add(t0);
  }

  stop(): void {
    this.stopped = true;
    for (const t of this.timers) t.cancel();
    this.timers.clear();
    for (const s of this.nodeTimers.values()) s.cancel();
    this.nodeTimers.clear();
    for (const h of this.ackHandlers.values()) h.timer.cancel();
    this.ackHandlers.clear();
    for (const c of this.conns) c.close();
    this.conns.clear();
  }

  get hasLeft(): boolean {
    return this.left;
  }

  // --- accessors ------------------------------------------------------------

  allNodes(): NodeState[] {
    return [...this.nodes];
  }

  getNode(name: string): NodeState | undefined {
    return this.nodeMap.get(name);
  }

  localNode(): NodeState {
    return this.nodeMap.get(this.cfg.name)!;
  }

  numAlive(): number {
    let n = 0;
    for (const x of this.nodes) if (x.state === NodeStateType.alive || x.state === NodeStateType.suspect) n++;
    return n;
  }

  healthScore(): number {
    return this.awareness.getHealthScore();
  }

  private nextSeqNo(): number {
    this.seqNo = (this.seqNo + 1) >>> 0;
    return this.seqNo;
  }

  private nextIncarnation(): number {
    this.incarnation = (this.incarnation + 1) >>> 0;
    return this.incarnation;
  }

  private localMeta(): Buffer {
    const meta = this.delegate.nodeMeta?.(META_MAX_SIZE) ?? Buffer.alloc(0);
    if (meta.length > META_MAX_SIZE) throw new Error(`node metadata is ${meta.length} bytes, more than ${META_MAX_SIZE}`);
    return meta;
  }

  private selfAddr(): { addr: Buffer; port: number } {
    return { addr: ipToBytes(this.transport.advertiseAddr), port: this.transport.advertisePort };
  }

  private log(level: LogLevel, msg: string, fields?: Record<string, unknown>): void {
    this.cfg.logger(level, msg, fields);
  }

  /**
   * An operator warning about a peer, at most one per kind and peer host per
   * warnIntervalMs (repeats are counted); below that rate it is a debug line.
   */
  private warnPeer(kind: WarningKind, peer: string, msg: string, fields?: Record<string, unknown>): void {
    const ok = this.warnings.allow(kind, hostOf(peer));
    if (!ok) return this.log('debug', msg, { ...fields, kind, from: peer });
    this.log('warn', msg, { ...fields, kind, from: peer, ...(ok.suppressed ? { suppressed: ok.suppressed } : {}) });
  }

  // --- sending --------------------------------------------------------------

  private get encrypted(): boolean {
    return !!(this.cfg.keyring && this.cfg.keyring.size);
  }

  private packetOverhead(): number {
    return (this.encrypted ? encryptOverhead(1) : 0) + labelHeader(this.cfg.label).length + 5;
  }

  /** Memberlist broadcasts first, then the delegate's user broadcasts. */
  private getBroadcasts(overhead: number, limit: number): Buffer[] {
    const toSend = this.broadcasts.getBroadcasts(overhead, limit);
    if (this.delegate.getBroadcasts) {
      let used = 0;
      for (const m of toSend) used += m.length + overhead;
      const avail = limit - used;
      if (avail > overhead + USER_MSG_OVERHEAD) {
        for (const m of this.delegate.getBroadcasts(overhead + USER_MSG_OVERHEAD, avail)) {
          toSend.push(Buffer.concat([Buffer.from([MessageType.user]), m]));
        }
      }
    }
    return toSend;
  }

  private nodeByAddress(addr: string): NodeState | undefined {
    for (const n of this.nodes) if (nodeAddress(n) === addr) return n;
    return undefined;
  }

  /** Sends a message, piggybacking queued broadcasts (sendMsg). */
  private async sendMsg(addr: string, msg: Buffer): Promise<void> {
    const avail = this.cfg.udpBufferSize - msg.length - COMPOUND_HEADER_OVERHEAD - this.packetOverhead();
    const extra = this.getBroadcasts(COMPOUND_OVERHEAD, avail);
    if (!extra.length) return this.rawSendMsgPacket(addr, undefined, msg);
    return this.rawSendMsgPacket(addr, undefined, makeCompoundMessage([msg, ...extra]));
  }

  private async rawSendMsgPacket(addr: string, node: NodeState | undefined, msg: Buffer): Promise<void> {
    const peer = node ?? this.nodeByAddress(addr);
    const out = encodePacket(msg, {
      compress: this.cfg.enableCompression,
      crc: !!peer && peer.vsn[1] >= 5,
      label: this.cfg.label,
      keyring: this.cfg.keyring,
    });
    try {
      await this.transport.writeTo(out, addr);
    } catch (e) {
      this.log('debug', 'failed to send packet', { addr, err: String(e) });
    }
  }

  private async dialStream(addr: string, timeoutMs: number): Promise<StreamConn> {
    const conn = await this.transport.dial(addr, timeoutMs);
    this.conns.add(conn);
    conn.onClose(() => this.conns.delete(conn));
    const hdr = labelHeader(this.cfg.label);
    if (hdr.length) conn.write(hdr);
    return conn;
  }

  private sendStream(conn: StreamConn, msg: Buffer): void {
    conn.write(
      encodeStream(msg, { compress: this.cfg.enableCompression, label: this.cfg.label, keyring: this.cfg.keyring }),
    );
  }

  private readStream(reader: ConnReader, timeoutMs: number): Promise<StreamMessage> {
    return reader.read(new StreamFramer({ label: this.cfg.label, keyring: this.cfg.keyring }), this.clock, timeoutMs);
  }

  /**
   * The operator warning a failed exchange with `peer` stands for, if it is
   * a mismatch of label, key or mode, or an oversized message; true when
   * one was reported (else the caller logs it at debug).
   */
  private reportStreamError(e: unknown, peer: string, nothingReceived: boolean, weDialled: boolean): boolean {
    const msg = (e as Error).message ?? String(e);
    if (e instanceof DecompressLimitError) {
      this.stats.decompressRefused++;
      this.warnPeer('oversize', peer, `dropped a compressed stream from ${peer}: it expands beyond ${e.limit} bytes`);
      return true;
    }
    if (/larger than/.test(msg)) {
      this.warnPeer('oversize', peer, `dropped a stream from ${peer}: ${msg}`);
      return true;
    }
    const kind = mismatchKind(msg);
    if (kind === 'mode') {
      // our own decode error describes their stream; a remote error describes ours
      const theirs = /Remote state is encrypted/.test(msg) !== msg.startsWith('remote error:') ? 'encrypted' : 'plaintext';
      this.warnPeer('mode', peer, `mesh mode mismatch: ${theirs} stream from ${peer}, but this node is ${this.encrypted ? 'encrypted' : 'plaintext'}`, { err: msg });
      return true;
    }
    if (kind === 'encryption') {
      this.warnPeer('encryption', peer, `stream from ${peer} could not be decrypted: it uses another key`, { err: msg });
      return true;
    }
    if (kind === 'label') {
      this.warnPeer('label', peer, `label mismatch with ${peer}: ${msg}`);
      return true;
    }
    if (weDialled && nothingReceived && /closed before/.test(msg)) {
      // A peer with another label (or none, or an old memberlist that knows
      // no labels) closes the stream without a word.
      this.warnPeer(
        'label',
        peer,
        `${peer} closed the stream without answering: it probably uses another label (this node's label: ${JSON.stringify(this.cfg.label)})`,
      );
      return true;
    }
    return false;
  }

  /** Queues a broadcast about `name`. */
  private broadcast(name: string, msg: Buffer, finished?: () => void): void {
    const b: Broadcast = { name, msg, finished };
    this.broadcasts.queueBroadcast(b);
  }

  // --- receiving packets ------------------------------------------------------

  ingestPacket(buf: Buffer, from: string, at: number): void {
    if (this.stopped) return;
    this.stats.packetsReceived++;
    let msgs: Buffer[];
    try {
      msgs = decodePacket(buf, { label: this.cfg.label, keyring: this.cfg.keyring });
    } catch (e) {
      this.stats.packetsDropped++;
      if (e instanceof DecompressLimitError) {
        this.stats.decompressRefused++;
        this.warnPeer('oversize', from, `dropped a compressed packet from ${from}: it expands beyond ${e.limit} bytes`);
        return;
      }
      const msg = (e as Error).message;
      let kind = mismatchKind(msg);
      if (this.encrypted && (/Unsupported encryption version|too small to decrypt/.test(msg) || (kind === 'encryption' && this.looksPlaintext(buf)))) kind = 'mode';
      if (kind === 'label') {
        const got = removeLabelHeaderFromPacket(buf).label;
        this.warnPeer('label', from, `label mismatch: a packet from ${from} has label ${JSON.stringify(got)}, this node's is ${JSON.stringify(this.cfg.label)}`);
      } else if (kind === 'mode') {
        this.warnPeer('mode', from, `mesh mode mismatch: plaintext packet from ${from}, but this node is encrypted`, { err: msg });
      } else if (kind === 'encryption') {
        this.warnPeer('encryption', from, `packet from ${from} could not be decrypted: it uses another key`, { err: msg });
      } else {
        this.log('debug', `dropped packet: ${msg}`, { from });
      }
      return;
    }
    for (const m of msgs) {
      try {
        this.handleCommand(m, from, at);
      } catch (e) {
        this.stats.messagesDropped++;
        // An encrypted packet read as plaintext starts with its version byte (0 or 1).
        if (!this.encrypted && m.length >= 29 && m[0] <= 1) {
          this.warnPeer('mode', from, `mesh mode mismatch: encrypted packet from ${from}, but this node is plaintext (it looks encrypted)`, {
            err: (e as Error).message,
          });
        } else {
          this.log('debug', `dropped packet: ${(e as Error).message}`, { from, type: m[0] });
        }
      }
    }
  }

  /** Whether a packet that failed to decrypt parses as plaintext memberlist messages (a peer without encryption). */
  private looksPlaintext(buf: Buffer): boolean {
    try {
      const msgs = decodePacket(buf, { label: this.cfg.label, keyring: null });
      return msgs.length > 0 && msgs.every((m) => m[0] in MessageType && new Reader(m, 1).struct() !== null);
    } catch {
      return false;
    }
  }

  private handleCommand(buf: Buffer, from: string, at: number): void {
    const body = buf.subarray(1);
    switch (buf[0]) {
      case MessageType.ping:
        return this.handlePing(decodeBody(body, readPing), from);
      case MessageType.indirectPing:
        return this.handleIndirectPing(decodeBody(body, readIndirectPing), from);
      case MessageType.ackResp: {
        const ack = decodeBody(body, readAck);
        const h = this.ackHandlers.get(ack.seqNo);
        if (!h) return;
        this.ackHandlers.delete(ack.seqNo);
        h.timer.cancel();
        h.ack(ack.payload, at);
        return;
      }
      case MessageType.nackResp: {
        const nack = decodeBody(body, readNack);
        this.ackHandlers.get(nack.seqNo)?.nack?.();
        return;
      }
      case MessageType.suspect: {
        const m = decodeBody(body, readSuspect);
        if (!this.acceptClaim(m, 'suspect', from)) return;
        return this.suspectNode(m);
      }
      case MessageType.alive: {
        const a = decodeBody(body, readAlive);
        if (a.port === 0) a.port = this.transport.advertisePort;
        if (!this.acceptEntry(a, 'alive message', from)) return;
        return this.aliveNode(a, false);
      }
      case MessageType.dead: {
        const m = decodeBody(body, readDead);
        if (!this.acceptClaim(m, 'dead', from)) return;
        return this.deadNode(m);
      }
      case MessageType.user:
        this.delegate.notifyMsg?.(Buffer.from(body));
        return;
      default:
        this.log('debug', 'unsupported message type', { from, type: buf[0] });
    }
  }

  /**
   * Validates an alive message or push-pull entry (validate.ts); a refused
   * one is counted and reported, and must not be stored or relayed. An
   * absent Vsn for a node we know takes the versions we have for it.
   */
  private acceptEntry(a: Alive, what: string, from: string, state?: number): boolean {
    const known = this.nodeMap.get(a.node);
    const entry = { ...a, state: state ?? NodeStateType.alive };
    // Gossiped alives must also be version-compatible with us; a push-pull
    // with an incompatible entry is refused whole by verifyProtocol, as in Go.
    const problem =
      state === undefined ? entryProblem(entry, this.policy, !!known, this.cfg.vsn) : pushEntryProblem(entry, this.policy, !!known);
    if (problem) {
      this.stats.entriesRefused++;
      const name = JSON.stringify(a.node.length > 64 ? a.node.slice(0, 64) + '…' : a.node);
      this.warnPeer('malformed', from, `refused ${what} for ${name} from ${from}: ${problem}`);
      return false;
    }
    if (a.vsn.length === 0 && known) a.vsn = [...known.vsn];
    return true;
  }

  /** Suspect and dead messages: names within bounds, incarnation a uint32. */
  private acceptClaim(m: Suspect | Dead, what: string, from: string): boolean {
    const problem = nameProblem(m.node) ?? nameProblem(m.from) ?? (Number.isInteger(m.incarnation) && m.incarnation >= 0 && m.incarnation <= 0xffffffff ? null : 'bad incarnation');
    if (!problem) return true;
    this.stats.messagesDropped++;
    this.log('debug', `dropped ${what} message: ${problem}`, { from });
    return false;
  }

  /** Where to answer a ping: its source fields when they name a peer address, else the packet's sender. */
  private replyAddr(p: { sourceAddr?: Buffer | null; sourcePort?: number }, from: string): string {
    if (p.sourceAddr && p.sourceAddr.length && p.sourcePort && p.sourcePort <= 65535 && !addressProblem(p.sourceAddr, this.policy)) {
      return joinHostPort(ipToString(p.sourceAddr), p.sourcePort);
    }
    return from;
  }

  private handlePing(p: Ping, from: string): void {
    if (p.node !== '' && p.node !== this.cfg.name) {
      this.log('warn', 'got ping for unexpected node', { node: p.node, from });
      return;
    }
    void this.sendMsg(this.replyAddr(p, from), encodeAck({ seqNo: p.seqNo, payload: null }));
  }

  private handleIndirectPing(ind: IndirectPingReq, from: string): void {
    if (ind.port === 0) ind.port = this.transport.advertisePort;
    const bad = addressProblem(ind.target, this.policy) ?? (ind.port > 65535 ? 'port out of range' : null);
    if (bad) {
      this.stats.messagesDropped++;
      this.log('debug', `dropped indirect ping: ${bad}`, { from });
      return;
    }
    const localSeq = this.nextSeqNo();
    const self = this.selfAddr();
    const indAddr = this.replyAddr(ind, from);
    let answered = false;
    let nackTimer: TimerHandle | null = null;
    const timer = this.clock.setTimeout(() => this.ackHandlers.delete(localSeq), this.cfg.probeTimeoutMs);
    this.ackHandlers.set(localSeq, {
      timer,
      ack: () => {
        answered = true;
        nackTimer?.cancel();
        void this.sendMsg(indAddr, encodeAck({ seqNo: ind.seqNo, payload: null }));
      },
    });
    const target = joinHostPort(ipToString(ind.target), ind.port);
    void this.sendMsg(
      target,
      encodePing({ seqNo: localSeq, node: ind.node, sourceAddr: self.addr, sourcePort: self.port, sourceNode: this.cfg.name }),
    );
    if (ind.nack) {
      nackTimer = this.clock.setTimeout(() => {
        if (!answered && !this.stopped) void this.sendMsg(indAddr, encodeNack({ seqNo: ind.seqNo }));
      }, this.cfg.probeTimeoutMs);
    }
  }

  // --- probing ----------------------------------------------------------------

  private async probe(): Promise<void> {
    if (this.probing) return;
    let numCheck = 0;
    for (;;) {
      if (numCheck >= this.nodes.length) return;
      if (this.probeIndex >= this.nodes.length) {
        this.resetNodes();
        this.probeIndex = 0;
        numCheck++;
        continue;
      }
      const node = this.nodes[this.probeIndex++];
      if (node.name === this.cfg.name || node.state === NodeStateType.dead || node.state === NodeStateType.left) {
        numCheck++;
        continue;
      }
      this.probing = true;
      try {
        await this.probeNode(node);
      } finally {
        this.probing = false;
      }
      return;
    }
  }

  /** Drops dead and left nodes older than gossipToTheDead, then shuffles. */
  private resetNodes(): void {
    const now = this.clock.now();
    for (let i = this.nodes.length - 1; i >= 0; i--) {
      const n = this.nodes[i];
      if ((n.state === NodeStateType.dead || n.state === NodeStateType.left) && now - n.stateChange > this.cfg.gossipToTheDeadMs) {
        this.nodes.splice(i, 1);
        this.nodeMap.delete(n.name);
      }
    }
    shuffle(this.nodes);
  }

  /** Probes one node: UDP ping, then indirect pings and a TCP ping, then suspicion. */
  async probeNode(node: NodeState): Promise<void> {
    const probeInterval = this.awareness.scaleTimeout(this.cfg.probeIntervalMs);
    const self = this.selfAddr();
    const ping: Ping = { seqNo: this.nextSeqNo(), node: node.name, sourceAddr: self.addr, sourcePort: self.port, sourceNode: this.cfg.name };
    let nacks = 0;
    let resolveAck!: (v: boolean) => void;
    const ackP = new Promise<boolean>((r) => (resolveAck = r));
    const timer = this.clock.setTimeout(() => {
      this.ackHandlers.delete(ping.seqNo);
      resolveAck(false);
    }, probeInterval);
    this.ackHandlers.set(ping.seqNo, { timer, ack: () => resolveAck(true), nack: () => nacks++ });
    const deadline = this.clock.now() + probeInterval;
    const addr = nodeAddress(node);
    let awarenessDelta = 0;
    try {
      if (node.state === NodeStateType.alive) {
        await this.sendMsg(addr, encodePing(ping));
      } else {
        const s: Suspect = { incarnation: node.incarnation, node: node.name, from: this.cfg.name };
        await this.rawSendMsgPacket(addr, node, makeCompoundMessage([encodePing(ping), encodeSuspect(s)]));
      }
      awarenessDelta = -1;
      let timedOut = false;
      const first = await Promise.race([ackP, sleep(this.clock, this.cfg.probeTimeoutMs).then(() => (timedOut = true, 'timeout' as const))]);
      if (first === true) return;
      if (this.stopped) return;
      this.log('debug', 'failed ping (timeout reached)', { node: node.name, timedOut });

      // indirect probes
      const peers = kRandomNodes(
        this.cfg.indirectChecks,
        this.nodes,
        (n) => n.name === this.cfg.name || n.name === node.name || n.state !== NodeStateType.alive,
      );
      let expectedNacks = 0;
      for (const peer of peers) {
        const nack = peer.vsn[1] >= 4;
        if (nack) expectedNacks++;
        const ind: IndirectPingReq = {
          seqNo: ping.seqNo,
          target: node.addr,
          port: node.port,
          node: node.name,
          nack,
          sourceAddr: self.addr,
          sourcePort: self.port,
          sourceNode: this.cfg.name,
        };
        void this.sendMsg(nodeAddress(peer), encodeIndirectPing(ind));
      }
      // TCP fallback
      const fallback: Promise<boolean> =
        !this.cfg.disableTcpPings && node.vsn[1] >= 3
          ? this.sendPingAndWaitForAck(addr, ping, deadline).catch((e) => {
              this.log('debug', 'failed fallback ping', { node: node.name, err: String(e) });
              return false;
            })
          : Promise.resolve(false);
      if (await ackP) return;
      if (await fallback) {
        this.log('warn', `was able to connect to ${node.name} over TCP but UDP probes failed, network may be misconfigured`);
        return;
      }
      if (this.stopped) return;
      awarenessDelta = 0;
      if (expectedNacks > 0) {
        if (nacks < expectedNacks) awarenessDelta += expectedNacks - nacks;
      } else {
        awarenessDelta += 1;
      }
      this.log('info', `suspect ${node.name} has failed, no acks received`, { expectedNacks, nacks, awarenessDelta });
      this.suspectNode({ incarnation: node.incarnation, node: node.name, from: this.cfg.name });
    } finally {
      this.awareness.applyDelta(awarenessDelta);
    }
  }

  /** TCP ping: dial, send ping, expect the ack with the same sequence number. */
  private async sendPingAndWaitForAck(addr: string, ping: Ping, deadline: number): Promise<boolean> {
    const remaining = deadline - this.clock.now();
    if (remaining <= 0) return false;
    let conn: StreamConn;
    try {
      conn = await this.dialStream(addr, remaining);
    } catch {
      return false;
    }
    try {
      this.sendStream(conn, encodePing(ping));
      const msg = await this.readStream(new ConnReader(conn), Math.max(1, deadline - this.clock.now()));
      if (msg.type !== MessageType.ackResp || !('ack' in msg)) throw new Error(`unexpected msgType (${msg.type}) from ping`);
      if (msg.ack.seqNo !== ping.seqNo) throw new Error(`sequence number from ack (${msg.ack.seqNo}) doesn't match ping (${ping.seqNo})`);
      return true;
    } finally {
      conn.close();
    }
  }

  // --- gossip -----------------------------------------------------------------

  private gossip(): void {
    const now = this.clock.now();
    const targets = kRandomNodes(this.cfg.gossipNodes, this.nodes, (n) => {
      if (n.name === this.cfg.name) return true;
      switch (n.state) {
        case NodeStateType.alive:
        case NodeStateType.suspect:
          return false;
        case NodeStateType.dead:
          return now - n.stateChange > this.cfg.gossipToTheDeadMs;
        default:
          return true;
      }
    });
    const avail = this.cfg.udpBufferSize - COMPOUND_HEADER_OVERHEAD - this.packetOverhead();
    for (const node of targets) {
      const msgs = this.getBroadcasts(COMPOUND_OVERHEAD, avail);
      if (!msgs.length) return;
      void this.rawSendMsgPacket(nodeAddress(node), node, msgs.length === 1 ? msgs[0] : makeCompoundMessage(msgs));
    }
  }

  // --- push-pull ---------------------------------------------------------------

  private async pushPull(): Promise<void> {
    const [node] = kRandomNodes(1, this.nodes, (n) => n.name === this.cfg.name || n.state !== NodeStateType.alive);
    if (!node) return;
    try {
      await this.pushPullNode(nodeAddress(node), false);
    } catch (e) {
      this.log('warn', `push/pull with ${node.name} failed: ${(e as Error).message}`);
    }
  }

  private localPushPull(join: boolean): Buffer {
    const nodes: PushNodeState[] = this.nodes.map((n) => ({
      name: n.name,
      addr: n.addr,
      port: n.port,
      meta: n.meta,
      incarnation: n.incarnation,
      state: n.state,
      vsn: n.vsn,
    }));
    const userState = this.delegate.localState?.(join) ?? null;
    return encodePushPull({ join, nodes, userState });
  }

  /** Full state exchange with `addr` over a stream, then merge. */
  async pushPullNode(addr: string, join: boolean): Promise<void> {
    const conn = await this.dialStream(addr, this.cfg.tcpTimeoutMs);
    let msg: StreamMessage;
    const reader = new ConnReader(conn);
    try {
      this.sendStream(conn, this.localPushPull(join));
      msg = await this.readStream(reader, this.cfg.tcpTimeoutMs);
    } catch (e) {
      this.reportStreamError(e, addr, reader.buffered === 0, true);
      throw e;
    } finally {
      conn.close();
    }
    if ('err' in msg) {
      const e = new Error(`remote error: ${msg.err.error}`);
      this.reportStreamError(e, addr, false, true);
      throw e;
    }
    if (!('pushPull' in msg)) throw new Error(`received invalid msgType (${msg.type}), expected pushPullMsg`);
    this.mergeRemoteState(msg.pushPull.nodes, msg.pushPull.userState, join, addr);
  }

  private mergeRemoteState(all: PushNodeState[], userState: Buffer | null, join: boolean, from: string): void {
    const remote: PushNodeState[] = [];
    for (const r of all) {
      if (r.port === 0) r.port = this.transport.advertisePort;
      const a: Alive = { incarnation: r.incarnation, node: r.name, addr: r.addr, port: r.port, meta: r.meta, vsn: r.vsn };
      if (!this.acceptEntry(a, 'push-pull entry', from, r.state)) continue;
      r.vsn = a.vsn;
      remote.push(r);
    }
    this.verifyProtocol(remote);
    this.mergeState(remote);
    if (userState && this.delegate.mergeRemoteState) this.delegate.mergeRemoteState(userState, join);
  }

  /** Throws if any node's current versions fall outside what everyone understands. */
  private verifyProtocol(remote: PushNodeState[]): void {
    let maxpmin = 0,
      minpmax = 255,
      maxdmin = 0,
      mindmax = 255;
    const consider = (v: number[]) => {
      maxpmin = Math.max(maxpmin, v[0]);
      minpmax = Math.min(minpmax, v[1]);
      maxdmin = Math.max(maxdmin, v[3]);
      mindmax = Math.min(mindmax, v[4]);
    };
    for (const r of remote) if (r.state === NodeStateType.alive && r.vsn.length >= 6) consider(r.vsn);
    for (const n of this.nodes) if (n.state === NodeStateType.alive && n.vsn.length >= 6) consider(n.vsn);
    const check = (name: string, v: number[]) => {
      const pcur = v.length >= 6 ? v[2] : 0;
      const dcur = v.length >= 6 ? v[5] : 0;
      if (pcur < maxpmin || pcur > minpmax) {
        throw new Error(`Node '${name}' protocol version (${pcur}) is incompatible: [${maxpmin}, ${minpmax}]`);
      }
      if (dcur < maxdmin || dcur > mindmax) {
        throw new Error(`Node '${name}' delegate protocol version (${dcur}) is incompatible: [${maxdmin}, ${mindmax}]`);
      }
    };
    for (const r of remote) check(r.name, r.vsn);
    for (const n of this.nodes) check(n.name, n.vsn);
  }

  private mergeState(remote: PushNodeState[]): void {
    for (const r of remote) {
      switch (r.state) {
        case NodeStateType.alive:
          this.aliveNode({ incarnation: r.incarnation, node: r.name, addr: r.addr, port: r.port, meta: r.meta, vsn: r.vsn }, false);
          break;
        case NodeStateType.left:
          this.deadNode({ incarnation: r.incarnation, node: r.name, from: r.name });
          break;
        case NodeStateType.dead:
        case NodeStateType.suspect:
          this.suspectNode({ incarnation: r.incarnation, node: r.name, from: this.cfg.name });
          break;
      }
    }
  }

  // --- incoming streams ----------------------------------------------------------

  private async handleConn(conn: StreamConn): Promise<void> {
    if (this.stopped) return conn.close();
    this.conns.add(conn);
    conn.onClose(() => this.conns.delete(conn));
    this.stats.streamsReceived++;
    const from = conn.remoteAddr;
    const reader = new ConnReader(conn);
    // One deadline for the label header and the first message together
    // (the framer also caps its size): a peer that trickles bytes is cut off.
    const deadline = this.clock.now() + this.cfg.tcpTimeoutMs;
    const left = () => Math.max(1, deadline - this.clock.now());
    try {
      let msg: StreamMessage;
      try {
        const label = await reader.read(labelFramer, this.clock, left());
        if (label !== this.cfg.label) {
          this.stats.streamsDropped++;
          this.warnPeer('label', from, `label mismatch: a stream from ${from} has label ${JSON.stringify(label)}, this node's is ${JSON.stringify(this.cfg.label)}`);
          return;
        }
        msg = await this.readStream(reader, left());
      } catch (e) {
        this.stats.streamsDropped++;
        if (!this.reportStreamError(e, from, false, false)) {
          this.log('debug', `failed to receive stream: ${(e as Error).message}`, { from });
        }
        this.sendStream(conn, encodeErr({ error: String((e as Error).message) }));
        return;
      }
      if ('pushPull' in msg) {
        this.sendStream(conn, this.localPushPull(msg.pushPull.join));
        try {
          this.mergeRemoteState(msg.pushPull.nodes, msg.pushPull.userState, msg.pushPull.join, from);
        } catch (e) {
          this.log('warn', `failed push/pull merge: ${(e as Error).message}`, { from });
        }
      } else if ('ping' in msg) {
        if (msg.ping.node !== '' && msg.ping.node !== this.cfg.name) return;
        this.sendStream(conn, encodeAck({ seqNo: msg.ping.seqNo, payload: null }));
      } else if ('user' in msg) {
        if (msg.user.length) this.delegate.notifyMsg?.(msg.user);
      } else {
        this.log('debug', 'invalid stream msgType', { type: msg.type, from });
      }
    } catch (e) {
      this.log('debug', `stream error: ${(e as Error).message}`, { from });
    } finally {
      // let the reply flush before closing
      setImmediate(() => conn.close());
    }
  }

  // --- node state transitions --------------------------------------------------------

  private refute(me: NodeState, accusedInc: number): void {
    let inc = this.nextIncarnation();
    if (accusedInc >= inc) {
      this.incarnation = (accusedInc + 1) >>> 0;
      inc = this.incarnation;
    }
    me.incarnation = inc;
    this.awareness.applyDelta(1);
    const a: Alive = { incarnation: inc, node: me.name, addr: me.addr, port: me.port, meta: me.meta, vsn: me.vsn };
    this.broadcast(me.name, encodeAlive(a));
  }

  aliveNode(a: Alive, bootstrap: boolean, notify?: () => void): void {
    let state = this.nodeMap.get(a.node);
    if (this.left && a.node === this.cfg.name) return;
    if (a.vsn.length >= 3) {
      const [pmin, pmax] = a.vsn;
      if (pmin === 0 || pmax === 0 || pmin > pmax) {
        this.log('warn', `ignoring an alive message for '${a.node}' because protocol version(s) are wrong`);
        return;
      }
    }
    let updatesNode = false;
    const now = this.clock.now();
    if (!state) {
      state = {
        name: a.node,
        addr: a.addr,
        port: a.port,
        meta: a.meta ?? Buffer.alloc(0),
        incarnation: 0,
        state: NodeStateType.dead,
        stateChange: now,
        vsn: a.vsn.length >= 6 ? [...a.vsn] : [0, 0, 0, 0, 0, 0],
      };
      this.nodeMap.set(a.node, state);
      const n = this.nodes.length;
      const off = randomOffset(n);
      this.nodes.push(state);
      [this.nodes[off], this.nodes[n]] = [this.nodes[n], this.nodes[off]];
    } else if (!state.addr.equals(a.addr) || state.port !== a.port) {
      const canReclaim = this.cfg.deadNodeReclaimMs > 0 && now - state.stateChange > this.cfg.deadNodeReclaimMs;
      if (state.state === NodeStateType.left || (state.state === NodeStateType.dead && canReclaim)) {
        this.log('info', `updating address for left or failed node ${state.name}`, {
          from: nodeAddress(state),
          to: nodeAddress(a),
        });
        updatesNode = true;
      } else {
        this.log('error', `conflicting address for ${state.name}`, {
          mine: nodeAddress(state),
          theirs: nodeAddress(a),
          oldState: NodeStateType[state.state],
        });
        const other: NodeState = {
          name: a.node,
          addr: a.addr,
          port: a.port,
          meta: a.meta ?? Buffer.alloc(0),
          incarnation: a.incarnation,
          state: NodeStateType.alive,
          stateChange: now,
          vsn: a.vsn,
        };
        // Only a claim on OUR name is surfaced; others' conflicts are just logged.
        if (state.name === this.cfg.name) this.events.conflict(state, other, this.joining);
        return;
      }
    }
    const isLocal = state.name === this.cfg.name;
    if (a.incarnation <= state.incarnation && !isLocal && !updatesNode) return;
    if (a.incarnation < state.incarnation && isLocal) return;

    this.nodeTimers.get(a.node)?.cancel();
    this.nodeTimers.delete(a.node);

    const oldState = state.state;
    const oldMeta = state.meta;
    const meta = a.meta ?? Buffer.alloc(0);

    if (!bootstrap && isLocal) {
      const same = a.incarnation === state.incarnation && meta.equals(state.meta) && Buffer.from(a.vsn).equals(Buffer.from(state.vsn));
      if (same) return;
      this.refute(state, a.incarnation);
      this.log('warn', `refuting an alive message for '${a.node}'`);
      return;
    }
    this.broadcast(a.node, encodeAlive(a), notify);
    if (a.vsn.length >= 6) state.vsn = [...a.vsn];
    state.incarnation = a.incarnation;
    state.meta = meta;
    state.addr = a.addr;
    state.port = a.port;
    if (state.state !== NodeStateType.alive) {
      state.state = NodeStateType.alive;
      state.stateChange = now;
    }
    if (oldState === NodeStateType.dead || oldState === NodeStateType.left) this.events.join(state);
    // Go notifies only meta changes; we also report the way back from
    // suspect, or whoever snapshots members() on events keeps a stale
    // 'suspect' (a refutation changes neither meta nor anything else).
    else if (oldState === NodeStateType.suspect || !oldMeta.equals(state.meta)) this.events.update(state);
  }

  suspectNode(s: Suspect): void {
    const state = this.nodeMap.get(s.node);
    if (!state) return;
    if (s.incarnation < state.incarnation) return;
    const timer = this.nodeTimers.get(s.node);
    if (timer) {
      if (timer.confirm(s.from)) this.broadcast(s.node, encodeSuspect(s));
      return;
    }
    if (state.state !== NodeStateType.alive) return;
    if (state.name === this.cfg.name) {
      this.refute(state, s.incarnation);
      this.log('warn', `refuting a suspect message (from: ${s.from})`);
      return;
    }
    this.broadcast(s.node, encodeSuspect(s));
    state.incarnation = s.incarnation;
    state.state = NodeStateType.suspect;
    const changeTime = this.clock.now();
    state.stateChange = changeTime;

    let k = this.cfg.suspicionMult - 2;
    const n = this.nodes.length;
    if (n - 2 < k) k = 0;
    const min = suspicionTimeout(this.cfg.suspicionMult, n, this.cfg.probeIntervalMs);
    const max = this.cfg.suspicionMaxTimeoutMult * min;
    this.nodeTimers.set(
      s.node,
      new Suspicion(s.from, k, min, max, this.clock, (confirmations) => {
        const cur = this.nodeMap.get(s.node);
        if (!cur || cur.state !== NodeStateType.suspect || cur.stateChange !== changeTime || this.stopped) return;
        this.log('info', `marking ${cur.name} as failed, suspect timeout reached (${confirmations} peer confirmations)`);
        this.deadNode({ incarnation: cur.incarnation, node: cur.name, from: this.cfg.name });
      }),
    );
    // alive -> suspect is a state change members() shows: say so (see aliveNode)
    this.events.update(state);
  }

  deadNode(d: Dead, notify?: () => void): void {
    const state = this.nodeMap.get(d.node);
    if (!state) return;
    if (d.incarnation < state.incarnation) return;
    this.nodeTimers.get(d.node)?.cancel();
    this.nodeTimers.delete(d.node);
    if (state.state === NodeStateType.dead || state.state === NodeStateType.left) return;
    if (state.name === this.cfg.name) {
      if (!this.left) {
        this.refute(state, d.incarnation);
        this.log('warn', `refuting a dead message (from: ${d.from})`);
        return;
      }
      this.broadcast(d.node, encodeDead(d), notify);
    } else {
      this.broadcast(d.node, encodeDead(d));
    }
    state.incarnation = d.incarnation;
    state.state = d.node === d.from ? NodeStateType.left : NodeStateType.dead;
    state.stateChange = this.clock.now();
    this.events.leave(state);
  }

  // --- operations used by the public API --------------------------------------------

  /** Push-pull with each address ("ip:port"); counts successes. */
  async join(addrs: string[]): Promise<{ joined: number; errors: Error[] }> {
    let joined = 0;
    const errors: Error[] = [];
    this.joining = true;
    try {
      await Promise.all(
        addrs.map(async (addr) => {
          try {
            splitHostPort(addr);
            await this.pushPullNode(addr, true);
            joined++;
          } catch (e) {
            errors.push(new Error(`failed to join ${addr}: ${(e as Error).message}`));
          }
        }),
      );
    } finally {
      this.joining = false;
    }
    return { joined, errors };
  }

  /** Re-reads our metadata from the delegate and gossips it with a new incarnation. */
  async updateMeta(timeoutMs: number): Promise<void> {
    const me = this.localNode();
    const meta = this.localMeta();
    const done = new Promise<void>((resolve) => {
      this.aliveNode(
        { incarnation: this.nextIncarnation(), node: me.name, addr: me.addr, port: me.port, meta, vsn: [...this.cfg.vsn] },
        true,
        resolve,
      );
    });
    if (this.numAlive() > 1) await Promise.race([done, sleep(this.clock, timeoutMs)]);
  }

  /** Best-effort user message over UDP. */
  async sendBestEffort(name: string, msg: Buffer): Promise<void> {
    const n = this.nodeMap.get(name);
    if (!n) throw new Error(`unknown node ${name}`);
    await this.rawSendMsgPacket(nodeAddress(n), n, Buffer.concat([Buffer.from([MessageType.user]), msg]));
  }

  /** Reliable user message over a stream. */
  async sendReliable(name: string, msg: Buffer): Promise<void> {
    const n = this.nodeMap.get(name);
    if (!n) throw new Error(`unknown node ${name}`);
    const conn = await this.dialStream(nodeAddress(n), this.cfg.tcpTimeoutMs);
    this.sendStream(conn, encodeUserStreamMsg(msg));
    setImmediate(() => conn.close());
  }

  /** Broadcasts our departure and waits (up to timeoutMs) until it has been gossiped. */
  async leave(timeoutMs: number): Promise<void> {
    if (this.left) return;
    this.left = true;
    const me = this.localNode();
    const anyAlive = this.nodes.some((n) => n.name !== this.cfg.name && n.state !== NodeStateType.dead && n.state !== NodeStateType.left);
    const done = new Promise<void>((resolve) => {
      this.deadNode({ incarnation: me.incarnation, node: me.name, from: me.name }, resolve);
    });
    if (anyAlive) await Promise.race([done, sleep(this.clock, timeoutMs)]);
  }
}
