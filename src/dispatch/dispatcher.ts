/**
 * The life of one request on this node (SPEC section 9): for a client's
 * request, resolve an alias, check that someone can serve it, place it (now,
 * or after waiting in the queue), run it here or forward it, retry what is
 * retried, measure and record; for a verified forward from a member, admit it
 * into a free local slot or refuse it at once, marked.
 */
import type http from 'node:http';
import type { Lease } from '../engines/targets.ts';
import { sendForward } from '../forward/send.ts';
import { ApiError, errors, sendError } from '../http/errors.ts';
import { relay, upstreamErrorText, type AnswerTranslator } from '../http/relay.ts';
import { RES_ALIAS, RES_MODEL, RES_NODE, RES_ORIGIN, RES_QUEUED_MS, RES_ROUTE } from '../http/viiwork-headers.ts';
import { candidates } from '../route/eligibility.ts';
import { decide } from '../route/decide.ts';
import type { Candidate, HostView, RouteReason } from '../route/types.ts';
import { isScoredWorkload } from '../workloads/workloads.ts';
import { resolveModelName } from './alias.ts';
import { prefixKey } from './prefix.ts';
import { measure } from './measure.ts';
import { INITIAL, step, type Failure, type PlacementAction, type PlacementEvent, type PlacementState } from './placement.ts';
import type { DispatchPorts } from './ports.ts';
import type { DispatchRequest, Placement, RunOutcome } from './types.ts';
import { engineBody, forwardBody } from './upstream-body.ts';
import { sha256HexAsync } from '../security/signing.ts';
import { planResponses, RESPONSES_PATH } from './responses.ts';

/** What the decision feed and metrics learn of one request, filled in as it goes. */
interface Trace {
  executor: string | null;
  route: RouteReason | 'forwarded' | 'not-routed';
  queuedMs: number;
  firstContentAt?: number;
  startedAt: number;
  outcome: string;
  /** The model is one some member serves (so it may be a metric label). */
  known: boolean;
}

export class Dispatcher {
  constructor(private readonly p: DispatchPorts) {}

  /** A client's request entering at this node. */
  async serveClient(req: DispatchRequest, res: http.ServerResponse, signal: AbortSignal): Promise<void> {
    const trace: Trace = { executor: null, route: 'not-routed', queuedMs: 0, startedAt: performance.now(), outcome: 'ok', known: false };
    const clientModel = req.model;
    try {
      // One snapshot serves alias resolution, the up-front checks and the first routing attempt.
      let hosts = this.p.snapshot();
      const warming = this.p.warming();
      if (warming && !this.#known(req, hosts)) {
        // A node that has just started may not have heard from the member that serves this yet (SPEC section 4).
        await warming;
        hosts = this.p.snapshot();
      }
      if (req.sessionKey === undefined && req.scan && this.p.rules.prefixAffinity) req.prefixKey = prefixKey(req.body, req.scan, req.path);
      const resolved = resolveModelName(this.p.aliases, req.model, req.workload, hosts);
      if (resolved !== undefined) {
        req.alias = req.model;
        req.model = resolved;
      }
      await this.#place(req, res, signal, trace, hosts);
    } catch (err) {
      trace.outcome = err instanceof ApiError ? String(err.status) : 'error';
      throw err;
    } finally {
      this.#record(req, clientModel, this.p.name, trace);
    }
  }

  /** A verified forward from member `from`: a free local slot of a capable target now, or a marked refusal. */
  async serveForward(req: DispatchRequest, from: string, res: http.ServerResponse, signal: AbortSignal): Promise<void> {
    const trace: Trace = { executor: this.p.name, route: 'forwarded', queuedMs: 0, startedAt: performance.now(), outcome: 'ok', known: false };
    try {
      if (!this.p.slots.does(req.model, req.workload)) throw errors.forwardLacksModel(req.model, req.workload);
      trace.known = true;
      const lease = this.p.slots.tryLease(req.model, req.workload, req.sessionKey);
      if (!lease) throw errors.forwardNoSlot();
      const o = await this.#runLocal(req, lease, res, signal, { origin: from, route: 'local', queuedMs: 0, extra: {} }, trace);
      if (o.kind === 'engine-failed') {
        // Marked, so the entry node tries another host or answers 502 with this text.
        sendError(res, errors.engineFailed(o.text, true), mesh(this.p.name, from, 'local', 0));
        trace.outcome = '502';
      }
    } catch (err) {
      trace.outcome = err instanceof ApiError ? String(err.status) : 'error';
      throw err;
    } finally {
      this.#record(req, req.model, from, trace);
    }
  }

