/**
 * Processes for the polling benchmark (bench/polling.ts). One role per
 * process, chosen by argv[2]; commands arrive one a line on stdin, answers
 * leave as one JSON object a line on stdout ({"ready":true} first).
 *
 *   fleet FIRST COUNT SUBJECT_IP OPTS_JSON
 *     Virtual members FIRST..FIRST+COUNT-1, member i on its own loopback
 *     address (memberAddr(i)), each with:
 *     - a /v1/capacity server on :8086 answering a report like a real
 *       node's (one model, `model-<i mod models>`, sometimes two), and a
 *       tiny chat completion (so the subject can forward to it);
 *     - with opts.gossip, a memberlist member on :7946 (LAN defaults, the
 *       default label, open mesh, viiwork metadata naming api port 8086);
 *     - on `poll HOT_SHARE SLOW_MS EVERY_MS`, a poller of the subject's
 *       /v1/capacity from the member's own address, every EVERY_MS (1000:
 *       what a real member does) at its own phase, or every SLOW_MS for the
 *       members past HOT_SHARE of the fleet (a background interval);
 *       `poll off` stops.
 *     Everything exchanged with SUBJECT_IP is counted (HTTP bytes both ways
 *     on sockets, memberlist packets and streams), so the subject's own
 *     traffic is known without touching it.
 *     Commands: `stats` → {"stats":{...}}; `join IP:PORT` (every member
 *     joins that address) → {"joined":n}; `members` → {"members":n}.
 *
 *   poller N OPTS_JSON
 *     A bare CapacityPoller over fleet members 1..N (the poll side alone).
 *     Commands: `stats` → {"cpu_us":..,"reports":..}.
 *
 *   rawpoll N OPTS_JSON
 *     Polls members 1..N with undici as the poller does, with If-None-Match
 *     when opts.conditional (the fleet answers 304 to an unchanged report):
 *     what conditional polls would save. `stats` → {"cpu_us":..,"answers":..}.
 *
 *   gossip IP SEED OPTS_JSON
 *     A bare memberlist member on IP:7946 joined through SEED (the gossip
 *     side alone). Commands: `stats` → {"cpu_us":..,"members":..};
 *     `leave` → {"left":true}.
 */
import http from 'node:http';
import net from 'node:net';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Agent as UndiciAgent, request as undiciRequest } from 'undici';
import { createHash } from 'node:crypto';
import { encodeDigest, parseHeld, type DigestWire, type HeldDigests } from '../src/capacity/digest.ts';
import { CapacityPoller } from '../src/capacity/poller.ts';
import { sampledIndices } from '../src/engines/cache-model.ts';
import { Memberlist } from '../src/mesh/memberlist/memberlist.ts';
import { NetTransport, splitHostPort, type StreamConn, type Transport, type TransportHandlers } from '../src/mesh/memberlist/transport.ts';

export const API_PORT = 8086;
export const GOSSIP_PORT = 7946;
export const LABEL = 'viiwork-v2';

/** Member i (1-based) on 127.0.60.1 … 127.0.69.250: the only addresses this benchmark uses. */
export function memberAddr(i: number): string {
  const block = Math.floor((i - 1) / 250);
  if (i < 1 || block > 8) throw new Error(`member ${i} out of range`);
  return `127.0.${60 + block}.${((i - 1) % 250) + 1}`;
}
/** The subject (the node measured) lives in the last block. */
export const SUBJECT_IP = '127.0.69.1';

export function memberName(i: number): string {
  return `fleet-${i}`;
}

/** What member i serves: one model, every fifth member a second one (the layout the simulation uses). */
export function modelsOf(i: number, models: number): string[] {
  const a = `model-${i % models}`;
  return i % 5 === 0 ? [a, `model-${(i + 7) % models}`] : [a];
}

