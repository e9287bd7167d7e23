/**
 * The entry node's side of on-demand loading (SPEC section 11): a request
 * for a model that no fresh host has loaded (or, with `scale`, whose every
 * copy is busy while requests queue) makes this node choose a host
 * (route/placement.ts) and ask it to load. One ask per model at a time from
 * this node; the host makes asks for one model one load. The request then
 * waits in the queue as for a loading backend, up to `routing.load_wait`.
 * A load that fails ends the requests that waited for it with 503 and the
 * engine's own text; the next request asks again, another host first.
 */
import type { LoadAsk } from '../../lifecycle/answers.ts';
import { bytesText, type LoadReason } from '../../lifecycle/lifecycle.ts';
import { lendersOf, loadHosts, rankLoadHosts } from '../../route/placement.ts';
import type { HostView } from '../../route/types.ts';

/** This node's queues as `waitingIn` reads them (queue/fifo.ts QueueSet). */
export interface WaitingQueues {
  entries(): { model: string; workload: string; depth: number }[];
  get(model: string, workload: string): { readonly queuedSince: number | undefined };
}

/** What one ask to a host came to. */
/** What an ask to load came to, local or remote: the lifecycle's one definition. */
export type AskResult = LoadAsk;

export interface LoadPorts {
  readonly self: string;
  /** routing.load_wait, ms. */
  readonly loadWaitMs: number;
  now(): number;
  snapshot(): HostView[];
  /** Ask this node's own lifecycle. */
  askLocal(model: string, reason: LoadReason, detail: string): AskResult;
  /** Ask a member (POST /v1/models/{id}/load, signed like a forward). */
  askRemote(host: string, model: string, reason: LoadReason, detail: string): Promise<AskResult>;
  log(msg: string): void;
}

interface Ticket {
  host: string;
  /** Clock ms when the host accepted the ask. */
  at: number;
  reason: LoadReason;
}

interface Failure {
  host: string;
  text: string;
  /** Clock ms when this node saw it fail. */
  at: number;
}

/** A host whose load of a model failed is asked last for it this long. */
export const FAILED_HOST_MS = 60_000;

export class Loads {
  readonly #tickets = new Map<string, Ticket>();
  readonly #asking = new Map<string, Promise<boolean>>();
  readonly #failures = new Map<string, Failure>();
  /** Why no host could load a model at its last ask (every host refused, or none could hold it), and when. */
  readonly #noRoom = new Map<string, { text: string; at: number }>();
  /** Clock ms of the last scale ask per model: one more copy at a time, at most one per scale_after. */
  readonly #scaledAt = new Map<string, number>();

  constructor(private readonly p: LoadPorts) {}

  get waitMs(): number {
    return this.p.loadWaitMs;
  }

