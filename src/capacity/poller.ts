/**
 * Polls alive viiwork members' /v1/capacity (SPEC section 7): never two
 * polls to one member at once, 500 ms to connect and 1 s in all, the
 * report's node name checked, RTT kept as an EWMA, age counted from when the
 * poll was sent. Outgoing connections leave from the advertise address.
 *
 * Every member this node routes to is polled once per interval; with
 * `backgroundMs` above the interval, the others only that often
 * (schedule.ts decides which is which, and when).
 */
import { Agent, request } from 'undici';
import type { CacheDigest } from '../prompt/held.ts';
import { readGapCurve } from '../route/slots.ts';
import { descriptorKey } from '../workloads/workloads.ts';
import { decodeLinks, decodeSlots, heldParam, readWire, type HeldDigests } from './digest.ts';
import type { CapacityReport, ModelReport, TargetReport } from './report.ts';
import { duePolls, type MemberPoll } from './schedule.ts';

export interface PeerReport {
  report: CapacityReport;
  /** Clock ms when the poll that brought it was sent. */
  polledAt: number;
  receivedAt: number;
  /** Each target's cache digest, by digestKey(model, descriptor); unchanged ones carried over from the report before. */
  digests?: ReadonlyMap<string, CacheDigest>;
}

/** The key of one target's digest in a PeerReport. */
export function digestKey(model: string, workloads: readonly string[], audio: boolean): string {
  return `${model}\0${descriptorKey({ workloads: [...workloads], audio })}`;
}

/**
 * The digests of a parsed report: decoded where sent, carried over from
 * `prev` where the executor said "unchanged" (`{"v"}` alone, at the version
 * `prev` has). `complete` is false when one could not be resolved: the next
 * poll then asks for everything.
 */
export function resolveDigests(report: CapacityReport, prev: ReadonlyMap<string, CacheDigest> | undefined, polledAt = 0): { digests: Map<string, CacheDigest>; complete: boolean } {
  const digests = new Map<string, CacheDigest>();
  let complete = true;
  for (const m of report.models) {
    for (const t of m.targets ?? []) {
      if (!t.digest) continue;
      const key = digestKey(m.name, t.workloads, t.audio);
      if (t.digest.links !== undefined) {
        const d = decodeLinks(t.digest.v, t.digest.links);
        const slots = t.digest.slots && decodeSlots(t.digest.slots, polledAt);
        // The RAM pool's links (SPEC 7): a malformed one is left out, as if the target had no pool.
        const ram = t.digest.ram !== undefined ? decodeLinks(t.digest.v, t.digest.ram)?.held : undefined;
        if (d) digests.set(key, { ...d, ...(slots?.length ? { slots } : {}), ...(ram ? { ram } : {}) });
        continue;
      }
      const old = prev?.get(key);
      if (old && old.version === t.digest.v) digests.set(key, old);
      else complete = false;
    }
  }
  return { digests, complete };
}

export interface PollTarget {
  name: string;
  /** "http://ip:port" */
  api: string;
}

export const RTT_ALPHA = 0.3;
/** The least time between two slot-waiting polls of one member. */
export const WAIT_GAP_MS = 25;
/** A slot-waiting poll answered faster than this was not held; after two in a row the gap grows to UNHELD_GAP_MS. */
const UNHELD_MS = 15;
const UNHELD_GAP_MS = 250;

function num(x: unknown): number | undefined {
  return typeof x === 'number' && Number.isFinite(x) ? x : undefined;
}