  async #place(req: DispatchRequest, res: http.ServerResponse, signal: AbortSignal, trace: Trace, hosts: readonly HostView[]): Promise<void> {
    const p = this.p;
    // The candidates of the up-front checks also serve the first routing attempt.
    let first: Candidate[] | undefined = this.#candidates(req, hosts);
    checkServable(req, hosts, first);
    trace.known = true;
    const arrived = p.now();
    // An on-demand model nobody has loaded: a host is asked to load it, and the request waits up to load_wait.
    // (Only when nothing capable is healthy: the hot path of a loaded model never comes here.)
    const forLoad =
      p.loads && !first.some((c) => c.healthy) && first.some((c) => c.available || c.loading)
        ? await p.loads.ensure(req.model, req.workload, 'request', `a ${req.workload} request entering ${p.name}`, hosts, req.pin)
        : false;
    const deadline = arrived + (forLoad ? Math.max(p.rules.queueTimeoutMs, p.loads!.waitMs) : p.rules.queueTimeoutMs);
    const queue = p.queues.get(req.model, req.workload);
    const rules = { queueMax: p.rules.queueMax, forwardRetry: p.rules.forwardRetry };
    const extra: Record<string, string> = req.alias !== undefined ? { [RES_ALIAS]: req.alias, [RES_MODEL]: req.model } : {};
    let state: PlacementState = INITIAL;
    let placement: Placement | undefined;
    let event: PlacementEvent = { kind: 'arrived', queueDepth: queue.depth };
    for (;;) {
      let action: PlacementAction;
      [state, action] = step(state, event, rules);
      switch (action.kind) {
        case 'try': {
          const failed = state.failed;
          placement = this.#attempt(req, failed, first);
          first = undefined;
          event = { kind: 'tried', placed: placement !== undefined, routeLeft: placement !== undefined || this.#routeLeft(req, failed) };
          break;
        }
        case 'wait': {
          const failed = state.failed;
          const out = queue.enqueue(() => this.#attempt(req, failed) ?? this.#loadFailed(req, arrived), { signal, deadline, front: action.front });
          p.waiting();
          const outcome = await out;
          if (outcome.ok) {
            placement = outcome.value;
            p.metrics.queueWait.observe(outcome.queuedMs / 1000);
          }
          event = { kind: 'waited', how: outcome.ok ? 'placed' : outcome.reason };
          break;
        }
        case 'run': {
          const where = placement!;
          placement = undefined;
          if (where.kind === 'load-failed') throw errors.loadFailed(req.model, where.text);
          const queuedMs = state.queued ? Math.max(1, p.now() - arrived) : 0;
          const route: RouteReason = state.queued ? 'queued' : where.reason;
          trace.queuedMs = queuedMs;
          trace.route = route;
          const outcome = await this.#run(req, where, res, signal, { origin: p.name, route, queuedMs, extra }, trace);
          event = { kind: 'ran', outcome };
          break;
        }
        case 'end':
          if (trace.outcome === 'ok' && signal.aborted) trace.outcome = 'aborted';
          return;
        case 'fail':
          if (action.failure === 'queue-timeout' && forLoad && !this.#candidates(req).some((c) => c.healthy)) throw errors.loadTimeout(req.model, deadline - arrived);
          if (action.failure === 'queue-timeout' && this.#onlyLoading(req)) throw errors.modelLoading(req.model, p.rules.queueTimeoutMs);
          throw failureError(action.failure, req.model, p.rules.queueTimeoutMs, state.engineError);
      }
    }
  }

  /** Can this request be placed on what the snapshot knows (its model or alias, for its workload, on its pinned host)? */
  #known(req: DispatchRequest, hosts: readonly HostView[]): boolean {
    try {
      const model = resolveModelName(this.p.aliases, req.model, req.workload, hosts) ?? req.model;
      checkServable({ ...req, model }, hosts, this.#candidates({ ...req, model }, hosts));
      return true;
    } catch {
      return false;
    }
  }

  #candidates(req: DispatchRequest, hosts: readonly HostView[] = this.p.snapshot()): Candidate[] {
    return candidates({ hosts, forwards: this.p.forwards.tally, marks: this.p.forwards.marks }, req.model, req.workload);
  }

  /** The load this request waited for failed: a placement that ends it with 503 (undefined: keep waiting). */
  #loadFailed(req: DispatchRequest, arrived: number): Placement | undefined {
    const text = this.p.loads?.failure(req.model, arrived);
    return text === undefined ? undefined : { kind: 'load-failed', text };
  }

  /** Nothing capable is healthy, and something is still loading. */
  #onlyLoading(req: DispatchRequest): boolean {
    const c = this.#candidates(req);
    return !c.some((x) => x.healthy) && c.some((x) => x.loading);
  }

