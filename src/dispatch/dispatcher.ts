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
import { holdStep, NO_HOLD, type HoldState } from '../route/hold.ts';
import { prefixChain, walkPrompt } from '../route/prefix-chain.ts';
import type { Candidate, HostView, RouteReason } from '../route/types.ts';
import { warmCandidates } from '../route/warmth.ts';
import { isScoredWorkload } from '../workloads/workloads.ts';
import { resolveModelName } from './alias.ts';
import { prefixKeyOf } from './prefix.ts';
import { RecentRoutes } from './recent-routes.ts';
import { measure } from './measure.ts';
import { INITIAL, step, type Failure, type PlacementAction, type PlacementEvent, type PlacementState } from './placement.ts';
import type { DispatchPorts } from './ports.ts';
import type { DispatchRequest, Placement, RunOutcome } from './types.ts';
import { engineBody, forwardBody } from './upstream-body.ts';
import { sha256HexAsync } from '../security/signing.ts';
import type { CacheRun } from '../engines/cache-book.ts';
import { usageOfBody } from '../http/engine-usage.ts';
import { planResponses, RESPONSES_PATH } from './responses.ts';
import { COUNT_TOKENS_PATH, countTokens, MESSAGES_PATH, planMessages } from './messages.ts';
import { ToolOrderMemory, type Hygiene } from './tool-order.ts';
import { RES_OMITTED_TOOLS } from '../http/viiwork-headers.ts';
import { sendJson } from '../http/errors.ts';

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
  /** Prompt tokens the entry's pricing (or, run here unpriced, this executor's cache model) expected the host to hold. */
  predictedCached?: number;
  /** The engine's own count of prompt tokens served from its cache. */
  cachedTokens?: number;
  /** The engine's prompt tokens (this node's own executions). */
  promptTokens?: number;
}

/** One request's wait for a warm host (route/hold.ts), shared by its attempts. */
interface HoldCell {
  state: HoldState;
}

export class Dispatcher {
  /** What this node routed where lately: a host's cache until its next digest (SPEC 9.6). */
  readonly #routes: RecentRoutes;
  /** model \0 host → requests of this node waiting for that host's warm slot. */
  readonly #holding = new Map<string, number>();
  /** Prompt-cache hygiene of the requests this node executes (api.agent_hygiene; the tool order is per session). */
  readonly #hygiene: Hygiene;