/** A report shaped like buildReport's (src/capacity/report.ts). */
/** A fake member's target: 4 slots, each holding a conversation of 50 message boundaries, a realistic agent fleet. */
export const DIGEST_SLOTS = 4;
export const DIGEST_SLOT_LINKS = 50;
const DIGEST_EPOCH = '0badc0de';

/**
 * The digest of fake member `i` at version `v`, as the product publishes it (engines/cache-model.ts): per slot
 * the links `sampledIndices` picks, most recently used slot first; the newest slot's conversation changes with
 * every version.
 */
export function fakeDigest(i: number, v: number): DigestWire {
  const links: { hash: string; tokens: number }[] = [];
  for (let slot = 0; slot < DIGEST_SLOTS; slot++) {
    for (const k of sampledIndices(DIGEST_SLOT_LINKS)) {
      links.push({ hash: createHash('sha256').update(`${i}/${slot === 0 ? v : -slot}/${k}`).digest('hex').slice(0, 16), tokens: 1500 + 180 * k });
    }
  }
  return encodeDigest(v, links);
}

/**
 * A member's report. `digestVersion`: the member's digest version (it has a digest per target then);
 * `held`: the version the poll says it holds (`?digests=`): an unchanged digest is sent as `{"v"}` alone.
 */
export function fakeReport(i: number, models: number, busy: number, at: number, digestVersion?: number, held?: HeldDigests): string {
  const digest = digestVersion === undefined ? undefined : held && held.epoch === DIGEST_EPOCH && held.version >= digestVersion ? { v: digestVersion } : fakeDigest(i, digestVersion);
  return JSON.stringify({
    node: memberName(i),
    ver: '0.2.0',
    at,
    alias_version: 3,
    ...(digestVersion !== undefined ? { digest_epoch: DIGEST_EPOCH, digest_version: digestVersion } : {}),
    models: modelsOf(i, models).map((name) => ({
      name,
      engine: 'llamacpp',
      slots: 4,
      busy,
      queued: 0,
      ctx: 8192,
      backends: 1,
      healthy_backends: 1,
      ttft_overhead_ms: 140,
      prefill_ms_per_1k: 95,
      perf_samples: 212,
      targets: [{ workloads: ['chat', 'completion'], audio: false, slots: 4, busy, loading: 0, ...(digest ? { digest } : {}) }],
    })),
  });
}

const out = (o: object) => process.stdout.write(JSON.stringify(o) + '\n');
const cpuUs = () => {
  const c = process.cpuUsage();
  return c.user + c.system;
};

/** Bytes exchanged with the subject, by channel. */
interface Bytes {
  http_in: number;
  http_out: number;
  gossip_in: number;
  gossip_out: number;
}

