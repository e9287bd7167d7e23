/**
 * LAN discovery over mDNS (DNS-SD service `_viiwork._tcp.local`).
 *
 * Each node announces four records, PTR `_viiwork._tcp.local` → instance,
 * SRV instance → host:gossip port, TXT instance, A host → advertise address,
 * and answers queries for them. The TXT record is what peers read:
 *
 *     v=2  name=<node name>  addr=<advertise IPv4>  port=<gossip port>
 *
 * Sockets are tied to the one interface that holds the advertise address:
 * multicast membership and outgoing multicast use that interface only
 * (`interface: <advertise>` with `bind: '0.0.0.0'`; interface alone
 * receives nothing), and packets whose source is outside that interface's
 * subnet are ignored (Linux delivers a group's packets from every interface
 * where any process joined it). Inside a network namespace the kernel needs
 * a `224.0.0.0/4` route to send.
 *
 * Queries go out every `fastIntervalMs` (2 s) until a peer is heard, then
 * every `intervalMs` (the rejoin interval). A peer is forgotten after a
 * goodbye (TTL 0) or when it has not been heard for max(TTL, 3 intervals).
 */
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import makeMdns from 'multicast-dns';
import type { Answer } from 'dns-packet';
import { ChangeLogger, joinHostPort, silentLogger, type Feeder, type Logger } from './feeder.ts';

export const MDNS_SERVICE = '_viiwork._tcp.local';
export const MDNS_PORT = 5353;
/** TTL (seconds) of the records viiwork announces. */
export const MDNS_TTL_S = 120;
export const MDNS_FAST_INTERVAL_MS = 2000;
/** Answers to queries go out at most this often (RFC 6762 section 6); answers are multicast, so every asker hears one. */
export const MDNS_MIN_ANSWER_GAP_MS = 1000;

export interface MdnsPeer {
  /** The peer's node name from TXT `name`. */
  name: string;
  /** Its advertise address from TXT `addr`. */
  addr: string;
  /** Its gossip port from TXT `port`. */
  port: number;
  /** "addr:port", the address to join. */
  gossip: string;
  /** When it was last heard (ms, this node's clock). */
  lastSeen: number;
  /** Forget it after this moment unless heard again. */
  expires: number;
}

type InterfaceTable = NodeJS.Dict<os.NetworkInterfaceInfo[]>;

export interface MdnsOptions {
  /** This node's name (TXT `name`, and the instance label). */
  name: string;
  /** The IPv4 advertise address; it must be on an interface of this machine. */
  advertise: string;
  /** The gossip port (TXT `port`). */
  port: number;
  /** Query interval once peers are known (the rejoin interval). */
  intervalMs: number;
  /** Query interval while no peer is known. Default 2 s. */
  fastIntervalMs?: number;
  /** mDNS UDP port. Default 5353; tests may change it. */
  mdnsPort?: number;
  log?: Logger;
  now?: () => number;
  /** os.networkInterfaces, injectable for tests. */
  interfaces?: () => InterfaceTable;
}

/** The local interface holding `ip`, with its prefix length. */
export function interfaceOf(ip: string, interfaces: InterfaceTable = os.networkInterfaces()): { name: string; cidr: number; netmask: string } | undefined {
  for (const [name, infos] of Object.entries(interfaces)) {
    for (const info of infos ?? []) {
      if (info.address === ip) {
        const cidr = info.cidr ? Number(info.cidr.split('/')[1]) : maskBits(info.netmask);
        return { name, cidr, netmask: info.netmask };
      }
    }
  }
  return undefined;
}

function maskBits(mask: string): number {
  return ipv4ToInt(mask).toString(2).replace(/0/g, '').length;
}

function ipv4ToInt(ip: string): number {
  return ip.split('.').reduce((acc, octet) => ((acc << 8) | (Number(octet) & 255)) >>> 0, 0);
}

/** Whether two IPv4 addresses share the first `bits` bits. */
export function sameSubnet(a: string, b: string, bits: number): boolean {
  if (!net.isIPv4(a) || !net.isIPv4(b)) return false;
  if (bits <= 0) return true;
  const mask = bits >= 32 ? 0xffffffff : (~(0xffffffff >>> bits)) >>> 0;
  return ((ipv4ToInt(a) & mask) >>> 0) === ((ipv4ToInt(b) & mask) >>> 0);
}

/**
 * The first IPv4 address of the interface that carries the default route
 * (lowest metric in /proc/net/route), the advertise address for
 * `mesh.network: lan` when `mesh.advertise` is empty. Undefined when there is
 * no default route or its interface has no IPv4 address.
 */