/** Accept a peer's report only in the shape we can route on; unknown fields are ignored, missing optional ones mean unknown. */
export function parseReport(doc: unknown, expectedNode: string): CapacityReport | string {
  if (!doc || typeof doc !== 'object') return 'not a JSON object';
  const d = doc as Record<string, unknown>;
  if (d.node !== expectedNode) return `report names node "${String(d.node)}", expected "${expectedNode}"`;
  if (!Array.isArray(d.models)) return 'report has no models array';
  const models: ModelReport[] = [];
  for (const raw of d.models) {
    if (!raw || typeof raw !== 'object') continue;
    const m = raw as Record<string, unknown>;
    if (typeof m.name !== 'string' || !m.name) continue;
    const targets = Array.isArray(m.targets)
      ? m.targets.flatMap((t) => {
          const x = t as Record<string, unknown>;
          if (!x || !Array.isArray(x.workloads)) return [];
          const release = num(x.release_ms);
          const reserved = num(x.reserved);
          const yours = num(x.your_busy);
          const digest = readWire(x.digest);
          return [
            {
              workloads: x.workloads.filter((w): w is string => typeof w === 'string'),
              audio: x.audio === true,
              slots: num(x.slots) ?? 0,
              busy: num(x.busy) ?? 0,
              loading: num(x.loading),
              ...(yours !== undefined && yours >= 0 ? { your_busy: Math.floor(yours) } : {}),
              ...(release !== undefined && release >= 0 ? { release_ms: release } : {}),
              ...(reserved !== undefined && reserved > 0 ? { reserved: Math.floor(reserved) } : {}),
              ...(digest ? { digest } : {}),
              ...lifecycleOf(x),
            },
          ];
        })
      : undefined;
    models.push({
      name: m.name,
      engine: typeof m.engine === 'string' ? m.engine : undefined,
      slots: num(m.slots) ?? 0,
      busy: num(m.busy) ?? 0,
      queued: num(m.queued),
      ctx: num(m.ctx),
      backends: num(m.backends),
      healthy_backends: num(m.healthy_backends),
      ttft_overhead_ms: num(m.ttft_overhead_ms),
      prefill_ms_per_1k: num(m.prefill_ms_per_1k),
      perf_samples: num(m.perf_samples),
      targets,
      ...fileOf(m.file),
      ...fetchOf(m.fetch),
      ...(typeof m.has_file === 'boolean' ? { has_file: m.has_file } : {}),
    });
  }
  const epoch = typeof d.digest_epoch === 'string' && /^[0-9a-f]{1,32}$/.test(d.digest_epoch) ? d.digest_epoch : undefined;
  const digestVersion = num(d.digest_version);
  const digests = epoch !== undefined && digestVersion !== undefined ? { digest_epoch: epoch, digest_version: digestVersion } : {};
  const gaps = readGapCurve(d.turn_gaps);
  const mem = d.memory as Record<string, unknown> | undefined;
  const memory =
    mem && typeof mem === 'object' && num(mem.budget) !== undefined && num(mem.used) !== undefined && num(mem.free) !== undefined
      ? { budget: num(mem.budget)!, used: num(mem.used)!, free: num(mem.free)!, ...(num(mem.lent) !== undefined && num(mem.lent)! > 0 ? { lent: num(mem.lent)! } : {}) }
      : undefined;
  return { node: expectedNode, ver: typeof d.ver === 'string' ? d.ver : undefined, at: num(d.at), alias_version: num(d.alias_version), ...(num(d.key_version) !== undefined ? { key_version: num(d.key_version) } : {}), ...(typeof d.key_digest === 'string' && /^[0-9a-f]{16}$/.test(d.key_digest) ? { key_digest: d.key_digest } : {}), ...digests, ...(gaps ? { turn_gaps: gaps } : {}), models, ...(memory ? { memory } : {}), ...(d.draining === true ? { draining: true as const } : {}), ...lendingOf(d.lending) };
}

const LIFE_STATES = new Set(['unloaded', 'fetching', 'loading', 'loaded', 'unloading']);

/** A target's lifecycle fields (SPEC section 11), kept only when well-formed. */
function lifecycleOf(x: Record<string, unknown>): Partial<TargetReport> {
  if (typeof x.state !== 'string' || !LIFE_STATES.has(x.state)) return {};
  return {
    state: x.state as TargetReport['state'],
    memory: num(x.memory),
    ...(x.load === 'on_demand' ? { load: 'on_demand' as const } : {}),
    ...(typeof x.load_error === 'string' ? { load_error: x.load_error.slice(0, 1024) } : {}),
    ...splitOf(x.split),
  };
}

const MEMBER_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