  /** Is any capable host with a healthy backend left for this request (apart from those whose engine failed it)? */
  #routeLeft(req: DispatchRequest, failed: readonly string[]): boolean {
    return this.#candidates(req).some((c) => c.healthy && !failed.includes(c.host) && (c.fresh || c.local));
  }

  /** One routing attempt: decide and reserve (a local lease, or a forward counted in the book). */
  #attempt(req: DispatchRequest, failed: readonly string[], cands: Candidate[] = this.#candidates(req)): Placement | undefined {
    const p = this.p;
    if (failed.length) cands = cands.filter((c) => !failed.includes(c.host));
    const d = decide(cands, req, { performance: p.rules.performance, random: p.random, roundRobin: p.nextRoundRobin() });
    if (d.kind === 'wait') return undefined;
    if (d.local) {
      const lease = p.slots.tryLease(req.model, req.workload, req.sessionKey ?? req.prefixKey);
      return lease ? { kind: 'local', lease, reason: d.reason } : undefined;
    }
    return { kind: 'remote', host: d.host, reason: d.reason, end: p.forwards.start(d.host, req.model, req.workload, d.target) };
  }

  async #run(req: DispatchRequest, where: Exclude<Placement, { kind: 'load-failed' }>, res: http.ServerResponse, signal: AbortSignal, h: ResponseMeta, trace: Trace): Promise<RunOutcome> {
    if (where.kind === 'local') {
      trace.executor = this.p.name;
      return this.#runLocal(req, where.lease, res, signal, h, trace);
    }
    const p = this.p;
    let outcome: RunOutcome = { kind: 'aborted' };
    try {
      const body = (req.forwardBody ??= await forwardBody(req));
      if (p.peers.signsBody) req.forwardSha256 ??= await sha256HexAsync(body);
      outcome = await sendForward(
        p.peers,
        {
          host: where.host,
          path: req.path,
          body,
          bodySha256: req.forwardSha256 ?? '',
          contentType: req.scan ? 'application/json' : req.contentType,
          stream: req.stream,
          // The executor picks the backend by the same key, so the conversation finds its warm slot there too.
          sessionKey: req.sessionKey ?? req.prefixKey,
          signal,
          responseHeaders: { ...h.extra, ...mesh(where.host, h.origin, h.route, h.queuedMs) },
          streamStallMs: p.rules.streamStallMs,
          writeStallMs: p.rules.writeStallMs,
        },
        res,
      );
    } finally {
      // Ended either way; the end of a served forward frees its slot in this node's view at once and wakes the queues.
      where.end(outcome.kind === 'refused' || outcome.kind === 'engine-failed' ? 'refused' : 'served');
    }
    if (outcome.kind === 'refused' || outcome.kind === 'engine-failed') {
      p.forwards.refuse(where.host, req.model, req.workload);
      p.metrics.forwards.inc({ outcome: outcome.kind === 'refused' ? 'refused' : 'engine-failed' });
      p.log.debug('forward refused', { host: where.host, model: req.model, outcome: outcome.kind, detail: outcome.kind === 'refused' ? outcome.detail : outcome.text });
    } else {
      trace.executor = where.host;
      if (outcome.kind === 'answered') {
        trace.firstContentAt = outcome.firstContentAt;
        trace.outcome = outcome.status ? String(outcome.status) : 'broken';
      } else trace.outcome = 'aborted';
      p.metrics.forwards.inc({ outcome: outcome.kind === 'answered' ? (outcome.status ? 'done' : 'broken') : 'aborted' });
    }
    p.queues.pumpAll();
    return outcome;
  }

  /** Run on a local backend; an engine failure before its first byte is reported back, not answered. */
  async #runLocal(req: DispatchRequest, lease: Lease, res: http.ServerResponse, signal: AbortSignal, h: ResponseMeta, trace: Trace): Promise<RunOutcome> {
    const p = this.p;
    try {
      const base = lease.backend.url;
      if (!base) return { kind: 'engine-failed', host: p.name, text: `backend ${lease.backend.id} has no address` };
      let { body, stripUsage } = await engineBody(req);
      let path = req.path;
      let translate: AnswerTranslator | undefined;
      const responseHeaders = { ...h.extra, ...mesh(p.name, h.origin, h.route, h.queuedMs) };
      if (req.path === RESPONSES_PATH) {
        const plan = planResponses(req, lease.target.descriptor);
        if (plan.kind === 'refuse') {
          // The executor's own answer about the request itself: unmarked, so it reaches the client once.
          sendError(res, plan.error, responseHeaders);
          trace.outcome = String(plan.error.status);
          return { kind: 'answered', status: plan.error.status };
        }
        if (plan.kind === 'translate') ({ path, body, translate } = plan);
      }
      const generation = isScoredWorkload(req.workload);
      const headers: Record<string, string> = {
        'content-type': req.scan ? 'application/json' : req.contentType,
        accept: req.stream ? 'text/event-stream' : 'application/json',
        ...lease.backend.authHeaders(),
      };
      const result = await relay({ origin: base, path, method: 'POST', headers, body, signal }, res, {
        responseHeaders,
        stripUsage,
        keepBody: generation && !req.stream ? 1 << 20 : undefined,
        streamStallMs: p.rules.streamStallMs,
        writeStallMs: p.rules.writeStallMs,
        translate,
      });
      p.log.debug('request', { model: req.model, workload: req.workload, backend: lease.backend.id, route: h.route, result: result.kind });
      switch (result.kind) {
        case 'refused': {
          if (result.status === undefined) lease.backend.reportFailure(result.detail);
          const text = upstreamErrorText(result.body);
          return { kind: 'engine-failed', host: p.name, text: `${lease.backend.id}: ${result.detail}${text ? `: ${text}` : ''}` };
        }
        case 'aborted':
          trace.outcome = 'aborted';
          return { kind: 'aborted' };
        case 'broken':
          trace.outcome = 'broken';
          return { kind: 'answered', status: 0 };
        case 'done':
          trace.firstContentAt = result.firstContentAt;
          trace.outcome = String(result.status);
          if (generation && result.status < 300) {
            const m = measure(lease.grantedAt, result);
            if (m) {
              p.recordScore(req.model, m.promptTokens, m.ttftMs);
              p.metrics.ttft.observe({ model: req.model }, m.ttftMs / 1000);
            }
          }
          return { kind: 'answered', status: result.status, firstContentAt: result.firstContentAt };
      }
    } finally {
      lease.release();
    }
  }

  #record(req: DispatchRequest, clientModel: string, entry: string, trace: Trace): void {
    const p = this.p;
    // Labels and the feed stay bounded whatever clients send: a model nobody serves is the label `unknown`,
    // and the feed keeps at most the start of its name (an operator still sees the typo).
    p.metrics.requests.inc({ model: trace.known ? req.model : UNKNOWN_MODEL, workload: req.workload, route: trace.route, outcome: trace.outcome });
    p.decisions.add({
      at: Date.now(),
      entry,
      executor: trace.executor,
      model: req.model.length > FEED_NAME_MAX ? `${req.model.slice(0, FEED_NAME_MAX)}…` : req.model,
      workload: req.workload,
      route: trace.route,
      queued_ms: trace.queuedMs,
      ttft_ms: trace.firstContentAt === undefined ? null : Math.round(trace.firstContentAt - trace.startedAt),
      outcome: trace.outcome,
      ...(req.alias !== undefined ? { alias: clientModel.slice(0, FEED_NAME_MAX) } : {}),
    });
  }
}

