/**
 * Transports (transport.go / net_transport.go): a best-effort packet
 * interface (UDP) and a reliable stream interface (TCP), both bound to the
 * advertise address — never 0.0.0.0 — and every outgoing TCP connection
 * uses the advertise address as its local address, so peers on
 * 127.0.x.y see the right source IP.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import { Clock } from './clock.ts';

/** One side of a stream connection. */
export interface StreamConn {
  /** "ip:port" of the other end. */
  readonly remoteAddr: string;
  write(buf: Buffer): void;
  close(): void;
  onData(cb: (b: Buffer) => void): void;
  onClose(cb: () => void): void;
}

export interface TransportHandlers {
  packet(buf: Buffer, from: string, receivedAt: number): void;
  stream(conn: StreamConn): void;
}

export interface Transport {
  /** The address and port we advertise (and are bound to). */
  readonly advertiseAddr: string;
  readonly advertisePort: number;
  setHandlers(h: TransportHandlers): void;
  /** Sends one packet to "ip:port". */
  writeTo(buf: Buffer, addr: string): Promise<void>;
  /** Opens a stream to "ip:port". */
  dial(addr: string, timeoutMs: number): Promise<StreamConn>;
  shutdown(): Promise<void>;
}

/** Splits "ip:port" (IPv6 in brackets). */
export function splitHostPort(addr: string): { host: string; port: number } {
  const m = /^\[(.*)\]:(\d+)$/.exec(addr) ?? /^([^:]*):(\d+)$/.exec(addr);
  if (!m) throw new Error(`bad address "${addr}" (want ip:port)`);
  return { host: m[1], port: Number(m[2]) };
}

export function joinHostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/** Something that recognises a complete value at the head of the bytes received so far. */
export interface Framer<T> {
  /**
   * Called with the unconsumed bytes each time more arrive (same start,
   * longer end): null while more are needed, else the value and how many
   * bytes it took. Stateful framers resume where they stopped.
   */
  step(buf: Buffer): { value: T; consumed: number } | null;
}

/**
 * Collects what a connection receives, in one buffer that grows by doubling
 * (never re-concatenated per chunk), and hands it to a framer. Each chunk
 * costs the framer's incremental work on that chunk, not a re-parse of
 * everything received before.
 */
export class ConnReader {
  private data = Buffer.alloc(0);
  private start = 0;
  private end = 0;
  private closed = false;
  private failed: Error | null = null;
  private wake: (() => void) | null = null;

  constructor(readonly conn: StreamConn) {
    conn.onData((b) => {
      this.append(b);
      this.wake?.();
    });
    conn.onClose(() => {
      this.closed = true;
      this.wake?.();
    });
  }

  private append(b: Buffer): void {
    if (this.end + b.length > this.data.length) {
      const live = this.end - this.start;
      const need = live + b.length;
      if (need <= this.data.length && this.start > 0 && live <= this.start) {
        this.data.copy(this.data, 0, this.start, this.end);
      } else {
        const bigger = Buffer.allocUnsafe(Math.max(need, 2 * this.data.length, 4096));
        this.data.copy(bigger, 0, this.start, this.end);
        this.data = bigger;
      }
      this.start = 0;
      this.end = live;
    }
    b.copy(this.data, this.end);
    this.end += b.length;
  }

  /** Bytes received and not yet consumed. */
  get buffered(): number {
    return this.end - this.start;
  }

  /**
   * Waits until `framer` recognises a complete value, then consumes it.
   * Gives up after `timeoutMs`, or when the connection closes first.
   */
  async read<T>(framer: Framer<T>, clock: Clock, timeoutMs: number): Promise<T> {
    let timedOut = false;
    const timer = clock.setTimeout(() => {
      timedOut = true;
      this.wake?.();
    }, timeoutMs);
    try {
      let seen = -1;
      for (;;) {
        if (this.failed) throw this.failed;
        if (this.buffered !== seen) {
          seen = this.buffered;
          let r: { value: T; consumed: number } | null;
          try {
            r = framer.step(this.data.subarray(this.start, this.end));
          } catch (e) {
            // the stream is out of sync for good
            this.failed = e as Error;
            throw e;
          }
          if (r) {
            this.start += r.consumed;
            return r.value;
          }
        }
        if (this.closed) throw new Error('connection closed before a full message arrived');
        if (timedOut) throw new Error('timed out reading from stream');
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = null;
      }
    } finally {
      timer.cancel();
    }
  }
}