/** A split target's lenders and parts (SPEC section 11), kept only when well-formed. */
function splitOf(v: unknown): Pick<TargetReport, 'split'> {
  if (typeof v !== 'object' || v === null) return {};
  const x = v as Record<string, unknown>;
  const lenders = x.lenders === 'auto' ? 'auto' : Array.isArray(x.lenders) ? x.lenders.filter((n): n is string => typeof n === 'string' && MEMBER_NAME.test(n)).slice(0, 64) : undefined;
  if (lenders === undefined) return {};
  const parts = Array.isArray(x.parts)
    ? x.parts.slice(0, 64).flatMap((p) => {
        const q = p as Record<string, unknown> | null;
        const bytes = num(q?.bytes);
        return q && typeof q.member === 'string' && MEMBER_NAME.test(q.member) && bytes !== undefined && bytes >= 0 ? [{ member: q.member, bytes }] : [];
      })
    : undefined;
  return { split: { lenders, ...(parts ? { parts } : {}) } };
}

/** What a member says it lends (node.lend_memory: true), kept only when well-formed. */
function lendingOf(v: unknown): Pick<CapacityReport, 'lending'> {
  if (typeof v !== 'object' || v === null) return {};
  const x = v as Record<string, unknown>;
  const lent = num(x.lent);
  if (lent === undefined || lent < 0) return {};
  const lends = Array.isArray(x.lends)
    ? x.lends.slice(0, 256).flatMap((l) => {
        const q = l as Record<string, unknown> | null;
        const bytes = num(q?.bytes);
        return q && typeof q.to === 'string' && MEMBER_NAME.test(q.to) && typeof q.model === 'string' && bytes !== undefined ? [{ to: q.to, model: q.model.slice(0, 256), bytes }] : [];
      })
    : [];
  return { lending: { lent, lends } };
}

export class CapacityPoller {
  readonly #reports = new Map<string, PeerReport>();
  readonly #rtt = new Map<string, number>();
  readonly #inFlight = new Set<string>();
  readonly #errors = new Map<string, string>();
  /** The digest version of each member this node holds (sent with every poll so unchanged digests are not resent). */
  readonly #held = new Map<string, HeldDigests>();
  /** When the last poll of each member ended, answered or not (this node's clock). */
  readonly #settledAt = new Map<string, number>();
  /** When the last regular poll of each member was sent (this node's clock). */
  readonly #sentAt = new Map<string, number>();
  #targets: PollTarget[] = [];
  #timer: NodeJS.Timeout | undefined;
  readonly agent: Agent;

  constructor(
    private readonly opts: {
      intervalMs: number;
      /** Members this node does not route to are polled this often (mesh.capacity_background); default intervalMs: every member every interval. */
      backgroundMs?: number;
      /** Does this node route to the member (poll it every interval)? Default: yes. */
      routed?: (name: string, r: PeerReport | undefined) => boolean;
      localAddress?: string;
      now?: () => number;
      log?: (msg: string) => void;
      onReport?: (name: string, r: PeerReport) => void;
    },
  ) {
    this.agent = new Agent({ connect: { timeout: 500 }, keepAliveTimeout: 10_000, ...(opts.localAddress ? { localAddress: opts.localAddress } : {}) });
  }

  get now(): () => number {
    return this.opts.now ?? Date.now;
  }