/** Counts the memberlist traffic one member exchanges with `peerIp`. */
class CountingTransport implements Transport {
  constructor(
    private readonly inner: Transport,
    private readonly peerIp: string,
    private readonly bytes: Bytes,
  ) {}
  get advertiseAddr(): string {
    return this.inner.advertiseAddr;
  }
  get advertisePort(): number {
    return this.inner.advertisePort;
  }
  #ours(addr: string): boolean {
    return splitHostPort(addr).host === this.peerIp;
  }
  #wrap(conn: StreamConn): StreamConn {
    if (!this.#ours(conn.remoteAddr)) return conn;
    const b = this.bytes;
    return {
      remoteAddr: conn.remoteAddr,
      write: (buf) => {
        b.gossip_out += buf.length;
        conn.write(buf);
      },
      close: () => conn.close(),
      onData: (cb) => conn.onData((buf) => ((b.gossip_in += buf.length), cb(buf))),
      onClose: (cb) => conn.onClose(cb),
    };
  }
  setHandlers(h: TransportHandlers): void {
    this.inner.setHandlers({
      packet: (buf, from, at) => {
        if (this.#ours(from)) this.bytes.gossip_in += buf.length;
        h.packet(buf, from, at);
      },
      stream: (conn) => h.stream(this.#wrap(conn)),
    });
  }
  writeTo(buf: Buffer, addr: string): Promise<void> {
    if (this.#ours(addr)) this.bytes.gossip_out += buf.length;
    return this.inner.writeTo(buf, addr);
  }
  async dial(addr: string, timeoutMs: number): Promise<StreamConn> {
    return this.#wrap(await this.inner.dial(addr, timeoutMs));
  }
  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }
}

/** Socket byte counts, including sockets that have closed. */
class SocketBytes {
  readonly #live = new Set<net.Socket>();
  #closedIn = 0;
  #closedOut = 0;
  add(s: net.Socket): void {
    if (this.#live.has(s)) return;
    this.#live.add(s);
    s.once('close', () => {
      this.#live.delete(s);
      this.#closedIn += s.bytesRead;
      this.#closedOut += s.bytesWritten;
    });
  }
  /** Bytes this end received and sent. */
  totals(): { in: number; out: number } {
    let i = this.#closedIn;
    let o = this.#closedOut;
    for (const s of this.#live) {
      i += s.bytesRead;
      o += s.bytesWritten;
    }
    return { in: i, out: o };
  }
}

interface FleetOpts {
  models: number;
  gossip: boolean;
  /** Each member's busy count changes about this often (0: never; the reports then differ only in `at`). */
  changeMs: number;
  /**
   * Cache digests in the members' reports (fakeDigest): `changing`, a new digest on every
   * poll (the upper bound: every answer carries the whole digest); `steady`, one that changes only with `busy`
   * (resent only then, as `{"v"}` otherwise); absent or `off`, none.
   */
  digests?: 'off' | 'steady' | 'changing';
}

async function fleet(first: number, count: number, subjectIp: string, opts: FleetOpts): Promise<void> {
  const bytes: Bytes = { http_in: 0, http_out: 0, gossip_in: 0, gossip_out: 0 };
  const served = new SocketBytes(); // the subject polling members (and forwarding to them): members' side
  const polling = new SocketBytes(); // members polling the subject: members' side
  let polls = 0;
  let pollsOfSubject = 0;
  const lists: Memberlist[] = [];
  const busy = new Map<number, number>();
  /** Each member's digest version: a request starting or ending changes what its slots hold. */
  const versions = new Map<number, number>();
  const chat = JSON.stringify({ id: 'x', object: 'chat.completion', created: 0, model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
  for (let i = first; i < first + count; i++) {
    const ip = memberAddr(i);
    busy.set(i, 0);
    versions.set(i, 1);
    const server = http.createServer((req, res) => {
      if (req.socket.remoteAddress === subjectIp) served.add(req.socket);
      if (req.method === 'POST') {
        req.resume();
        req.on('end', () => res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(chat) }).end(chat));
        return;
      }
      if (req.socket.remoteAddress === subjectIp) polls++;
      // A conditional poll (the rawpoll role's `conditional`): the tag covers everything but `at`.
      const tag = `"${i}-${busy.get(i)}"`;
      if (req.headers['if-none-match'] === tag) {
        res.writeHead(304, { etag: tag });
        res.end();
        return;
      }
      const held = parseHeld(new URL(req.url ?? '/', 'http://x').searchParams.get('digests'));
      if (opts.digests === 'changing') versions.set(i, versions.get(i)! + 1);
      const withDigest = opts.digests === 'changing' || opts.digests === 'steady';
      const body = fakeReport(i, opts.models, busy.get(i)!, Date.now(), withDigest ? versions.get(i) : undefined, held);
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), etag: tag });
      res.end(body);
    });
    server.keepAliveTimeout = 65_000;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(API_PORT, ip, () => resolve());
    });
    if (opts.gossip) {
      const transport = new CountingTransport(await NetTransport.create(ip, GOSSIP_PORT), subjectIp, bytes);
      const ml = await Memberlist.create(
        { name: memberName(i), bindAddr: ip, port: GOSSIP_PORT, label: LABEL, transport },
        {
          nodeMeta: () => Buffer.from(JSON.stringify({ v: 2, api: API_PORT, ver: '0.2.0', role: 'node' })),
          notifyMsg: () => {},
          localState: () => Buffer.alloc(0),
          mergeRemoteState: () => {},
        },
      );
      lists.push(ml);
    }
    if (opts.changeMs > 0) {
      const t = setInterval(() => {
        busy.set(i, Math.floor(Math.random() * 5));
        versions.set(i, versions.get(i)! + 1);
      }, opts.changeMs * (0.5 + Math.random()));
      t.unref();
    }
  }
  // Members polling the subject, as real members would: each from its own address, at its own phase.
  let pollTimers: NodeJS.Timeout[] = [];
  const agents = new Map<number, http.Agent>();
  const startPolling = (hotShare: number, slowMs: number, everyMs: number) => {
    const hot = Math.round(count * hotShare);
    for (let k = 0; k < count; k++) {
      const i = first + k;
      let agent = agents.get(i);
      if (!agent) agents.set(i, (agent = new http.Agent({ keepAlive: true, maxSockets: 1, localAddress: memberAddr(i) })));
      const every = k < hot ? everyMs : slowMs;
      const pollOnce = () => {
        const req = http.get({ host: subjectIp, port: API_PORT, path: '/v1/capacity', agent, timeout: 1000 }, (res) => {
          res.resume();
          res.on('end', () => pollsOfSubject++);
        });
        req.on('socket', (s) => polling.add(s));
        req.on('error', () => {});
        req.on('timeout', () => req.destroy());
      };
      pollTimers.push(
        setTimeout(() => {
          pollOnce();
          pollTimers.push(setInterval(pollOnce, every));
        }, Math.random() * every),
      );
    }
  };
  const stopPolling = () => {
    for (const t of pollTimers) clearTimeout(t);
    pollTimers = [];
  };
  createInterface({ input: process.stdin }).on('line', (line) => {
    const [cmd, arg] = line.trim().split(/\s+/);
    if (cmd === 'stats') {
      const s = served.totals();
      const p = polling.totals();
      // The subject's view: what members received from it is what it sent.
      out({
        stats: {
          cpu_us: cpuUs(),
          polls_served: polls,
          polls_of_subject: pollsOfSubject,
          subject_http_out: s.in + p.in,
          subject_http_in: s.out + p.out,
          subject_poll_out: s.in,
          subject_poll_in: s.out,
          subject_answer_in: p.in,
          subject_answer_out: p.out,
          subject_gossip_out: bytes.gossip_in,
          subject_gossip_in: bytes.gossip_out,
        },
      });
    } else if (cmd === 'poll') {
      stopPolling();
      const [, , slow, every] = line.trim().split(/\s+/);
      if (arg !== 'off') startPolling(Number(arg), Number(slow ?? 1000), Number(every ?? 1000));
      out({ polling: arg });
    } else if (cmd === 'join') {
      void Promise.all(lists.map((ml) => ml.join([arg]).catch(() => ({ joined: 0 })))).then((r) => out({ joined: r.filter((x) => x.joined > 0).length }));
    } else if (cmd === 'members') {
      out({ members: lists.length ? Math.min(...lists.map((ml) => ml.numAlive())) : 0 });
    }
  });
  process.stdin.on('end', () => process.exit(0));
  out({ ready: true });
}