class SocketConn implements StreamConn {
  readonly remoteAddr: string;
  constructor(private readonly s: net.Socket) {
    this.remoteAddr = joinHostPort(s.remoteAddress ?? '?', s.remotePort ?? 0);
    s.on('error', () => s.destroy());
  }
  write(buf: Buffer): void {
    if (!this.s.destroyed) this.s.write(buf);
  }
  close(): void {
    this.s.end();
    setTimeout(() => this.s.destroy(), 1000).unref();
  }
  onData(cb: (b: Buffer) => void): void {
    this.s.on('data', cb);
  }
  onClose(cb: () => void): void {
    this.s.on('close', cb);
  }
}

/** UDP + TCP on one address and port. */
export class NetTransport implements Transport {
  private handlers: TransportHandlers | null = null;
  private readonly sockets = new Set<net.Socket>();

  private constructor(
    readonly advertiseAddr: string,
    readonly advertisePort: number,
    private readonly udp: dgram.Socket,
    private readonly tcp: net.Server,
  ) {
    udp.on('message', (msg, rinfo) => {
      this.handlers?.packet(msg, joinHostPort(rinfo.address, rinfo.port), Date.now());
    });
    tcp.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
      if (!this.handlers) return void s.destroy();
      this.handlers.stream(new SocketConn(s));
    });
  }

  /** Binds UDP and TCP on `bindAddr:port` (port 0 picks a free one). */
  static async create(bindAddr: string, port: number): Promise<NetTransport> {
    if (bindAddr === '0.0.0.0' || bindAddr === '::' || bindAddr === '') {
      throw new Error('memberlist must bind to a concrete advertise address, not a wildcard');
    }
    const tcp = net.createServer();
    await new Promise<void>((resolve, reject) => {
      tcp.once('error', reject);
      tcp.listen({ host: bindAddr, port, exclusive: true }, () => {
        tcp.off('error', reject);
        resolve();
      });
    });
    const actualPort = (tcp.address() as net.AddressInfo).port;
    const udp = dgram.createSocket({ type: net.isIPv6(bindAddr) ? 'udp6' : 'udp4' });
    try {
      await new Promise<void>((resolve, reject) => {
        udp.once('error', reject);
        udp.bind({ address: bindAddr, port: actualPort, exclusive: true }, () => {
          udp.off('error', reject);
          resolve();
        });
      });
    } catch (e) {
      tcp.close();
      throw e;
    }
    udp.on('error', () => {});
    try {
      udp.setRecvBufferSize(2 * 1024 * 1024);
    } catch {
      /* best effort */
    }
    return new NetTransport(bindAddr, actualPort, udp, tcp);
  }

  setHandlers(h: TransportHandlers): void {
    this.handlers = h;
  }

  writeTo(buf: Buffer, addr: string): Promise<void> {
    const { host, port } = splitHostPort(addr);
    return new Promise((resolve, reject) => {
      this.udp.send(buf, port, host, (err) => (err ? reject(err) : resolve()));
    });
  }

  dial(addr: string, timeoutMs: number): Promise<StreamConn> {
    const { host, port } = splitHostPort(addr);
    return new Promise((resolve, reject) => {
      const s = net.connect({ host, port, localAddress: this.advertiseAddr });
      const timer = setTimeout(() => {
        s.destroy();
        reject(new Error(`dial ${addr}: timeout`));
      }, timeoutMs);
      s.once('connect', () => {
        clearTimeout(timer);
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        resolve(new SocketConn(s));
      });
      s.once('error', (e) => {
        clearTimeout(timer);
        s.destroy();
        reject(e);
      });
    });
  }

  async shutdown(): Promise<void> {
    this.handlers = null;
    for (const s of this.sockets) s.destroy();
    await Promise.all([
      new Promise<void>((r) => this.tcp.close(() => r())),
      new Promise<void>((r) => {
        try {
          this.udp.close(() => r());
        } catch {
          r();
        }
      }),
    ]);
  }
}