  constructor(private readonly p: DispatchPorts) {
    this.#routes = new RecentRoutes(() => p.now());
    this.#hygiene = { on: p.rules.agentHygiene ?? true, toolOrder: new ToolOrderMemory(() => p.now()) };
  }

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
      if (req.scan && isScoredWorkload(req.workload)) {
        // One bounded walk gives the chain pricing uses and the prefix key.
        const walk = walkPrompt(req.body, req.scan, req.path, { hygiene: this.#hygiene.on });
        req.chain = walk.chain;
        if (walk.complete) req.pricedTokens = walk.chain[walk.chain.length - 1].tokens;
        if (req.sessionKey === undefined && this.p.rules.prefixAffinity) req.prefixKey = prefixKeyOf(walk);
      }
      const resolved = resolveModelName(this.p.aliases, req.model, req.workload, hosts);
      if (resolved !== undefined) {
        req.alias = req.model;
        req.model = resolved;
      }
      if (req.path === COUNT_TOKENS_PATH) return await this.#countTokens(req, res, signal, trace, hosts);
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
      if (req.path === COUNT_TOKENS_PATH) return await this.#countTokens(req, res, signal, trace, this.p.snapshot(), from);
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

  /**
   * count_tokens, without a slot or the queue (SPEC section 4): with this
   * node's own tokenizer for the model; else, on an entry node, by the member
   * nearest that serves it healthy, fresh reports first (its engine's
   * tokenizer, one signed forward);
   * else, or when that member does not answer, the estimate.
   */
  async #countTokens(req: DispatchRequest, res: http.ServerResponse, signal: AbortSignal, trace: Trace, hosts: readonly HostView[], from?: string): Promise<void> {
    const cands = this.#candidates(req, hosts);
    checkServable(req, hosts, cands);
    trace.known = true;
    trace.route = 'local';
    const extra: Record<string, string> = req.alias !== undefined ? { [RES_ALIAS]: req.alias, [RES_MODEL]: req.model } : {};
    const tokenizer = this.p.tokenizer?.(req.model);
    // A fresh report first, else a stale one (a member polled in the background, this node not routing to it yet):
    // a count is advice, and a member that does not answer costs only the fallback to the estimate.
    const remote =
      tokenizer || from !== undefined ? undefined : cands.filter((c) => !c.local && c.healthy).sort((a, b) => Number(b.fresh) - Number(a.fresh) || a.rttMs - b.rttMs)[0];
    if (remote) {
      const o = await this.#forward(req, remote.host, res, signal, { ...extra, ...mesh(remote.host, this.p.name, 'local', 0) });
      if (o.kind === 'answered' || o.kind === 'aborted') {
        trace.executor = remote.host;
        return;
      }
    }
    const counted = await countTokens(req, tokenizer, signal);
    if (!res.destroyed) sendJson(res, 200, counted, extra);
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
    const hold: HoldCell = { state: NO_HOLD };
    try {
      for (;;) {
        let action: PlacementAction;
        [state, action] = step(state, event, rules);
        switch (action.kind) {
          case 'try': {
            const failed = state.failed;
            placement = this.#attempt(req, failed, hold, undefined, first && { cands: first, hosts });
            first = undefined;
            event = { kind: 'tried', placed: placement !== undefined, routeLeft: placement !== undefined || this.#routeLeft(req, failed) };
            break;
          }
          case 'wait': {
            const failed = state.failed;
            const out = queue.enqueue((wake) => this.#attempt(req, failed, hold, wake) ?? this.#loadFailed(req, arrived), { signal, deadline, front: action.front });
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
    } finally {
      // However it ends, it waits for no host any more.
      this.#setHold(req.model, hold, NO_HOLD);
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

  /**
   * One routing attempt: price, decide and reserve (a local lease, or a
   * forward counted in the book), or wait — for a warm full host while that
   * pays (`hold`; `wake` tries again when its time is up), else for any slot.
   */
  #attempt(
    req: DispatchRequest,
    failed: readonly string[],
    hold: HoldCell,
    wake?: (at: number) => void,
    known?: { cands: Candidate[]; hosts: readonly HostView[] },
  ): Placement | undefined {
    const p = this.p;
    const hosts = known?.hosts ?? p.snapshot();
    let cands = known?.cands ?? this.#candidates(req, hosts);
    if (failed.length) cands = cands.filter((c) => !failed.includes(c.host));
    if (req.chain || this.#holding.size > 0) {
      const own = hold.state.hold?.host;
      cands = warmCandidates(cands, {
        hosts,
        model: req.model,
        workload: req.workload,
        chain: req.chain ?? [],
        memory: this.#routes,
        holding: (host) => (this.#holding.get(`${req.model}\0${host}`) ?? 0) - (host === own ? 1 : 0),
      });
    }
    const opts = { performance: p.rules.performance, random: p.random, roundRobin: p.nextRoundRobin() };
    // Without a queue nothing can wait for a warm host: it runs on the best free one.
    const never = p.rules.queueMax === 0 ? cands.map((c) => c.host) : [];
    const step = holdStep(hold.state, (extra) => decide(cands, { ...req, noWait: [...(extra.noWait ?? []), ...never] }, opts), p.now());
    this.#setHold(req.model, hold, step.state);
    if (step.wakeAt !== undefined) wake?.(step.wakeAt);
    const d = step.decision;
    if (d.kind === 'wait') return undefined;
    if (d.local) {
      const lease = p.slots.tryLease(req.model, req.workload, req.sessionKey ?? req.prefixKey);
      if (!lease) return undefined;
      if (req.chain) this.#routes.record(d.host, req.model, req.chain);
      return { kind: 'local', lease, reason: d.reason, predictedCached: d.predictedCached };
    }
    const routed = req.chain ? this.#routes.record(d.host, req.model, req.chain) : undefined;
    const ended = p.forwards.start(d.host, req.model, req.workload, d.target);
    // The record learns when the forward ended: a digest polled before that shows its slot busy, and it is free now.
    const end = routed ? (how: 'served' | 'refused') => (routed.end(), ended(how)) : ended;
    return { kind: 'remote', host: d.host, reason: d.reason, end, predictedCached: d.predictedCached };
  }

  /** One signed forward of `req` to member `host`, its answer relayed to `res` with `responseHeaders`. */
  async #forward(req: DispatchRequest, host: string, res: http.ServerResponse, signal: AbortSignal, responseHeaders: Record<string, string>): Promise<RunOutcome> {
    const p = this.p;
    const body = (req.forwardBody ??= await forwardBody(req));
    if (p.peers.signsBody) req.forwardSha256 ??= await sha256HexAsync(body);
    return sendForward(
      p.peers,
      {
        host,
        path: req.path,
        body,
        bodySha256: req.forwardSha256 ?? '',
        contentType: req.scan ? 'application/json' : req.contentType,
        stream: req.stream,
        // The executor picks the backend by the same key, so the conversation finds its warm slot there too.
        sessionKey: req.sessionKey ?? req.prefixKey,
        signal,
        responseHeaders,
        streamStallMs: p.rules.streamStallMs,
        writeStallMs: p.rules.writeStallMs,
      },
      res,
    );
  }

  /** Move a request's hold, keeping the count of requests waiting for each host. */
  #setHold(model: string, cell: HoldCell, next: HoldState): void {
    const before = cell.state.hold?.host;
    const after = next.hold?.host;
    cell.state = next;
    if (before === after) return;
    if (before !== undefined) {
      const k = `${model}\0${before}`;
      const n = (this.#holding.get(k) ?? 1) - 1;
      if (n > 0) this.#holding.set(k, n);
      else this.#holding.delete(k);
    }
    if (after !== undefined) {
      const k = `${model}\0${after}`;
      this.#holding.set(k, (this.#holding.get(k) ?? 0) + 1);
    }
  }

  async #run(req: DispatchRequest, where: Exclude<Placement, { kind: 'load-failed' }>, res: http.ServerResponse, signal: AbortSignal, h: ResponseMeta, trace: Trace): Promise<RunOutcome> {
    trace.predictedCached = where.predictedCached;
    trace.cachedTokens = undefined;
    if (where.kind === 'local') {
      trace.executor = this.p.name;
      return this.#runLocal(req, where.lease, res, signal, h, trace);
    }
    const p = this.p;
    let outcome: RunOutcome = { kind: 'aborted' };
    try {
      outcome = await this.#forward(req, where.host, res, signal, { ...h.extra, ...mesh(where.host, h.origin, h.route, h.queuedMs) });
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
        trace.cachedTokens = outcome.cachedTokens;
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
    let run: CacheRun | undefined;
    try {
      const base = lease.backend.url;
      if (!base) return { kind: 'engine-failed', host: p.name, text: `backend ${lease.backend.id} has no address` };
      // What this request asks of the engine's cache, in the executor's record (issue 17): where it runs, what it reuses.
      const generation = isScoredWorkload(req.workload);
      // The entry computed the chain for pricing; a forward's executor computes the same chain from the body it received.
      const chain = generation && req.scan && p.cache ? (req.chain ??= prefixChain(req.body, req.scan, req.path, { hygiene: this.#hygiene.on })) : undefined;
      run = chain && chain.length ? p.cache!.begin(lease.backend, chain) : undefined;
      if (run && trace.predictedCached === undefined) trace.predictedCached = run.predicted;
      let { body, stripUsage } = await engineBody(req, run?.idSlot);
      let path = req.path;
      let translate: AnswerTranslator | undefined;
      const responseHeaders = { ...h.extra, ...mesh(p.name, h.origin, h.route, h.queuedMs) };
      if (req.path === RESPONSES_PATH || req.path === MESSAGES_PATH) {
        const plan =
          req.path === RESPONSES_PATH ? planResponses(req, lease.target.descriptor, this.#hygiene) : planMessages(req, lease.target.descriptor, lease.backend.info.context, this.#hygiene);
        if (plan.kind === 'refuse') {
          // The executor's own answer about the request itself: unmarked, so it reaches the client once.
          sendError(res, plan.error, responseHeaders);
          trace.outcome = String(plan.error.status);
          return { kind: 'answered', status: plan.error.status };
        }
        if (plan.kind === 'translate') {
          ({ path, body, translate } = plan);
          if (plan.omittedTools.length) responseHeaders[RES_OMITTED_TOOLS] = plan.omittedTools.join(', ').slice(0, 1024);
        }
      }
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
        cachedOut: generation,
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
        case 'done': {
          trace.firstContentAt = result.firstContentAt;
          trace.outcome = String(result.status);
          trace.cachedTokens = result.cachedTokens;
          trace.promptTokens = result.promptTokens ?? (result.body ? usageOfBody(result.body).promptTokens : undefined);
          run?.finish({ processed: true, promptTokens: trace.promptTokens, cachedTokens: result.cachedTokens });
          if (generation && trace.promptTokens !== undefined) {
            const cached = Math.min(trace.promptTokens, result.cachedTokens ?? trace.predictedCached ?? 0);
            p.metrics.promptTokens.inc({ model: req.model, host: p.name, cache: 'cached' }, cached);
            p.metrics.promptTokens.inc({ model: req.model, host: p.name, cache: 'uncached' }, trace.promptTokens - cached);
          }
          if (generation && result.status < 300) {
            // Score measurement subtracts the tokens the engine served from its cache; when it gives no count, the prediction.
            const m = measure(lease.grantedAt, result, trace.predictedCached);
            if (m) {
              p.recordScore(req.model, m.promptTokens, m.ttftMs);
              p.metrics.ttft.observe({ model: req.model }, m.ttftMs / 1000);
            }
          }
          return { kind: 'answered', status: result.status, firstContentAt: result.firstContentAt };
        }
      }
      // Every kind of result returned above.
      const none: never = result;
      return none;
    } finally {
      // Not answered (refused, aborted, broken): the slot keeps at most what the prediction said it reused.
      run?.finish({ processed: false });
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
      predicted_cached: trace.predictedCached ?? null,
      cached_tokens: trace.cachedTokens ?? null,
    });
    if (trace.executor !== null && trace.predictedCached !== undefined && trace.cachedTokens !== undefined && trace.known && trace.route !== 'forwarded') {
      // How well routing knows the caches: the entry's prediction against the engine's count. A forward's executor
      // keeps its own (better informed) prediction in its feed, but the metric measures entry nodes only.
      const labels = { model: req.model, host: trace.executor };
      p.metrics.cachePredictionError.observe(labels, Math.abs(trace.predictedCached - trace.cachedTokens));
      p.metrics.cachedTokens.inc({ ...labels, source: 'predicted' }, trace.predictedCached);
      p.metrics.cachedTokens.inc({ ...labels, source: 'engine' }, trace.cachedTokens);
    }
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
