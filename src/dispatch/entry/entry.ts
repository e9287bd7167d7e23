/**
 * The entry: a client's request entering at this node (SPEC section 9).
 * Resolve an alias, walk the prompt once (its prefix chain and prefix key),
 * check that someone can serve it, place it (now, or after waiting in the
 * queue, or for a warm full host while that pays), then run it here (the
 * executor) or forward it once to the chosen member, retry what is retried,
 * and record what happened.
 */
import type http from 'node:http';
import { chainClaims } from '../../prompt/chain-claim.ts';
import { encodeClaims } from '../../security/claims.ts';
import { ANONYMOUS_FLOW, type Flow } from '../../queue/fair.ts';
import { bandClaim, waitClaim } from '../../queue/forward-claims.ts';
import { sendForward } from '../../forward/send.ts';
import { ApiError, errors } from '../../http/errors.ts';
import type { Gone } from '../../http/gone.ts';
import { RES_ALIAS, RES_MODEL } from '../../http/viiwork-headers.ts';
import { walkPrompt } from '../../prompt/chain.ts';
import { decide } from '../../route/decide.ts';
import { holdStep, NO_HOLD, type HoldState } from '../../route/hold.ts';
import type { Candidate, HostView, RouteReason } from '../../route/types.ts';
import { warmCandidates } from '../../route/warmth.ts';
import { expectedLoss, returnChance, type ReturnChance } from '../../route/slots.ts';
import { evictClaim, slotClaim } from '../evict-claim.ts';
import { sha256HexAsync } from '../../security/signing.ts';
import { allowsModel } from '../../keys/access.ts';
import { isScoredWorkload, promptDialectOf } from '../../workloads/workloads.ts';
import { cutEnding, Splice } from '../../survive/index.ts';
import { survivalClaims } from '../survival-claims.ts';
import { moveClaim, moveHint, type MoveClaim } from '../../survive/move-plan.ts';
import type { Executor } from '../execute/execute.ts';
import type { Hygiene } from '../execute/tool-order.ts';
import { forwardBody } from '../execute/upstream-body.ts';
import type { DispatchPorts } from '../ports.ts';
import { candidatesFor, checkServable, drainedAway, failureError, onlyLoading, queuedBeforeDrain, routeLeft } from '../servable.ts';
import { meshHeaders, newTrace, recordRequest, type ResponseMeta, type Trace } from '../trace.ts';
import type { DispatchRequest, Reservation, Routed, RoutedRequest, RunOutcome } from '../types.ts';
import { aliasesOf, resolveModelName } from './alias.ts';
import { flowOf } from './flow.ts';
import { continuationRequest, survivalCall, survivalOf } from './go-on.ts';
import { prefixKeyOf } from './prefix.ts';
import { PlacedSlots } from './placed-slots.ts';
import { RecentRoutes } from './recent-routes.ts';
import { INITIAL, step, type EntryAction, type EntryEvent, type EntryState } from './steps.ts';

/**
 * The parsed request with its routed record over it. Object.assign, not `{ ...req, ...routed }`: V8 (Node 20) copies a
 * second spread into the first one's cloned object property by property on a slow path, about 5 µs for these two
 * (bench/results and docs/benchmarks-history.md, "Object spreads on the request path").
 */
function routedRequest(req: DispatchRequest, routed: Routed): RoutedRequest {
  return Object.assign({}, req, routed);
}

/** Without observed turn gaps: the prior (route/slots.ts). */
const returnChance0: ReturnChance = (idleMs) => returnChance(idleMs, []);

/** One request's wait for a warm host (route/hold.ts), shared by its attempts. */
interface HoldCell {
  state: HoldState;
}

/**
 * A keyed (or batch) request's flow, which every lease here shows the gate (queue/gate.ts), and whether it may wait at a
 * full member rather than here (interactive work only), before `deadline`. Absent without keys: nothing is shown and
 * nothing waits anywhere but here, as before.
 */
interface LineCell {
  flow: Flow;
  deadline: number;
  waitThere: boolean;
}

/** What a wait at a member leaves for the answer to come back in before the entry's own deadline. */
const LINE_MARGIN_MS = 250;

/** A member whose line was full (it refused a forward that could wait) is not sent one to wait for this long. */
const LINE_FULL_MS = 500;

