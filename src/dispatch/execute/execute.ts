/**
 * The executor: a request that runs on this node, whether it entered here
 * or came as a verified forward from a member. It holds a lease on a local
 * slot, tells the engine's cache model what the prompt reuses (and, for
 * llama-server, which slot it goes to), builds the body the engine gets
 * (the dialect's plan: as sent, or translated to chat completions), relays
 * the answer, and measures it (scores, cached tokens, metrics).
 */
import type http from 'node:http';
import type { Sender } from '../../forward/verify.ts';
import { chainOfClaim, headOfClaim } from '../../prompt/chain-claim.ts';
import type { CacheRun } from '../../engines/cache-book.ts';
import type { Lease } from '../../engines/targets.ts';
import type { Gone } from '../../http/gone.ts';
import { usageOfBody } from '../../http/engine-usage.ts';
import { ApiError, errors, sendError, sendJson } from '../../http/errors.ts';
import { relay, upstreamErrorText, type AnswerTranslator } from '../../http/relay.ts';
import { RES_MOVED, RES_OMITTED_TOOLS, RES_SLOT } from '../../http/viiwork-headers.ts';
import { CHAIN_LINKS_MAX, CHAIN_WALK_MAX, walkPrompt } from '../../prompt/chain.ts';
import { replyLink } from '../../prompt/reply.ts';
import type { PrefixChain } from '../../prompt/held.ts';
import { errorShapeOf, isScoredWorkload, promptDialectOf } from '../../workloads/workloads.ts';
import type { DispatchPorts } from '../ports.ts';
import { candidatesFor, checkServable } from '../servable.ts';
import { meshHeaders, newTrace, recordRequest, type ResponseMeta, type Trace } from '../trace.ts';
import type { DispatchRequest, RoutedRequest, RunOutcome } from '../types.ts';
import { isTimelineOf } from '../timeline.ts';
import { ANONYMOUS_FLOW } from '../../queue/fair.ts';
import { waitOfClaim } from '../../queue/forward-claims.ts';
import { flowOf } from '../entry/flow.ts';
import { evictOfClaim, slotOfClaim } from '../evict-claim.ts';
import { evictsUnpriced, expectedLoss } from '../../route/slots.ts';
import { measure } from './measure.ts';
import { countTokens, planMessages } from './messages.ts';
import { planResponses } from './responses.ts';
import type { Hygiene } from './tool-order.ts';
import type { TranslatedPlan } from './translated-plan.ts';
import { engineBody } from './upstream-body.ts';
import { spliceTranslator } from '../../survive/index.ts';
import { survivalOfClaims } from '../survival-claims.ts';
import { movedHeader, moveOfClaim } from '../../survive/move-plan.ts';

/**
 * Whether the reply is worth reading for the cache record: a chat-kind
 * prompt whose chain reached its end (a chain cut at its bound ends short of
 * the prompt, so a link after it would never be met).
 */
function recordsReply(rr: RoutedRequest, chain: PrefixChain | undefined): boolean {
  const dialect = promptDialectOf(rr.endpoint);
  return chain !== undefined && chain.length > 0 && chain.length < CHAIN_LINKS_MAX && rr.body.length <= CHAIN_WALK_MAX && dialect !== undefined && dialect !== 'completions';
}

/** The clock ms a lease was granted (its grantedAt is performance.now()). */
const startedAtOf = (now: number, lease: Lease): number => now - Math.max(0, performance.now() - lease.grantedAt);

/** A verified forward's sender and claims. */
export type ForwardSender = Extract<Sender, { kind: 'forward' }>;

export class Executor {
  constructor(
    private readonly p: DispatchPorts,
    private readonly hygiene: Hygiene,
  ) {}