  setTargets(targets: PollTarget[]): void {
    this.#targets = targets;
    const names = new Set(targets.map((t) => t.name));
    for (const name of this.#errors.keys()) if (!names.has(name)) this.#errors.delete(name);
    for (const name of this.#sentAt.keys()) if (!names.has(name)) this.#sentAt.delete(name);
  }

  /**
   * When each member was last forgotten (this node's clock): a poll sent before then was answered by the process that
   * died or left (a draining node answers until it goes), and its report must not outlive it into the member's next
   * life under the same name (a restart's old `draining` report made the new process look ineligible).
   */
  readonly #forgotAt = new Map<string, number>();

  /** Forget a member's report (it died or left), and any answer to a poll sent before now. */
  forget(name: string): void {
    this.#forgotAt.set(name, this.now());
    this.#reports.delete(name);
    this.#held.delete(name);
    this.#rtt.delete(name);
  }

  get(name: string): PeerReport | undefined {
    return this.#reports.get(name);
  }

  rtt(name: string): number | undefined {
    return this.#rtt.get(name);
  }

  start(): void {
    if (this.#timer) return;
    this.pollAll();
    this.#timer = setInterval(() => this.#tick(), this.opts.intervalMs);
    this.#timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    await this.agent.close().catch(() => {});
  }

  pollAll(): void {
    for (const t of this.#targets) if (!this.#inFlight.has(t.name)) void this.poll(t);
  }

  /** Are some members polled less often than every interval? */
  get #background(): boolean {
    return (this.opts.backgroundMs ?? 0) > this.opts.intervalMs;
  }

  /**
   * Poll now the members whose turn it is: the node calls it when it starts
   * routing to members it polled slowly (a request for their model), so the
   * request waits one poll for them, not the rest of a tick. Nothing to do
   * when every member is polled every interval anyway.
   */
  pollDue(): void {
    if (this.#background) this.#tick();
  }

  /** One tick: the members whose turn it is (schedule.ts). */
  #tick(): void {
    // With no background period longer than the interval, everyone is polled every interval, as SPEC section 7 says.
    if (!this.#background) return this.pollAll();
    const routed = this.opts.routed;
    const members: MemberPoll[] = this.#targets.map((t) => ({
      name: t.name,
      routed: routed ? routed(t.name, this.#reports.get(t.name)) : true,
      lastSentAt: this.#sentAt.get(t.name),
      inFlight: this.#inFlight.has(t.name),
    }));
    const due = new Set(duePolls(members, this.now(), { intervalMs: this.opts.intervalMs, backgroundMs: this.opts.backgroundMs! }));
    for (const t of this.#targets) if (due.has(t.name)) void this.poll(t);
  }

  /** The poll of each member in flight now (so a request that needs the member's report can wait for it). */
  readonly #polls = new Map<string, Promise<void>>();

  poll(t: PollTarget): Promise<void> {
    const p = this.#pollOnce(t);
    this.#polls.set(t.name, p);
    void p.finally(() => {
      if (this.#polls.get(t.name) === p) this.#polls.delete(t.name);
    });
    return p;
  }

  /**
   * Poll these members now (a poll already in flight is waited for, not
   * doubled), for a request that would be refused on their old reports;
   * resolves when every one has answered or failed (at most the 1 s a poll
   * takes).
   */
  async pollNow(names: readonly string[]): Promise<void> {
    const waits: Promise<void>[] = [];
    for (const t of this.#targets) if (names.includes(t.name)) waits.push(this.#polls.get(t.name) ?? this.poll(t));
    await Promise.all(waits);
  }

  /** When the last poll of the member was sent, answered or not (this node's clock). */
  lastPolled(name: string): number | undefined {
    return this.#sentAt.get(name);
  }

  async #pollOnce(t: PollTarget): Promise<void> {
    this.#sentAt.set(t.name, this.now());
    this.#inFlight.add(t.name);
    try {
      await this.#fetch(t, this.#withHeld(t.name, '/v1/capacity'), 1000, false);
    } finally {
      this.#inFlight.delete(t.name);
      this.#settledAt.set(t.name, this.now());
    }
  }

  readonly #waiting = new Set<string>();
  readonly #waitEndedAt = new Map<string, number>();

  /**
   * Ask a member for its report as soon as one of its slots of `model` frees
   * (held by the member up to `ms`), so requests waiting here for its slots
   * learn of one when it frees, not at the next poll. One such poll per
   * member at a time, at least WAIT_GAP_MS apart; the regular polls go on.
   */
  waitForSlot(t: PollTarget, model: string, ms: number): void {
    // A member that answers at once, again and again, does not hold polls (an older viiwork): ask it less often.
    const gap = (this.#unheld.get(t.name) ?? 0) >= 2 ? UNHELD_GAP_MS : WAIT_GAP_MS;
    if (this.#waiting.has(t.name) || this.now() - (this.#waitEndedAt.get(t.name) ?? -Infinity) < gap) return;
    this.#waiting.add(t.name);
    const started = this.now();
    void this.#fetch(t, this.#withHeld(t.name, `/v1/capacity?wait=${encodeURIComponent(model)}&ms=${ms}`), ms + 1000, true).finally(() => {
      this.#waiting.delete(t.name);
      const now = this.now();
      this.#waitEndedAt.set(t.name, now);
      this.#unheld.set(t.name, now - started < UNHELD_MS ? (this.#unheld.get(t.name) ?? 0) + 1 : 0);
    });
  }

  readonly #unheld = new Map<string, number>();

  /** The poll path with the digest version held of that member, when there is one. */
  #withHeld(name: string, path: string): string {
    const h = this.#held.get(name);
    if (!h) return path;
    return `${path}${path.includes('?') ? '&' : '?'}digests=${heldParam(h)}`;
  }

  /** One poll; `held`: the member may hold it, so the report is as of its answer (about half an RTT before it arrived). */
  async #fetch(t: PollTarget, path: string, timeoutMs: number, held: boolean): Promise<void> {
    const sentAt = this.now();
    const started = performance.now();
    try {
      const res = await request(`${t.api}${path}`, { dispatcher: this.agent, signal: AbortSignal.timeout(timeoutMs), headersTimeout: timeoutMs, bodyTimeout: timeoutMs });
      const doc = res.statusCode === 200 ? await res.body.json() : (await res.body.text(), `HTTP ${res.statusCode}`);
      const rtt = performance.now() - started;
      if (sentAt <= (this.#forgotAt.get(t.name) ?? -Infinity)) return;
      const parsed = typeof doc === 'string' ? doc : parseReport(doc, t.name);
      if (typeof parsed === 'string') return this.#fail(t.name, parsed);
      const prev = this.#rtt.get(t.name);
      if (!held) this.#rtt.set(t.name, prev === undefined ? rtt : prev + RTT_ALPHA * (rtt - prev));
      const receivedAt = this.now();
      const polledAt = held ? Math.max(sentAt, receivedAt - (prev ?? 0) / 2) : sentAt;
      const old = this.#reports.get(t.name);
      const entry: PeerReport = { report: parsed, polledAt, receivedAt };
      let complete = false;
      if (parsed.digest_epoch !== undefined) {
        const r = resolveDigests(parsed, old?.digests, sentAt);
        entry.digests = r.digests;
        complete = r.complete;
      }
      if (!old || old.polledAt <= polledAt) {
        this.#reports.set(t.name, entry);
        // What the next poll says it holds; nothing when a digest could not be resolved (then all are sent again).
        if (complete) this.#held.set(t.name, { epoch: parsed.digest_epoch!, version: parsed.digest_version ?? 0 });
        else this.#held.delete(t.name);
      }
      if (this.#errors.delete(t.name)) this.opts.log?.(`capacity of ${t.name}: reports again`);
      this.opts.onReport?.(t.name, entry);
    } catch (err) {
      this.#fail(t.name, (err as Error).message);
    }
  }

  /**
   * One round: every current target polled (or failed) after `since`, or the
   * deadline. For a node that has just started: it knows who serves what
   * before it calls itself ready.
   */
  async round(since: number, deadlineMs: number): Promise<void> {
    this.pollAll();
    const until = performance.now() + deadlineMs;
    while (performance.now() < until) {
      if (this.#targets.every((t) => (this.#settledAt.get(t.name) ?? -Infinity) >= since)) return;
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  #fail(name: string, why: string): void {
    if (this.#errors.get(name) === why) return;
    this.#errors.set(name, why);
    this.opts.log?.(`capacity of ${name}: poll failed: ${why}`);
  }
}

/** A fetch in progress on the member (SPEC section 11), when well formed: bytes done of a size. */
function fetchOf(raw: unknown): { fetch?: { bytes: number; size: number } } {
  if (!raw || typeof raw !== 'object') return {};
  const f = raw as Record<string, unknown>;
  const bytes = num(f.bytes);
  const size = num(f.size);
  if (bytes === undefined || size === undefined || bytes < 0 || size < 0) return {};
  return { fetch: { bytes: Math.min(bytes, size), size } };
}

/** A model's published file (SPEC section 11), when well formed: a size and a SHA-256. */
function fileOf(raw: unknown): { file?: { size: number; sha256: string } } {
  const f = raw as Record<string, unknown> | undefined;
  if (!f || typeof f !== 'object') return {};
  const size = num(f.size);
  if (size === undefined || size < 0 || typeof f.sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(f.sha256)) return {};
  return { file: { size, sha256: f.sha256 } };
}