export function defaultRouteAddress(opts: { routeTable?: string; interfaces?: InterfaceTable } = {}): string | undefined {
  let table = opts.routeTable;
  if (table === undefined) {
    try {
      table = fs.readFileSync('/proc/net/route', 'utf8');
    } catch {
      return undefined;
    }
  }
  let best: { iface: string; metric: number } | undefined;
  for (const line of table.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 8) continue;
    const [iface, dest, , flags, , , metric, mask] = f;
    if (dest !== '00000000' || mask !== '00000000') continue;
    if ((parseInt(flags, 16) & 0x1) === 0) continue; // RTF_UP
    const m = Number(metric);
    if (!best || m < best.metric) best = { iface, metric: m };
  }
  if (!best) return undefined;
  const infos = (opts.interfaces ?? os.networkInterfaces())[best.iface] ?? [];
  return infos.find((i) => (i.family === 'IPv4' || (i.family as unknown) === 4) && !i.internal)?.address;
}

function label(text: string): string {
  return text.replace(/[^A-Za-z0-9_-]/g, '-').slice(0, 63) || 'node';
}

function txtPairs(data: unknown): Map<string, string> {
  const out = new Map<string, string>();
  const items = Array.isArray(data) ? data : [data];
  for (const item of items) {
    const s = Buffer.isBuffer(item) ? item.toString('utf8') : typeof item === 'string' ? item : '';
    const eq = s.indexOf('=');
    if (eq > 0) out.set(s.slice(0, eq).toLowerCase(), s.slice(eq + 1));
  }
  return out;
}

/**
 * Announces this node and collects the peers it hears. Also a Feeder.
 * Emits `peer` (MdnsPeer) when a peer is first heard or changes address.
 */
export class MdnsFeeder extends EventEmitter implements Feeder {
  readonly name = 'mdns';
  readonly #o: Required<Omit<MdnsOptions, 'interfaces'>> & { interfaces: () => InterfaceTable };
  readonly #instance: string;
  readonly #host: string;
  readonly #peers = new Map<string, MdnsPeer>();
  readonly #problems: ChangeLogger;
  #mdns: makeMdns.MulticastDNS | undefined;
  #cidr = 32;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  #lastAnswer = -Infinity;