async function poller(n: number, opts: { intervalMs: number; localAddress: string }): Promise<void> {
  const p = new CapacityPoller({ intervalMs: opts.intervalMs, localAddress: opts.localAddress, onReport: () => {} });
  p.setTargets(Array.from({ length: n }, (_, k) => ({ name: memberName(k + 1), api: `http://${memberAddr(k + 1)}:${API_PORT}` })));
  p.start();
  createInterface({ input: process.stdin }).on('line', (line) => {
    if (line.trim() === 'stats') {
      let reports = 0;
      for (let k = 1; k <= n; k++) if (p.get(memberName(k))) reports++;
      out({ cpu_us: cpuUs(), reports });
    }
  });
  process.stdin.on('end', () => process.exit(0));
  out({ ready: true });
}

/**
 * Polls with undici directly, the way the poller does (same agent settings,
 * JSON parse of a 200), with If-None-Match when `conditional`: what an
 * unchanged report answered 304 saves on the polling side.
 */
async function rawpoll(n: number, opts: { intervalMs: number; localAddress: string; conditional: boolean }): Promise<void> {
  const agent = new UndiciAgent({ connect: { timeout: 500 }, keepAliveTimeout: 10_000, localAddress: opts.localAddress });
  const tags = new Map<number, string>();
  let answers = 0;
  const pollOne = async (k: number) => {
    const headers: Record<string, string> = {};
    const tag = tags.get(k);
    if (opts.conditional && tag) headers['if-none-match'] = tag;
    const res = await undiciRequest(`http://${memberAddr(k)}:${API_PORT}/v1/capacity`, { dispatcher: agent, headers, signal: AbortSignal.timeout(1000) });
    if (res.statusCode === 200) {
      const doc = (await res.body.json()) as { node?: string };
      if (doc.node !== memberName(k)) throw new Error('wrong node');
      const et = res.headers.etag;
      if (typeof et === 'string') tags.set(k, et);
    } else await res.body.text();
    answers++;
  };
  const inFlight = new Set<number>();
  setInterval(() => {
    for (let k = 1; k <= n; k++) {
      if (inFlight.has(k)) continue;
      inFlight.add(k);
      void pollOne(k)
        .catch(() => {})
        .finally(() => inFlight.delete(k));
    }
  }, opts.intervalMs);
  createInterface({ input: process.stdin }).on('line', (line) => {
    if (line.trim() === 'stats') out({ cpu_us: cpuUs(), answers });
  });
  process.stdin.on('end', () => process.exit(0));
  out({ ready: true });
}