/** The body members get, made once per request (signing and retries reuse it), its SHA-256, and its claims. */
interface ForwardCell {
  body?: Buffer;
  sha256?: string;
  /** Encoded (security/claims.ts); null: none to carry. */
  claims?: string | null;
  /** The request's own record: its timeline id and trace context go with the claims. */
  trace?: Trace;
}

export class Entry {
  /** What this node routed where lately: a host's cache until its next digest (SPEC 9.6). */
  readonly #routes: RecentRoutes;
  /** The slots this node's forwards took on members, as priced: their digests show them only from the next poll. */
  readonly #placed: PlacedSlots;
  /** model \0 host → requests of this node waiting for that host's warm slot. */
  readonly #holding = new Map<string, number>();
  /** model \0 host → this node's forwards waiting in that member's line (queue/gate.ts). */
  readonly #lineWaits = new Map<string, number>();
  /** model \0 host → until when that member's line is taken as full (clock ms). */
  readonly #lineFull = new Map<string, number>();
  /**
   * model \0 host → when that member sent a forward back because its slot would evict a live conversation (clock ms):
   * until a report polled after it, that member's idle slots are priced as live (dispatch/evict-claim.ts).
   */
  readonly #crowded = new Map<string, number>();

  constructor(
    private readonly p: DispatchPorts,
    private readonly hygiene: Hygiene,
    private readonly executor: Executor,
  ) {
    this.#routes = new RecentRoutes(() => p.now());
    this.#placed = new PlacedSlots(() => p.now());
  }

  async serveClient(req: DispatchRequest, res: http.ServerResponse, signal: Gone): Promise<void> {
    const trace = newTrace(null, 'not-routed');
    if (this.p.tracing) trace.span = this.p.tracing.begin(req.traceparent, trace.startedAt);
    const workload = req.endpoint.workload;
    let routed: Routed = { model: req.model, workload };
    try {
      // One snapshot serves alias resolution, the up-front checks and the first routing attempt.
      let hosts = this.p.snapshot();
      const warming = this.p.warming();
      if (warming && !this.#known(req, hosts)) {
        // A node that has just started may not have heard from the member that serves this yet (SPEC section 4).
        await warming;
        hosts = this.p.snapshot();
      }
      try {
        routed = this.#route(req, hosts);
        await this.#serve(survivalOf(routedRequest(req, routed)), res, signal, trace, hosts);
      } catch (err) {
        // Refused before any waiting (404, 400, 503) on reports that may be old: poll those members once, then
        // decide again on what they say now (SPEC section 7's first-request poll).
        if (trace.known || !(err instanceof ApiError) || !(await this.p.refresh?.(req.pin))) throw err;
        hosts = this.p.snapshot();
        routed = this.#route(req, hosts);
        await this.#serve(survivalOf(routedRequest(req, routed)), res, signal, trace, hosts);
      }
    } catch (err) {
      trace.outcome = err instanceof ApiError ? String(err.status) : 'error';
      throw err;
    } finally {
      recordRequest(this.p, routed, req.model, this.p.name, trace);
    }
  }