  /**
   * Requests for (model, workload) have queued here since `since`, the
   * queue never empty in between (SPEC section 11): past `scaleAfterMs`, one
   * more copy is loaded on a host without one; before it, a model nobody
   * holds is asked for again (after a refusal or a failed load).
   */
  waiting(model: string, workload: string, since: number, depth: number, scaleAfterMs: number): void {
    const now = this.p.now();
    const waited = now - since;
    if (waited >= scaleAfterMs && !this.pending(model) && now - (this.#scaledAt.get(model) ?? -Infinity) >= scaleAfterMs) {
      this.#scaledAt.set(model, now);
      void this.ensure(model, workload, 'scale', `${depth} request(s) queued at ${this.p.self} for ${Math.round(waited)} ms (routing.scale_after ${scaleAfterMs} ms)`);
    } else void this.ensure(model, workload, 'request', `${depth} request(s) waiting at ${this.p.self}`);
  }

  /** `waiting` for every queue here that holds requests (the node's tick calls it). */
  waitingIn(queues: WaitingQueues, scaleAfterMs: number): void {
    for (const q of queues.entries()) {
      if (q.depth === 0) continue;
      const since = queues.get(q.model, q.workload).queuedSince;
      if (since !== undefined) this.waiting(q.model, q.workload, since, q.depth, scaleAfterMs);
    }
  }

  /** Is a load of this model, asked by this node, under way? */
  pending(model: string): boolean {
    this.#settle(model);
    return this.#tickets.has(model);
  }

  /**
   * Before a request for `model` waits: when nothing capable is healthy or
   * loading but a host could load it, ask one (or join the ask under way).
   * Resolves true when the request waits for a load (asked now or before).
   */
  async ensure(model: string, workload: string, reason: LoadReason, detail: string, snapshot?: readonly HostView[], pin?: string): Promise<boolean> {
    if (this.pending(model)) return true;
    const asking = this.#asking.get(model);
    if (asking) return asking;
    const hosts = snapshot ?? this.p.snapshot();
    let unloading = false;
    if (reason === 'request') {
      // Served already, or on its way (a backend starting, another entry node's load): no ask from here.
      let healthy = false;
      let loading = false;
      let onDemandLoading = false;
      for (const h of hosts) {
        if (!h.fresh && !h.local) continue;
        for (const t of h.models.get(model)?.targets ?? []) {
          if (t.slots > 0) healthy = true;
          if (t.onDemand && (t.state === 'loading' || t.state === 'fetching')) onDemandLoading = true;
          else if ((t.loading ?? 0) > 0) loading = true;
          if (t.onDemand && t.state === 'unloading' && (pin === undefined || h.name === pin)) unloading = true;
        }
      }
      if (healthy || loading) return false;
      if (onDemandLoading) return true;
    }
    // A request pinned to a host (?host=) is loaded there or nowhere. A host unloading the model (an idle unload under
    // way) cannot load it yet: the request waits for a load all the same, asked again at each tick (`waiting`) until the
    // unload is done (before, it was refused 503 no_healthy_backend).
    const ask = this.#ask(model, workload, reason, detail, pin === undefined ? hosts : hosts.filter((h) => h.name === pin))
      .then((asked) => asked || unloading)
      .finally(() => this.#asking.delete(model));
    this.#asking.set(model, ask);
    return ask;
  }

  /** An operator's load with no host named: the host placement picks (as for a request), or undefined with why. */
  async place(model: string, workload: string, detail: string): Promise<{ host?: string; why: string }> {
    const hosts = this.p.snapshot();
    for (const h of hosts) {
      const t = h.models.get(model)?.targets ?? [];
      if ((h.fresh || h.local) && t.some((x) => x.slots > 0 || x.state === 'loading')) return { host: h.name, why: 'already loaded or loading there' };
    }
    const ok = await this.#ask(model, workload, 'operator', detail, hosts);
    const t = this.#tickets.get(model);
    return ok && t ? { host: t.host, why: 'placed' } : { why: 'no host can fit it (see the log of each host)' };
  }

  async #ask(model: string, workload: string, reason: LoadReason, detail: string, hosts: readonly HostView[]): Promise<boolean> {
    const failed = this.#failures.get(model);
    const recentlyFailed = failed && this.p.now() - failed.at < FAILED_HOST_MS ? [failed.host] : [];
    const candidates = loadHosts(hosts, model, workload);
    const lenders = lendersOf(hosts);
    // A host whose load just failed goes last, not out: it may be the only one.
    const ranked = [...rankLoadHosts(model, candidates, recentlyFailed, lenders), ...rankLoadHosts(model, candidates.filter((h) => recentlyFailed.includes(h.host)), [], lenders)];
    const refusals: string[] = [];
    for (const choice of ranked) {
      const host = choice.host;
      const r = host === this.p.self ? this.p.askLocal(model, reason, detail) : await this.p.askRemote(host, model, reason, detail);
      if (r.kind === 'loading' || r.kind === 'loaded') {
        this.#tickets.set(model, { host, at: this.p.now(), reason });
        this.#noRoom.delete(model);
        this.p.log(`asked ${host} to load ${model} (${reason}: ${detail}${choice.fits === 'unload' ? '; it unloads idle models for room' : choice.fits === 'split' ? '; it runs it split across lending members' : ''})`);
        return true;
      }
      refusals.push(`${host}: ${'detail' in r ? r.detail : r.kind}`);
    }
    if (refusals.length) this.p.log(`no host could load ${model}: ${refusals.join('; ')}`);
    const text = refusals.length ? refusals.join('; ') : candidates.length ? `${candidates.map((h) => `${h.host} has ${bytesText(h.free)} free of the ${bytesText(h.need)} it needs`).join('; ')}${candidates.some((h) => h.split) ? ', and the members that lend do not hold the rest' : ''}` : 'no host has room for it';
    this.#noRoom.set(model, { text: text.slice(0, 1024), at: this.p.now() });
    return false;
  }

  /** Why no host could load `model` at an ask made since `since` (undefined: none was refused since). */
  noRoom(model: string, since: number): string | undefined {
    const r = this.#noRoom.get(model);
    return r && r.at >= since ? r.text : undefined;
  }

  /**
   * The engine's text when the load this request waited for failed (the
   * request arrived at `since` or before the failure), else undefined.
   */
  failure(model: string, since: number): string | undefined {
    this.#settle(model);
    const f = this.#failures.get(model);
    return f && f.at >= since ? `${f.host}: ${f.text}` : undefined;
  }

  /** Close the ticket when its host reports the model loaded, its load failed, or load_wait passed. */
  #settle(model: string): void {
    const t = this.#tickets.get(model);
    if (!t) return;
    const now = this.p.now();
    if (now - t.at > this.p.loadWaitMs) return void this.#tickets.delete(model);
    const h = this.p.snapshot().find((x) => x.name === t.host);
    if (!h) return;
    const targets = h.models.get(model)?.targets ?? [];
    if (targets.some((x) => x.slots > 0)) return void this.#tickets.delete(model);
    // Only a report polled after the ask can say the load ended (an older one still shows it unloaded).
    if (!h.local && h.polledAt <= t.at) return;
    if (targets.some((x) => x.state === 'loading' || x.state === 'fetching' || (x.loading ?? 0) > 0)) return;
    const error = targets.find((x) => x.loadError)?.loadError;
    this.#tickets.delete(model);
    if (error !== undefined) {
      this.#failures.set(model, { host: t.host, text: error, at: now });
      this.p.log(`load of ${model} on ${t.host} failed: ${error}`);
    }
  }
}