  constructor(opts: MdnsOptions) {
    super();
    this.#o = {
      fastIntervalMs: MDNS_FAST_INTERVAL_MS,
      mdnsPort: MDNS_PORT,
      log: silentLogger,
      now: Date.now,
      interfaces: os.networkInterfaces,
      ...opts,
    };
    this.#instance = `${label(opts.name)}.${MDNS_SERVICE}`;
    this.#host = `viiwork-${opts.advertise.replace(/[.:]/g, '-')}.local`;
    this.#problems = new ChangeLogger(this.#o.log);
  }

  /** Bind to the advertise interface, announce, start querying. Rejects when it cannot bind. */
  async start(): Promise<void> {
    const { advertise, mdnsPort } = this.#o;
    if (!net.isIPv4(advertise)) throw new Error(`mdns: the advertise address must be IPv4, got "${advertise}"`);
    const iface = interfaceOf(advertise, this.#o.interfaces());
    if (!iface) throw new Error(`mdns: the advertise address ${advertise} is not on any interface of this machine`);
    this.#cidr = iface.cidr;
    const mdns = makeMdns({ interface: advertise, bind: '0.0.0.0', port: mdnsPort, loopback: true, reuseAddr: true });
    this.#mdns = mdns;
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error) => {
        mdns.removeListener('ready', onReady);
        mdns.destroy();
        reject(new Error(`mdns: cannot listen on udp ${mdnsPort} for ${advertise}: ${err.message}`));
      };
      const onReady = () => {
        mdns.removeListener('error', onError);
        resolve();
      };
      mdns.once('error', onError);
      mdns.once('ready', onReady);
    });
    mdns.on('error', (err: Error) => this.#problems.problem(`mdns: ${err.message}`));
    mdns.on('warning', (err: Error) => this.#problems.problem(`mdns: ${err.message}`));
    mdns.on('query', (q, rinfo) => this.#onQuery(q, rinfo));
    mdns.on('response', (r, rinfo) => this.#onResponse(r, rinfo));
    this.#o.log(`mdns: announcing ${MDNS_SERVICE} on ${iface.name} (${advertise})`, { interface: iface.name, advertise });
    this.#announce();
    this.#query();
    this.#schedule();
  }

  /** Peers heard and not yet expired, sorted by name. */
  peers(): MdnsPeer[] {
    this.#expire();
    return [...this.#peers.values()].sort((a, b) => a.name.localeCompare(b.name) || a.gossip.localeCompare(b.gossip));
  }

  async candidates(): Promise<string[]> {
    return [...new Set(this.peers().map((p) => p.gossip))];
  }

  /** Send a goodbye (TTL 0) and close the socket. */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    clearTimeout(this.#timer);
    const mdns = this.#mdns;
    if (!mdns) return;
    await new Promise<void>((resolve) => mdns.respond({ answers: this.#records(0) }, () => resolve()));
    await new Promise<void>((resolve) => mdns.destroy(() => resolve()));
  }

  #records(ttl: number): Answer[] {
    const { name, advertise, port } = this.#o;
    return [
      { name: MDNS_SERVICE, type: 'PTR', ttl, data: this.#instance },
      { name: this.#instance, type: 'SRV', ttl, flush: ttl > 0, data: { target: this.#host, port, priority: 0, weight: 0 } },
      { name: this.#instance, type: 'TXT', ttl, flush: ttl > 0, data: ['v=2', `name=${name}`, `addr=${advertise}`, `port=${port}`] },
      { name: this.#host, type: 'A', ttl, flush: ttl > 0, data: advertise },
    ];
  }

  #announce(): void {
    if (this.#stopped) return;
    this.#mdns?.respond({ answers: this.#records(MDNS_TTL_S) }, (err) => {
      if (err) this.#problems.problem(`mdns: cannot send on ${this.#o.advertise}: ${err.message}`);
    });
  }

  #query(): void {
    if (this.#stopped) return;
    this.#mdns?.query({ questions: [{ name: MDNS_SERVICE, type: 'PTR' }] }, (err) => {
      if (err) this.#problems.problem(`mdns: cannot send on ${this.#o.advertise}: ${err.message}`);
    });
  }

  #schedule(): void {
    if (this.#stopped) return;
    const delay = this.peers().length === 0 ? this.#o.fastIntervalMs : this.#o.intervalMs;
    this.#timer = setTimeout(() => {
      this.#query();
      this.#schedule();
    }, delay);
    this.#timer.unref();
  }

  #fromOurLink(address: string): boolean {
    return this.#cidr >= 32 || sameSubnet(address, this.#o.advertise, this.#cidr);
  }

  #onQuery(q: { questions?: { name: string; type: string }[] }, rinfo: { address: string }): void {
    if (this.#stopped || !this.#fromOurLink(rinfo.address)) return;
    const ours = [MDNS_SERVICE, this.#instance, this.#host].map((n) => n.toLowerCase());
    const asked = (q.questions ?? []).some((qq) => ours.includes(String(qq.name).toLowerCase()) && ['PTR', 'SRV', 'TXT', 'A', 'ANY'].includes(qq.type));
    if (!asked) return;
    const now = this.#o.now();
    if (now - this.#lastAnswer < MDNS_MIN_ANSWER_GAP_MS) return;
    this.#lastAnswer = now;
    this.#announce();
  }

  #onResponse(r: { answers?: Answer[]; additionals?: Answer[] }, rinfo: { address: string }): void {
    if (this.#stopped || !this.#fromOurLink(rinfo.address)) return;
    const suffix = `.${MDNS_SERVICE}`.toLowerCase();
    for (const rec of [...(r.answers ?? []), ...(r.additionals ?? [])]) {
      if (rec.type !== 'TXT' || !rec.name.toLowerCase().endsWith(suffix)) continue;
      const kv = txtPairs(rec.data);
      const name = kv.get('name') ?? '';
      const addr = kv.get('addr') ?? '';
      const port = Number(kv.get('port'));
      if (!name || !net.isIPv4(addr) || !Number.isInteger(port) || port < 1 || port > 65535) continue;
      const gossip = joinHostPort(addr, port);
      if (gossip === joinHostPort(this.#o.advertise, this.#o.port)) continue; // ourselves, looped back
      const key = rec.name.toLowerCase();
      const ttl = rec.ttl ?? MDNS_TTL_S;
      if (ttl === 0) {
        if (this.#peers.delete(key)) this.#o.log(`mdns: ${name} said goodbye`, { peer: name, addr: gossip });
        continue;
      }
      const now = this.#o.now();
      const expires = now + Math.max(ttl * 1000, 3 * this.#o.intervalMs);
      const before = this.#peers.get(key);
      const peer: MdnsPeer = { name, addr, port, gossip, lastSeen: now, expires };
      this.#peers.set(key, peer);
      if (!before || before.gossip !== gossip) {
        this.#o.log(`mdns: heard ${name} at ${gossip}`, { peer: name, addr: gossip });
        this.emit('peer', peer);
      }
    }
  }

  #expire(): void {
    const now = this.#o.now();
    for (const [key, p] of this.#peers) if (p.expires <= now) this.#peers.delete(key);
  }
}