async function gossip(ip: string, seed: string): Promise<void> {
  const ml = await Memberlist.create(
    { name: 'subject-gossip', bindAddr: ip, port: GOSSIP_PORT, label: LABEL },
    {
      nodeMeta: () => Buffer.from(JSON.stringify({ v: 2, api: API_PORT, ver: '0.2.0', role: 'node' })),
      notifyMsg: () => {},
      localState: () => Buffer.alloc(0),
      mergeRemoteState: () => {},
    },
  );
  await ml.join([seed]);
  createInterface({ input: process.stdin }).on('line', (line) => {
    if (line.trim() === 'stats') out({ cpu_us: cpuUs(), members: ml.numAlive() });
    if (line.trim() === 'leave') void ml.leave(2000).then(() => ml.shutdown()).then(() => out({ left: true }));
  });
  process.stdin.on('end', () => process.exit(0));
  out({ ready: true });
}

/** An idle process of the same runtime: its CPU is the floor every role's numbers sit on. */
function idle(): void {
  setInterval(() => {}, 60_000);
  createInterface({ input: process.stdin }).on('line', (line) => {
    if (line.trim() === 'stats') out({ cpu_us: cpuUs() });
  });
  process.stdin.on('end', () => process.exit(0));
  out({ ready: true });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [role, ...rest] = process.argv.slice(2);
  if (role === 'fleet') await fleet(Number(rest[0]), Number(rest[1]), rest[2], JSON.parse(rest[3]) as FleetOpts);
  else if (role === 'poller') await poller(Number(rest[0]), JSON.parse(rest[1]));
  else if (role === 'gossip') await gossip(rest[0], rest[1]);
  else if (role === 'rawpoll') await rawpoll(Number(rest[0]), JSON.parse(rest[1]));
  else if (role === 'idle') idle();
  else throw new Error(`unknown role ${role}`);
}