/** The metric label and feed entry of a request for a model no member serves. */
export const UNKNOWN_MODEL = 'unknown';
/** The decision feed keeps at most this many characters of a model name. */
const FEED_NAME_MAX = 128;

interface ResponseMeta {
  origin: string;
  route: RouteReason;
  queuedMs: number;
  extra: Record<string, string>;
}

function mesh(executor: string, origin: string, route: RouteReason, queuedMs: number): Record<string, string> {
  return { [RES_NODE]: executor, [RES_ORIGIN]: origin, [RES_ROUTE]: route, [RES_QUEUED_MS]: String(queuedMs) };
}

/** 404 / 400 / 503 before any waiting, from every host that reports the model (fresh or stale). */
function checkServable(req: DispatchRequest, hosts: readonly HostView[], cands: Candidate[]): void {
  const serving = hosts.filter((h) => h.models.has(req.model));
  if (serving.length === 0) throw errors.unknownModel(req.model);
  if (req.pin !== undefined) {
    if (!serving.some((h) => h.name === req.pin)) throw errors.unknownHost(req.pin, req.model);
    if (!cands.some((c) => c.host === req.pin)) throw errors.unsupportedWorkload(req.model, req.workload, `member "${req.pin}"`);
  }
  if (cands.length === 0) throw errors.unsupportedWorkload(req.model, req.workload);
  // A backend still loading counts as full: the request waits for it (up to queue_timeout).
  // An on-demand target that is not loaded can be (SPEC section 11): the request waits for its load.
  if (!cands.some((c) => c.healthy || c.loading || c.available)) throw errors.noHealthyBackend(req.model);
}

function failureError(f: Failure, model: string, timeoutMs: number, engineError: string | undefined): ApiError {
  switch (f) {
    case 'queue-full':
      return errors.queueFull(model);
    case 'queue-timeout':
      return errors.queueTimeout(model, timeoutMs);
    case 'queue-timeout-refused':
      return errors.queueTimeoutRefused(model, timeoutMs);
    case 'engine-failed':
      return errors.engineFailed(engineError ?? 'no detail');
  }
}