  #serve(rr: RoutedRequest, res: http.ServerResponse, signal: Gone, trace: Trace, hosts: readonly HostView[]): Promise<void> {
    return rr.endpoint.action === 'count_tokens' ? this.#countTokens(rr, res, signal, trace, hosts) : this.#place(rr, res, signal, trace, hosts);
  }

  /** What routing learns of the request: its model (an alias resolved), and for scored work one bounded walk of the prompt. */
  #route(req: DispatchRequest, hosts: readonly HostView[]): Routed {
    const workload = req.endpoint.workload;
    const resolved = resolveModelName(aliasesOf(this.p.aliases, req.caller), req.model, workload, hosts);
    // SPEC section 12: an alias cannot take a key to a model outside its scope. The refusal names the alias the
    // client sent, never the target it may not know of (issue 46).
    if (resolved !== undefined && req.caller && !allowsModel(req.caller, resolved)) throw errors.modelNotAllowed(req.caller.name, req.model);
    const named = resolved !== undefined ? { model: resolved, alias: req.model, workload } : { model: req.model, workload };
    if (!req.scan || !isScoredWorkload(workload)) return named;
    // One bounded walk gives the chain pricing uses and the prefix key.
    const walk = walkPrompt(req.body, req.scan, promptDialectOf(req.endpoint), { hygiene: this.hygiene.on });
    return Object.assign(
      named,
      { chain: walk.chain },
      walk.head >= 0 ? { chainHead: walk.head } : undefined,
      walk.complete ? { pricedTokens: walk.chain[walk.chain.length - 1].tokens } : undefined,
      req.sessionKey === undefined && this.p.rules.prefixAffinity ? { prefixKey: prefixKeyOf(walk) } : undefined,
    );
  }

  /**
   * count_tokens, without a slot or the queue (SPEC section 4): with this
   * node's own tokenizer for the model; else by the member nearest that
   * serves it healthy, fresh reports first (its engine's tokenizer, one
   * signed forward); else, or when that member does not answer, the estimate.
   */
  async #countTokens(rr: RoutedRequest, res: http.ServerResponse, signal: Gone, trace: Trace, hosts: readonly HostView[]): Promise<void> {
    const cands = candidatesFor(this.p, rr, hosts);
    checkServable(rr, hosts, cands);
    trace.known = true;
    trace.route = 'local';
    const extra = aliasHeaders(rr);
    const tokenizer = this.p.tokenizer?.(rr.model);
    // A fresh report first, else a stale one (a member polled in the background, this node not routing to it yet):
    // a count is advice, and a member that does not answer costs only the fallback to the estimate.
    const remote = tokenizer ? undefined : cands.filter((c) => !c.local && c.healthy).sort((a, b) => Number(b.fresh) - Number(a.fresh) || a.rttMs - b.rttMs)[0];
    if (remote) {
      const o = await this.#forward(rr, {}, remote.host, res, signal, Object.assign({}, extra, meshHeaders(remote.host, this.p.name, 'local', 0)));
      if (o.kind === 'answered' || o.kind === 'aborted') {
        trace.executor = remote.host;
        return;
      }
    }
    // Counted here (SPEC 4: every response names the node that answered it).
    await this.executor.countHere(rr, res, signal, Object.assign({}, extra, meshHeaders(this.p.name, this.p.name, 'local', 0)));
  }

  /** `from`: where a continuation starts (SPEC 13): the host it was cut from is not tried again. */
  async #place(rr: RoutedRequest, res: http.ServerResponse, signal: Gone, trace: Trace, hosts: readonly HostView[], from: EntryState = INITIAL): Promise<void> {
    const p = this.p;
    // The candidates of the up-front checks also serve the first routing attempt.
    let first: Candidate[] | undefined = candidatesFor(p, rr, hosts);
    checkServable(rr, hosts, first);
    trace.known = true;
    const arrived = p.now();
    // An on-demand model nobody has loaded: a host is asked to load it, and the request waits up to load_wait.
    // (Only when nothing capable is healthy: the hot path of a loaded model never comes here.)
    const forLoad =
      p.loads && !first.some((c) => c.healthy) && first.some((c) => c.available || c.loading)
        ? await p.loads.ensure(rr.model, rr.workload, 'request', `a ${rr.workload} request entering ${p.name}`, hosts, rr.pin)
        : false;
    // A batch request may wait longer before its 429 (SPEC section 12).
    const waitMs = rr.priority === 'batch' ? (p.rules.batchQueueTimeoutMs ?? p.rules.queueTimeoutMs) : p.rules.queueTimeoutMs;
    const deadline = arrived + (forLoad ? Math.max(waitMs, p.loads!.waitMs) : waitMs);
    const flow = flowOf(rr);
    // Only interactive work waits at a member: batch work is patient, and waits at its entry as before.
    const line: LineCell | undefined = flow !== ANONYMOUS_FLOW ? { flow, deadline, waitThere: flow.band === 'interactive' && (p.rules.forwardWaitMs ?? 0) > 0 } : undefined;
    const queue = p.queues.get(rr.model, rr.workload);
    const rules = { queueMax: p.rules.queueMax, forwardRetry: p.rules.forwardRetry };
    const extra = aliasHeaders(rr);
    const fwd: ForwardCell = { trace };
    let state: EntryState = from;
    let reserved: Reservation | undefined;
    let event: EntryEvent = { kind: 'arrived', queueDepth: queue.depth };
    const hold: HoldCell = { state: NO_HOLD };
    try {
      for (;;) {
        let action: EntryAction;
        [state, action] = step(state, event, rules);
        switch (action.kind) {
          case 'try': {
            const failed = state.failed;
            reserved = this.#attempt(rr, arrived, failed, hold, line, undefined, first && { cands: first, hosts });
            first = undefined;
            event = { kind: 'tried', placed: reserved !== undefined, routeLeft: reserved !== undefined || routeLeft(p, rr, failed) };
            break;
          }
          case 'wait': {
            const failed = state.failed;
            const out = queue.enqueue((wake) => this.#attempt(rr, arrived, failed, hold, line, wake) ?? this.#loadFailed(rr, arrived), { signal, deadline, front: action.front, flow });
            p.waiting();
            const outcome = await out;
            if (outcome.ok) {
              reserved = outcome.value;
              p.metrics.queueWait.observe({}, outcome.queuedMs / 1000);
            }
            event = { kind: 'waited', how: outcome.ok ? 'placed' : outcome.reason };
            break;
          }
          case 'run': {
            const where = reserved!;
            reserved = undefined;
            if (where.kind === 'fail') throw where.error;
            const queuedMs = state.queued ? Math.max(1, p.now() - arrived) : 0;
            const route: RouteReason = state.queued ? 'queued' : where.reason;
            trace.queuedMs = queuedMs;
            trace.route = route;
            trace.placedAt = performance.now();
            trace.cands = where.cands;
            // A forward may be sent back to be priced again (its eviction claim) while a retry is left and it is not pinned.
            const mayReprice = state.retries < rules.forwardRetry && rr.pin === undefined;
            const outcome = await this.#run(rr, fwd, where, res, signal, { origin: p.name, route, queuedMs, extra }, trace, mayReprice);
            event = { kind: 'ran', outcome };
            break;
          }
          case 'end':
            if (trace.outcome === 'ok' && signal.aborted) trace.outcome = 'aborted';
            return;
          case 'fail':
            if (action.failure === 'queue-timeout' && forLoad && !candidatesFor(p, rr).some((c) => c.healthy)) throw errors.loadTimeout(rr.model, deadline - arrived);
            if (action.failure === 'queue-timeout' && onlyLoading(p, rr)) throw errors.modelLoading(rr.model, p.rules.queueTimeoutMs);
            if (action.failure === 'queue-timeout') {
              // Nothing serves it, nothing loads it, and every ask to load it was refused while it waited: say that, not "busy".
              const why = !candidatesFor(p, rr).some((c) => c.healthy || c.loading) ? p.loads?.noRoom(rr.model, arrived) : undefined;
              if (why !== undefined) throw errors.noRoomToLoad(rr.model, waitMs, why);
            }
            throw failureError(action.failure, rr.model, waitMs, state.engineError);
        }
      }
    } finally {
      // However it ends, it waits for no host any more.
      this.#setHold(rr.model, hold, NO_HOLD);
    }
  }

  /** Can this request be placed on what the snapshot knows (its model or alias, for its workload, on its pinned host)? */
  #known(req: DispatchRequest, hosts: readonly HostView[]): boolean {
    try {
      const workload = req.endpoint.workload;
      const r = { model: resolveModelName(aliasesOf(this.p.aliases, req.caller), req.model, workload, hosts) ?? req.model, workload, pin: req.pin };
      checkServable(r, hosts, candidatesFor(this.p, r, hosts));
      return true;
    } catch {
      return false;
    }
  }

  /** The load this request waited for failed: a reservation that ends it with 503 (undefined: keep waiting). */
  #loadFailed(rr: RoutedRequest, arrived: number): Reservation | undefined {
    const text = this.p.loads?.failure(rr.model, arrived);
    return text === undefined ? undefined : { kind: 'fail', error: errors.loadFailed(rr.model, text) };
  }

  /**
   * One routing attempt: price, decide and reserve (a local lease, or a
   * forward counted in the book), or wait — for a warm full host while that
   * pays (`hold`; `wake` tries again when its time is up), else for any slot.
   */
  #attempt(
    rr: RoutedRequest,
    arrived: number,
    failed: readonly string[],
    hold: HoldCell,
    line: LineCell | undefined,
    wake?: (at: number) => void,
    known?: { cands: Candidate[]; hosts: readonly HostView[] },
  ): Reservation | undefined {
    const p = this.p;
    const hosts = known?.hosts ?? p.snapshot();
    let cands = known?.cands ?? candidatesFor(p, rr, hosts);
    if (cands.length === 0) cands = queuedBeforeDrain(p, rr, hosts, arrived);
    const drained = cands.some((c) => rr.pin === undefined || c.host === rr.pin) ? undefined : drainedAway(rr, hosts);
    if (drained) return { kind: 'fail', error: drained };
    if (failed.length) cands = cands.filter((c) => !failed.includes(c.host));
    if (rr.chain || this.#holding.size > 0) {
      const own = hold.state.hold?.host;
      cands = warmCandidates(cands, {
        hosts,
        model: rr.model,
        workload: rr.workload,
        chain: rr.chain ?? [],
        memory: this.#routes,
        holding: (host) => (this.#holding.get(`${rr.model}\0${host}`) ?? 0) - (host === own ? 1 : 0),
        now: p.now(),
        chance: p.returnChance ?? returnChance0,
        placed: (host, model, since) => this.#placed.since(host, model, since),
        ...(this.#crowded.size > 0 ? { crowded: (host: string, polledAt: number) => this.#isCrowded(rr.model, host, polledAt) } : {}),
      });
    }
    const opts = { performance: p.rules.performance, random: p.random, roundRobin: p.nextRoundRobin() };
    // Without a queue nothing can wait for a warm host: it runs on the best free one.
    const never = p.rules.queueMax === 0 ? cands.map((c) => c.host) : [];
    const step = holdStep(
      hold.state,
      (extra) => {
        const noWait = never.length ? [...(extra.noWait ?? []), ...never] : extra.noWait;
        // No host to leave out (the usual case): the request as it is, not a copy of it.
        return decide(cands, noWait?.length ? { ...rr, noWait } : rr, opts);
      },
      p.now(),
    );
    this.#setHold(rr.model, hold, step.state);
    if (step.wakeAt !== undefined) wake?.(step.wakeAt);
    const d = step.decision;
    if (d.kind === 'wait') return line?.waitThere ? this.#waitThere(rr, d.host, cands, line, hold.state.hold?.until ?? Infinity) : undefined;
    // Run away from a member holding more of this conversation: the executor may take its slot (SPEC 13; moveHint compares digests' tokens).
    const move = rr.chain?.length ? moveHint({ chain: rr.chain, model: rr.model, workload: rr.workload, to: { host: d.host, cached: d.predictedCached }, hosts }) : undefined;
    if (d.local) {
      const lease = p.slots.tryLease(rr.model, rr.workload, rr.sessionKey ?? rr.prefixKey, line?.flow);
      if (!lease) return undefined;
      if (rr.chain) this.#routes.record(d.host, rr.model, rr.chain);
      return { kind: 'local', lease, reason: d.reason, predictedCached: d.predictedCached, cands, ...(move ? { move } : {}) };
    }
    const routed = rr.chain ? this.#routes.record(d.host, rr.model, rr.chain) : undefined;
    const placed = rr.chain && d.slot !== undefined ? this.#placed.record(d.host, rr.model, d.slot, rr.chain, rr.chainHead) : undefined;
    const ended = p.forwards.start(d.host, rr.model, rr.workload, d.target);
    // The record learns when the forward ended: a digest polled before that shows its slot busy, and it is free now.
    const end = routed || placed ? (how: 'served' | 'refused', slot?: number) => (routed?.end(how), placed?.end(how, slot), ended(how)) : ended;
    // An interactive keyed request sent where a slot looked free may still wait there if it was taken meanwhile: the
    // member then orders it with its own waiters instead of refusing it back into a race for the next one.
    const waitUntil = line?.waitThere && line.deadline - LINE_MARGIN_MS - p.now() >= LINE_MARGIN_MS ? { waitUntil: line.deadline - LINE_MARGIN_MS } : {};
    // The slot priced there and its eviction go with the forward: the executor takes that slot, or sends it back if its slots say otherwise.
    const priced = d.slot !== undefined ? { priced: { slot: d.slot, evict: expectedLoss(d.evicted) } } : {};
    return { kind: 'remote', host: d.host, reason: d.reason, end, predictedCached: d.predictedCached, cands, ...waitUntil, ...priced, ...(move ? { move } : {}) };
  }

  /** Is `host` priced as crowded for `model` (it sent back a forward since the report polled at `polledAt`)? */
  #isCrowded(model: string, host: string, polledAt: number): boolean {
    const k = `${model}\0${host}`;
    const at = this.#crowded.get(k);
    if (at === undefined) return false;
    if (polledAt > at) {
      this.#crowded.delete(k);
      return false;
    }
    return true;
  }

  /**
   * Nothing is free for a keyed request: it may wait in a full member's line instead of here (queue/gate.ts), so that
   * member's next slot goes to whoever ranks first across every entry node, not to whoever hears of it first. The member
   * the decision waits for (a warm one, or the pin), else the one where this node waits least per slot (then the soonest
   * release). Never this node (its own queue asks the same gate), nor a member whose line was just full, and no more of
   * this node's waits at a member than it has slots. A member marked full for plain forwards (it refused one of this
   * node's batch forwards, say) is still waited at: full is what a wait is for.
   */
  #waitThere(rr: RoutedRequest, named: string | undefined, cands: readonly Candidate[], line: LineCell, holdUntil: number): Reservation | undefined {
    const p = this.p;
    // A warm host is waited for only while that pays (route/hold.ts), and no wait outlasts the request's own deadline.
    const until = Math.min(line.deadline - LINE_MARGIN_MS, holdUntil);
    if (until - p.now() < LINE_MARGIN_MS) return undefined;
    const now = p.now();
    const waits = (host: string) => this.#lineWaits.get(`${rr.model}\0${host}`) ?? 0;
    const full = (host: string) => (this.#lineFull.get(`${rr.model}\0${host}`) ?? -Infinity) > now;
    const room = (c: Candidate) => !c.local && c.fresh && c.healthy && !full(c.host) && waits(c.host) < (c.slots ?? 1);
    const want = named ?? rr.pin;
    let pick: Candidate | undefined;
    if (want !== undefined) pick = cands.find((c) => c.host === want && room(c));
    else {
      const load = (c: Candidate) => waits(c.host) / (c.slots ?? 1);
      for (const c of cands) if (room(c) && (!pick || load(c) < load(pick) || (load(c) === load(pick) && (c.releaseMs ?? Infinity) < (pick.releaseMs ?? Infinity)))) pick = c;
    }
    if (!pick) return undefined;
    const host = pick.host;
    const k = `${rr.model}\0${host}`;
    this.#lineWaits.set(k, waits(host) + 1);
    const routed = rr.chain ? this.#routes.record(host, rr.model, rr.chain) : undefined;
    const ended = p.forwards.start(host, rr.model, rr.workload, pick.bestTarget);
    const end = (how: 'served' | 'refused') => {
      const n = waits(host) - 1;
      if (n > 0) this.#lineWaits.set(k, n);
      else this.#lineWaits.delete(k);
      routed?.end(how);
      ended(how);
    };
    return { kind: 'remote', host, reason: 'queued', end, predictedCached: pick.cached, cands, waitUntil: until };
  }

  /** One signed forward of the request to member `host`, its answer relayed to `res` with `responseHeaders`; `waitUntil`: it may wait there for a slot until then. */
  async #forward(rr: RoutedRequest, fwd: ForwardCell, host: string, res: http.ServerResponse, signal: Gone, responseHeaders: Record<string, string>, waitUntil?: number, priced?: { slot: number; evict?: number }, move?: MoveClaim): Promise<RunOutcome> {
    const p = this.p;
    const body = (fwd.body ??= await forwardBody(rr));
    if (p.peers.signsBody) fwd.sha256 ??= await sha256HexAsync(body);
    // The executor reads the chain walked here instead of walking the prompt again, and accounts and scopes by the key's name (SPEC 12).
    // With them, the timeline id (the executor keeps its part of the request under it) and the trace context.
    const t = fwd.trace;
    if (fwd.claims === undefined)
      fwd.claims = encodeClaims(Object.assign(chainClaims(rr), { key: rr.caller?.name, out: rr.caller && (rr.heldOutput ?? rr.maxTokens) !== undefined ? String(rr.heldOutput ?? rr.maxTokens) : undefined, band: bandClaim(rr.priority), req: t && `${p.name}:${t.id}`, traceparent: t?.span?.traceparent }, survivalClaims(rr.survive))) ?? null;
    // A wait at the member is this attempt's alone: the claim says how long is left of it now.
    const wait = waitUntil === undefined ? undefined : waitClaim(Math.min(p.rules.forwardWaitMs ?? 0, waitUntil - p.now()));
    // So are the slot and eviction priced at this host (dispatch/evict-claim.ts) and the member holding more of the prompt.
    const attempt = encodeClaims({ wait, evict: evictClaim(priced?.evict), slot: slotClaim(priced?.slot), move: moveClaim(move) });
    const claims = fwd.claims && attempt ? `${fwd.claims};${attempt}` : (fwd.claims ?? attempt);
    return sendForward(
      p.peers,
      {
        host,
        path: rr.path,
        body,
        bodySha256: fwd.sha256 ?? '',
        claims,
        contentType: rr.scan ? 'application/json' : rr.contentType,
        stream: rr.stream,
        // The executor picks the backend by the same key, so the conversation finds its warm slot there too.
        sessionKey: rr.sessionKey ?? rr.prefixKey,
        signal,
        responseHeaders,
        streamStallMs: p.rules.streamStallMs,
        writeStallMs: p.rules.writeStallMs,
        ...survivalCall(rr),
      },
      res,
    );
  }

  /**
   * A stream cut after its first byte (SPEC 13): the client's request, with the answer it holds as the assistant's
   * start, placed once more on another host, and that host's stream spliced into the client's. At most once a request
   * (a continuation is never handed back); a stream that cannot be continued, or whose continuation finds no host,
   * ends with its API's error event as before.
   */
  async #goOn(rr: RoutedRequest, cut: Extract<RunOutcome, { kind: 'cut' }>, res: http.ServerResponse, signal: Gone, trace: Trace): Promise<RunOutcome> {
    const p = this.p;
    const t = rr.survive?.transcript;
    const broken: RunOutcome = { kind: 'answered', status: 0 };
    trace.outcome = 'broken';
    const end = (why: string, outcome: 'failed' | 'not_continued'): RunOutcome => {
      cut.settle?.();
      p.metrics.streamContinuations.inc({ model: rr.model, outcome });
      p.log.info('cut stream not continued', { model: rr.model, host: cut.host, why });
      if (!res.destroyed) res.end(t ? cutEnding(t, cut.detail) : '');
      return broken;
    };
    if (!t || rr.survive?.splice) return end('a continuation is not continued again', 'not_continued');
    if (signal.aborted || res.destroyed) {
      cut.settle?.();
      return { kind: 'aborted' };
    }
    const plan = continuationRequest(rr, t);
    if (!plan.ok) return end(plan.why, 'not_continued');
    const req = plan.req;
    let cont: RoutedRequest;
    const splice = new Splice(t, rr.clientWantsUsage);
    try {
      cont = Object.assign(routedRequest(req, this.#route(req, p.snapshot())), { survive: { handBack: false, splice, carried: t.tokens } });
    } catch (err) {
      return end(err instanceof Error ? err.message : String(err), 'failed');
    }
    trace.continued = { from: cut.host, tokens: t.tokens };
    p.log.info('continuing a cut stream', { model: rr.model, host: cut.host, tokens: t.tokens, why: cut.detail });
    const ttft = trace.firstContentAt;
    try {
      // Not on the host it was cut from; with no other, it fails at once with the cut's own words.
      await this.#place(cont, res, signal, trace, p.snapshot(), { ...INITIAL, failed: [cut.host], engineError: cut.detail });
    } catch (err) {
      // It ran nowhere: the cut run is what the key is charged.
      cut.settle?.();
      // The client is told why its stream broke first, then why it did not go on.
      const why = err instanceof ApiError && err.status === 502 ? 'no other host could continue it' : `not continued: ${err instanceof Error ? err.message : String(err)}`;
      if (!res.destroyed && !res.writableEnded) res.end(splice.error(`${cut.detail} (${why})`));
    } finally {
      // The client's first token came before the cut.
      if (ttft !== undefined) trace.firstContentAt = ttft;
    }
    if (!res.destroyed && !res.writableEnded) res.end(splice.error(`${cut.detail} (its continuation ended early)`));
    const ok = splice.completed;
    p.metrics.streamContinuations.inc({ model: rr.model, outcome: ok ? 'continued' : 'failed' });
    if (!ok) trace.outcome = 'broken';
    else if (signal.aborted) trace.outcome = 'aborted';
    return ok ? { kind: 'answered', status: 200 } : broken;
  }

  #noteLineFull(model: string, host: string): void {
    const now = this.p.now();
    for (const [k, until] of this.#lineFull) if (until <= now) this.#lineFull.delete(k);
    this.#lineFull.set(`${model}\0${host}`, now + LINE_FULL_MS);
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

  /** Run where it was reserved: here (the executor), or one forward to the member. */
  async #run(rr: RoutedRequest, fwd: ForwardCell, where: Exclude<Reservation, { kind: 'fail' }>, res: http.ServerResponse, signal: Gone, h: ResponseMeta, trace: Trace, mayReprice: boolean): Promise<RunOutcome> {
    trace.predictedCached = where.predictedCached;
    trace.cachedTokens = undefined;
    if (where.kind === 'local') {
      trace.executor = this.p.name;
      const o = await this.executor.run(where.move ? Object.assign({}, rr, { move: where.move }) : rr, where.lease, res, signal, h, trace);
      return o.kind === 'cut' ? this.#goOn(rr, o, res, signal, trace) : o;
    }
    const p = this.p;
    let outcome: RunOutcome = { kind: 'aborted' };
    try {
      trace.forwardAt = performance.now();
      const priced = where.priced && (mayReprice && where.waitUntil === undefined ? where.priced : { slot: where.priced.slot });
      outcome = await this.#forward(rr, fwd, where.host, res, signal, Object.assign({}, h.extra, meshHeaders(where.host, h.origin, h.route, h.queuedMs)), where.waitUntil, priced, where.move);
    } finally {
      // Ended either way; the end of a served forward frees its slot in this node's view at once and wakes the queues.
      where.end(outcome.kind === 'refused' || outcome.kind === 'engine-failed' ? 'refused' : 'served', outcome.kind === 'answered' ? outcome.slot : undefined);
    }
    if (outcome.kind === 'cut') {
      trace.executor = where.host;
      p.metrics.forwards.inc({ outcome: 'broken' });
      p.queues.pumpAll();
      return this.#goOn(rr, outcome, res, signal, trace);
    }
    if (outcome.kind === 'refused' || outcome.kind === 'engine-failed') {
      // A forward that waited there as long as it could was not refused: the member stays open to the next wait. One that
      // could have waited but was refused found the member's line full: no more waits are sent there for a moment.
      // One sent back for its eviction had a slot there: the member is not full, its idle slots are live (priced so until its next report).
      if (outcome.kind === 'refused' && outcome.by === 'evicts') this.#crowded.set(`${rr.model}\0${where.host}`, p.now());
      else if (outcome.kind === 'engine-failed' || outcome.by !== 'waited') p.forwards.refuse(where.host, rr.model, rr.workload);
      if (outcome.kind === 'refused' && outcome.by === 'full' && where.waitUntil !== undefined) this.#noteLineFull(rr.model, where.host);
      p.metrics.forwards.inc({ outcome: outcome.kind === 'refused' ? 'refused' : 'engine-failed' });
      p.log.debug('forward refused', { host: where.host, model: rr.model, outcome: outcome.kind, detail: outcome.kind === 'refused' ? outcome.detail : outcome.text });
    } else {
      trace.executor = where.host;
      if (outcome.kind === 'answered') {
        trace.firstContentAt = outcome.firstContentAt;
        trace.cachedTokens = outcome.cachedTokens;
        if (outcome.moved) trace.move = outcome.moved;
        trace.outcome = outcome.status ? String(outcome.status) : 'broken';
      } else trace.outcome = 'aborted';
      p.metrics.forwards.inc({ outcome: outcome.kind === 'answered' ? (outcome.status ? 'done' : 'broken') : 'aborted' });
    }
    p.queues.pumpAll();
    return outcome;
  }
}

/** An alias answers with the name it was asked by and the model it ran as (SPEC section 4). */
function aliasHeaders(r: Routed): Record<string, string> {
  return r.alias !== undefined ? { [RES_ALIAS]: r.alias, [RES_MODEL]: r.model } : {};
}
