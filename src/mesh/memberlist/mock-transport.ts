/**
 * In-memory transport (like memberlist's mock_transport.go) so the state
 * machine runs without sockets. Deliveries happen on setImmediate, which
 * ManualClock.advance lets run. A filter can drop packets and refuse dials
 * to simulate failures and partitions.
 */
import { StreamConn, Transport, TransportHandlers, joinHostPort } from './transport.ts';

class MemoryConn implements StreamConn {
  peer!: MemoryConn;
  private dataCbs: ((b: Buffer) => void)[] = [];
  private closeCbs: (() => void)[] = [];
  private closed = false;
  constructor(readonly remoteAddr: string) {}
  write(buf: Buffer): void {
    if (this.closed) return;
    const copy = Buffer.from(buf);
    setImmediate(() => {
      if (!this.peer.closed) for (const cb of this.peer.dataCbs) cb(copy);
    });
  }
  close(): void {
    if (this.closed) return;
    setImmediate(() => {
      this.markClosed();
      this.peer.markClosed();
    });
  }
  private markClosed(): void {
    if (this.closed) return;
    this.closed = true;
    for (const cb of this.closeCbs) cb();
  }
  onData(cb: (b: Buffer) => void): void {
    this.dataCbs.push(cb);
  }
  onClose(cb: () => void): void {
    this.closeCbs.push(cb);
  }
}

export type LinkKind = 'packet' | 'stream';

export class MockNetwork {
  readonly transports = new Map<string, MockTransport>();
  /** Return false to drop a packet / refuse a dial from `from` to `to` (both "ip:port"). */
  filter: (from: string, to: string, kind: LinkKind) => boolean = () => true;
  packetsSent = 0;

  newTransport(ip: string, port = 7946): MockTransport {
    const t = new MockTransport(this, ip, port);
    this.transports.set(joinHostPort(ip, port), t);
    return t;
  }
}

export class MockTransport implements Transport {
  handlers: TransportHandlers | null = null;
  down = false;

  constructor(
    private readonly net: MockNetwork,
    readonly advertiseAddr: string,
    readonly advertisePort: number,
  ) {}

  get addr(): string {
    return joinHostPort(this.advertiseAddr, this.advertisePort);
  }

  setHandlers(h: TransportHandlers): void {
    this.handlers = h;
  }

  async writeTo(buf: Buffer, addr: string): Promise<void> {
    if (this.down) return;
    this.net.packetsSent++;
    const dest = this.net.transports.get(addr);
    if (!dest || dest.down || !this.net.filter(this.addr, addr, 'packet')) return;
    const copy = Buffer.from(buf);
    const from = this.addr;
    setImmediate(() => dest.handlers?.packet(copy, from, Date.now()));
  }

  async dial(addr: string): Promise<StreamConn> {
    const dest = this.net.transports.get(addr);
    if (this.down || !dest || dest.down || !dest.handlers || !this.net.filter(this.addr, addr, 'stream')) {
      throw new Error(`dial ${addr}: connection refused`);
    }
    const mine = new MemoryConn(addr);
    const theirs = new MemoryConn(this.addr);
    mine.peer = theirs;
    theirs.peer = mine;
    const h = dest.handlers;
    setImmediate(() => h.stream(theirs));
    return mine;
  }

  async shutdown(): Promise<void> {
    this.down = true;
    this.handlers = null;
  }
}