  /** A verified forward from member `from`: a free local slot of a capable target now, or a marked refusal. */
  async serveForward(req: DispatchRequest, sender: ForwardSender, res: http.ServerResponse, signal: Gone): Promise<void> {
    const from = sender.from;
    const trace = newTrace(this.p.name, 'forwarded');
    // This run is part of the entry's timeline (kept here under its id), and of its trace.
    const origin = sender.claims.get('req');
    if (origin !== undefined && isTimelineOf(origin, from)) trace.origin = origin;
    const parent = sender.claims.get('traceparent');
    if (parent !== undefined) trace.parent = parent;
    // A forward names the model it runs as (the entry resolved any alias), and carries the chain the entry walked.
    const chain = chainOfClaim(sender.claims.get('chain'));
    const head = chain && headOfClaim(sender.claims.get('head'), chain.length);
    // An entry that continues cut streams (SPEC 13) is told of a cut by the connection's end, not by an error event.
    const survive = req.stream ? survivalOfClaims(sender.claims) : undefined;
    // A member holds more of the prompt than this host (SPEC 13): its slot may be taken into the one this turn takes.
    const move = chain ? moveOfClaim(sender.claims.get('move')) : undefined;
    // The slot its entry priced here: taken when it costs no more than this node's own choice (route/slots.ts).
    const named = slotOfClaim(sender.claims.get('slot'));
    const rr: RoutedRequest = Object.assign({}, req, { workload: req.endpoint.workload }, chain ? { chain } : undefined, chain && head !== undefined ? { chainHead: head } : undefined, survive ? { survive } : undefined, move ? { move } : undefined, named !== undefined ? { slotNamed: named } : undefined);
    try {
      if (!this.p.slots.does(rr.model, rr.workload)) throw errors.forwardLacksModel(rr.model, rr.workload);
      trace.known = true;
      if (req.endpoint.action === 'count_tokens') {
        const hosts = this.p.snapshot();
        checkServable(rr, hosts, candidatesFor(this.p, rr, hosts));
        trace.route = 'local';
        return await this.countHere(rr, res, signal, {});
      }
      const admitted = await this.#admitForward(rr, sender, signal);
      if (!admitted) {
        trace.outcome = 'aborted';
        return;
      }
      const { waitedMs } = admitted;
      // Counted as the sender's slot while it runs: its polls of this node say so (`your_busy`).
      const lease = this.p.slots.heldBy ? this.p.slots.heldBy(admitted.lease, from) : admitted.lease;
      if (waitedMs > 0) trace.queuedMs = waitedMs;
      // A slot taken at once that would destroy a live conversation its entry priced as free: sent back to be priced again.
      const priced = waitedMs === 0 ? evictOfClaim(sender.claims.get('evict')) : undefined;
      const unpriced = priced === undefined ? undefined : this.#unpricedLoss(rr, lease, priced);
      if (unpriced !== undefined) {
        lease.release();
        throw errors.forwardEvicts(unpriced, priced!);
      }
      const o = await this.run(rr, lease, res, signal, { origin: from, route: 'local', queuedMs: waitedMs, extra: {} }, trace);
      if (o.kind === 'cut') {
        // Its entry continues the stream elsewhere and accounts it there: the connection's end is what tells it.
        trace.outcome = 'broken';
        res.destroy();
      } else if (o.kind === 'engine-failed') {
        // Marked, so the entry node tries another host or answers 502 with this text.
        sendError(res, errors.engineFailed(o.text, true), meshHeaders(this.p.name, from, 'local', 0), errorShapeOf(req.endpoint.dialect));
        trace.outcome = '502';
      }
    } catch (err) {
      trace.outcome = err instanceof ApiError ? String(err.status) : 'error';
      throw err;
    } finally {
      recordRequest(this.p, rr, rr.model, from, trace);
    }
  }

  /**
   * A slot for a verified forward: a free one it may take now (the gate, queue/gate.ts: none while a request that ranks at
   * least as high waits here), else — when its entry allows a wait (the `wait` claim, at most routing.forward_wait) — the
   * first one the line grants it. Throws the marked refusal otherwise; undefined when the entry went away meanwhile.
   */
  async #admitForward(rr: RoutedRequest, sender: ForwardSender, signal: Gone): Promise<{ lease: Lease; waitedMs: number } | undefined> {
    const p = this.p;
    const flow = flowOf(rr);
    const keyed = flow === ANONYMOUS_FLOW ? undefined : flow;
    const lease = p.slots.tryLease(rr.model, rr.workload, rr.sessionKey, keyed);
    if (lease) return { lease, waitedMs: 0 };
    const ms = keyed ? waitOfClaim(sender.claims.get('wait'), p.rules.forwardWaitMs ?? 0) : 0;
    if (ms <= 0 || !p.slots.wait) throw errors.forwardNoSlot();
    const o = await p.slots.wait(rr.model, rr.workload, rr.sessionKey, flow, ms, signal);
    if (o.ok) return { lease: o.lease, waitedMs: Math.max(1, o.waitedMs) };
    if (o.reason === 'aborted') return undefined;
    throw o.reason === 'full' ? errors.forwardNoSlot() : errors.forwardWaited(ms);
  }

  /** The expected tokens of re-prefill taking `lease`'s slot now destroys, when that is more than `priced` allows; else undefined. */
  #unpricedLoss(rr: RoutedRequest, lease: Lease, priced: number): number | undefined {
    const chain = this.#chainOf(rr)?.chain;
    const e = chain?.length ? this.p.cache?.peek?.(lease.backend, chain, rr.slotNamed) : undefined;
    if (!e) return undefined;
    // The cascade the entry priced is bounded by the fleet's room (route/slots.ts fleetBounded), which this node does
    // not weigh here: the eviction alone is compared, so a forward is sent back for a stale view, not for the bound.
    const loss = expectedLoss({ ...e, cascade: 1 });
    return evictsUnpriced(loss, priced) ? loss : undefined;
  }

  /** count_tokens answered here: this node's tokenizer for the model, else the estimate. */
  async countHere(rr: RoutedRequest, res: http.ServerResponse, signal: Gone, extra: Record<string, string>): Promise<void> {
    const counted = await countTokens(rr, this.p.tokenizer?.(rr.model), signal);
    if (!res.destroyed) sendJson(res, 200, counted, extra);
  }

  /** The chain the engine's cache model is told of (and its head): the entry's, else (a forward) the same chain from the body received. */
  #chainOf(rr: RoutedRequest): { chain: PrefixChain; head?: number } | undefined {
    if (!isScoredWorkload(rr.workload) || !rr.scan || !this.p.cache) return undefined;
    if (rr.chain) return { chain: rr.chain, head: rr.chainHead };
    const walk = walkPrompt(rr.body, rr.scan, promptDialectOf(rr.endpoint), { hygiene: this.hygiene.on });
    return { chain: walk.chain, head: walk.head >= 0 ? walk.head : undefined };
  }

  /** The dialect's plan for this target: as sent, translated to chat completions, or refused (a body too large to translate). */
  #plan(rr: RoutedRequest, lease: Lease): TranslatedPlan {
    switch (rr.endpoint.dialect) {
      case 'responses':
        return planResponses(rr, lease.target.descriptor, this.hygiene);
      case 'messages':
        return planMessages(rr, lease.target.descriptor, lease.backend.info.context, this.hygiene);
      default:
        return { kind: 'native' };
    }
  }

  /** Run on a local backend; an engine failure before its first byte is reported back, not answered. */
  async run(rr: RoutedRequest, lease: Lease, res: http.ServerResponse, signal: Gone, h: ResponseMeta, trace: Trace): Promise<RunOutcome> {
    const p = this.p;
    let run: CacheRun | undefined;
    try {
      const base = lease.backend.url;
      if (!base) return { kind: 'engine-failed', host: p.name, text: `backend ${lease.backend.id} has no address` };
      // What this request asks of the engine's cache, in the executor's record (issue 17): where it runs, what it reuses.
      const generation = isScoredWorkload(rr.workload);
      const walked = this.#chainOf(rr);
      const chain = walked?.chain;
      run = chain && chain.length ? p.cache!.begin(lease.backend, chain, walked.head, rr.slotNamed, rr.sessionKey !== undefined) : undefined;
      trace.grantedAt = lease.grantedAt;
      if (run && trace.predictedCached === undefined) trace.predictedCached = run.predicted;
      if (run?.ticket.slot !== undefined) trace.slot = run.ticket.slot;
      if (run?.ticket.restored) {
        // A conversation taken back from the engine's RAM pool (SPEC 9.6): told apart from a slot hit.
        trace.restored = run.ticket.restored;
        p.metrics.restoredPrompts.inc({ model: rr.model, host: p.name });
        p.metrics.restoredTokens.inc({ model: rr.model, host: p.name }, run.ticket.restored);
      }
      const idSlot = run?.idSlot;
      if (rr.move && idSlot !== undefined && p.moves) {
        // Priced against prefilling here, then saved there, fetched and restored into this slot before the turn runs.
        trace.move = await p.moves.pull(rr.move, lease.backend, run?.predicted ?? 0, () => idSlot);
        if (trace.move.outcome === 'moved') trace.predictedCached = Math.max(trace.predictedCached ?? 0, trace.move.tokens);
      }
      const evicted = run?.ticket.evicted;
      if (evicted) {
        // A live conversation's cache destroyed to run this one: the operator's count of what placement cost.
        trace.evicted = { tokens: evicted.tokens, idleMs: evicted.idleMs };
        // A prompt moved to the engine's RAM pool is not destroyed: it comes back by a restore.
        if (evicted.chance >= 0.5 && !evicted.pooled) {
          p.metrics.evictedPrompts.inc({ model: rr.model, host: p.name });
          p.metrics.evictedTokens.inc({ model: rr.model, host: p.name }, evicted.tokens);
        }
      }
      let { body, stripUsage } = await engineBody(rr, run?.idSlot);
      let path = rr.path;
      let translate: AnswerTranslator | undefined;
      const responseHeaders = Object.assign({}, h.extra, meshHeaders(p.name, h.origin, h.route, h.queuedMs), trace.move ? { [RES_MOVED]: movedHeader(trace.move) } : {});
      // A forward's entry learns the slot this node took, which may not be the one it named (issue 42, item 4).
      if (run?.ticket.slot !== undefined && h.origin !== p.name) responseHeaders[RES_SLOT] = String(run.ticket.slot);
      const plan = this.#plan(rr, lease);
      if (plan.kind === 'refuse') {
        // The executor's own answer about the request itself: unmarked, so it reaches the client once.
        sendError(res, plan.error, responseHeaders, errorShapeOf(rr.endpoint.dialect));
        trace.outcome = String(plan.error.status);
        p.served?.(rr, { status: plan.error.status, startedAt: startedAtOf(p.now(), lease) });
        return { kind: 'answered', status: plan.error.status };
      }
      if (plan.kind === 'translate') {
        ({ path, body, translate } = plan);
        if (plan.omittedTools.length) responseHeaders[RES_OMITTED_TOOLS] = plan.omittedTools.join(', ').slice(0, 1024);
      }
      const survive = rr.stream ? rr.survive : undefined;
      // A continuation (SPEC 13): its stream, in the client's API, is spliced into the one the client holds.
      if (survive?.splice) translate = spliceTranslator(survive.splice, translate);
      const transcript = survive?.transcript;
      const headers: Record<string, string> = Object.assign(
        { 'content-type': rr.scan ? 'application/json' : rr.contentType, accept: rr.stream ? 'text/event-stream' : 'application/json' },
        lease.backend.authHeaders(),
      );
      trace.engineAt = performance.now();
      const result = await relay({ origin: base, path, method: 'POST', headers, body, signal }, res, {
        responseHeaders,
        stripUsage,
        keepBody: generation && !rr.stream ? 1 << 20 : undefined,
        streamStallMs: p.rules.streamStallMs,
        writeStallMs: p.rules.writeStallMs,
        translate,
        cachedOut: generation,
        reply: recordsReply(rr, chain),
        ...(transcript ? { tap: (out: Buffer | string) => transcript.push(out) } : {}),
        ...(survive?.handBack ? { handBack: true } : {}),
        ...(survive?.splice ? { continuing: true } : {}),
      });
      if (p.log.debugging !== false) p.log.debug('request', { model: rr.model, workload: rr.workload, backend: lease.backend.id, route: h.route, result: result.kind });
      switch (result.kind) {
        case 'refused': {
          if (result.status === undefined) lease.backend.reportFailure(result.detail);
          const text = upstreamErrorText(result.body);
          return { kind: 'engine-failed', host: p.name, text: `${lease.backend.id}: ${result.detail}${text ? `: ${text}` : ''}` };
        }
        case 'aborted':
        case 'broken':
        case 'cut': {
          trace.outcome = result.kind === 'cut' ? 'broken' : result.kind;
          // No usage will come: the key is settled at what the node saw run (SPEC 12, "settled from the engine's usage");
          // the served side holds the cached count to the prompt, as it does the engine's.
          const startedAt = startedAtOf(p.now(), lease);
          const settle = () =>
            p.served?.(rr, {
              status: res.headersSent ? res.statusCode : 502,
              cutShort: result.kind === 'aborted' ? 'client' : 'engine',
              promptTokens: rr.promptTokens,
              cachedTokens: trace.predictedCached,
              completionTokens: result.streamed ?? 0,
              startedAt,
            });
          // A cut handed back is settled by whoever ends it: a continuation accounts the whole answer where it runs.
          if (result.kind === 'cut') return { kind: 'cut', host: p.name, detail: result.detail, settle };
          settle();
          return result.kind === 'aborted' ? { kind: 'aborted' } : { kind: 'answered', status: 0 };
        }
        case 'done': {
          trace.firstContentAt = result.firstContentAt;
          trace.outcome = String(result.status);
          trace.cachedTokens = result.cachedTokens;
          // A whole answer's body is parsed once, here, for what the stream's scanner would have counted.
          const whole = result.firstContentAt === undefined || result.promptTokens === undefined || result.completionTokens === undefined;
          const usage = whole ? (result.usage ?? (result.body ? usageOfBody(result.body) : undefined)) : undefined;
          trace.promptTokens = result.promptTokens ?? usage?.promptTokens;
          trace.completionTokens = result.completionTokens ?? usage?.completionTokens;
          // A continuation's prompt carried the answer streamed before the cut: the key is charged those tokens as output,
          // as the client's usage shows them, and once.
          const carried = (rr.stream ? rr.survive?.carried : undefined) ?? 0;
          const charged = carried && trace.promptTokens !== undefined ? { promptTokens: Math.max(0, trace.promptTokens - carried), completionTokens: (trace.completionTokens ?? 0) + carried } : trace;
          if (result.firstContentAt === undefined && trace.engineAt !== undefined && usage?.promptMs !== undefined) {
            trace.prefilledAt = Math.min(trace.engineAt + usage.promptMs, performance.now());
          }
          // The engine's slot now holds the reply too, and the next turn echoes it: recorded as the chain's next link.
          const dialect = promptDialectOf(rr.endpoint);
          const reply = result.reply && chain && dialect && result.status < 300 ? replyLink(chain, result.reply, dialect) : undefined;
          run?.finish({ processed: true, promptTokens: trace.promptTokens, cachedTokens: result.cachedTokens, ...(reply ? { reply } : {}) });
          if (chain?.length && result.status < 300) p.moves?.remember?.(lease.backend, chain[chain.length - 1].hash, path, body);
          p.served?.(rr, { status: result.status, promptTokens: charged.promptTokens, cachedTokens: result.cachedTokens, completionTokens: charged.completionTokens, startedAt: startedAtOf(p.now(), lease) });
          if (generation && trace.promptTokens !== undefined) {
            const cached = Math.min(trace.promptTokens, result.cachedTokens ?? trace.predictedCached ?? 0);
            p.metrics.promptTokens.inc({ model: rr.model, host: p.name, cache: 'cached' }, cached);
            p.metrics.promptTokens.inc({ model: rr.model, host: p.name, cache: 'uncached' }, trace.promptTokens - cached);
          }
          if (generation && result.status < 300) {
            // Score measurement subtracts the tokens the engine served from its cache; when it gives no count, the prediction.
            const m = measure(lease.grantedAt, usage && !result.usage ? { ...result, usage } : result, trace.predictedCached);
            if (m) {
              p.recordScore(rr.model, m.promptTokens, m.ttftMs);
              p.metrics.ttft.observe({ model: rr.model }, m.ttftMs / 1000);
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
}
