/**
 * An inference request, from the entry node's point of view (SPEC section
 * 9): parse, judge forward headers, check that someone can serve it, place
 * it (now, or after waiting in the queue), run it here or forward it once,
 * retry refusals before the first byte, measure, release.
 */
import type http from 'node:http';
import { GENERATION_WORKLOADS, type Workload } from '../workloads/workloads.ts';
import type { ViiworkNode } from '../node/node.ts';
import type { Lease } from '../engines/targets.ts';
import { candidates } from '../route/eligibility.ts';
import { decide } from '../route/decide.ts';
import type { Candidate, HostView, RouteReason } from '../route/types.ts';
import { judgeForward, type Sender } from '../forward/verify.ts';
import { readBody } from './body.ts';
import { ApiError, errors, sendError } from './errors.ts';
import { relay, type RelayResult } from './proxy.ts';
import { parseInference, type InferenceRequest } from './request.ts';
import { boundaryOf, replaceTextField } from './multipart.ts';
import { resolveModelName } from '../node/aliases.ts';

export type { RouteReason };

/** What the decision feed and metrics learn of one request, filled in as it goes. */
interface Trace {
  executor: string | null;
  queuedMs: number;
  firstContentAt?: number;
  startedAt: number;
}

/** Where a request will run, holding what it reserved there. */
export type Placement =
  | { kind: 'local'; lease: Lease; reason: RouteReason }
  | { kind: 'remote'; host: string; reason: RouteReason; done: () => void };

export async function handleInference(node: ViiworkNode, req: http.IncomingMessage, res: http.ServerResponse, url: URL, workload: Workload): Promise<void> {
  const abort = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) abort.abort();
  });
  const body = await readBody(req, node.config.api.max_body);
  const sender: Sender = judgeForward(req, body, node.meshMode, node.members, (reason) => node.metrics.authRejected.inc({ reason: reason.split(':')[0].slice(0, 40) }));
  const ir = parseInference(req, url, workload, body);
  let route: RouteReason = 'local';
  let outcome = 'ok';
  let aliasName: string | undefined;
  const trace: Trace = { executor: null, queuedMs: 0, startedAt: performance.now() };
  try {
    if (sender.kind === 'forward') {
      trace.executor = node.name;
      outcome = await admitForward(node, ir, sender.from, res, abort.signal, trace);
      return;
    }
    // One snapshot serves alias resolution, the up-front checks and the first routing attempt.
    const hosts = node.hostViews();
    const alias = resolveModelName(node, ir, hosts);
    const headers: Record<string, string> = alias ? { 'x-viiwork-alias': alias.alias, 'x-viiwork-model': alias.model } : {};
    if (alias) {
      aliasName = alias.alias;
      rewriteModel(ir, alias.model);
    }
    const r = await placeAndRun(node, ir, res, abort.signal, headers, trace, hosts);
    route = r.route;
    outcome = r.outcome;
  } catch (err) {
    outcome = err instanceof ApiError ? String(err.status) : 'error';
    throw err;
  } finally {
    node.metrics.requests.inc({ model: ir.model, workload, route, outcome });
    node.decisions.add({
      at: Date.now(),
      entry: sender.kind === 'forward' ? sender.from : node.name,
      executor: trace.executor,
      model: ir.model,
      workload,
      // A request refused before it was placed ran nowhere: the feed says so rather than showing a route it never took.
      route: sender.kind === 'forward' ? 'forwarded' : trace.executor === null ? 'not-routed' : route,
      queued_ms: trace.queuedMs,
      ttft_ms: trace.firstContentAt === undefined ? null : Math.round(trace.firstContentAt - trace.startedAt),
      outcome,
      ...(aliasName ? { alias: aliasName } : {}),
    });
  }
}

/** The engine gets the resolved model name; for uploads only the `model` field changes, the file part stays byte for byte. */
function rewriteModel(ir: InferenceRequest, model: string): void {
  ir.model = model;
  if (ir.json) {
    ir.json = { ...ir.json, model };
    ir.body = Buffer.from(JSON.stringify(ir.json));
    return;
  }
  const boundary = boundaryOf(ir.contentType);
  if (boundary) ir.body = replaceTextField(ir.body, boundary, 'model', model);
}

/** 404 / 400 / 503 before any waiting, from every host that reports the model (fresh or stale). */
function checkServable(ir: InferenceRequest, hosts: readonly HostView[], cands: Candidate[]): void {
  const serving = hosts.filter((h) => h.models.has(ir.model));
  if (serving.length === 0) throw errors.unknownModel(ir.model);
  if (ir.pin !== undefined) {
    if (!serving.some((h) => h.name === ir.pin)) throw errors.unknownHost(ir.pin, ir.model);
    if (!cands.some((c) => c.host === ir.pin)) throw errors.unsupportedWorkload(ir.model, ir.workload, `member "${ir.pin}"`);
  }
  if (cands.length === 0) throw errors.unsupportedWorkload(ir.model, ir.workload);
  if (!cands.some((c) => c.healthy)) throw errors.noHealthyBackend(ir.model);
}

function currentCandidates(node: ViiworkNode, ir: InferenceRequest, hosts: readonly HostView[] = node.hostViews()): Candidate[] {
  return candidates({ hosts, inFlight: node.forwards.inFlight, marks: node.forwards.marks }, ir.model, ir.workload);
}

/** One routing attempt: decide and reserve (a local lease, or an in-flight forward). */
function attempt(node: ViiworkNode, ir: InferenceRequest, cands: Candidate[] = currentCandidates(node, ir)): Placement | undefined {
  const d = decide(cands, ir, { performance: node.config.routing.performance, random: Math.random, roundRobin: node.nextRoundRobin() });
  if (d.kind === 'wait') return undefined;
  if (d.local) {
    const lease = node.slots.tryLease(ir.model, ir.workload, ir.sessionKey);
    return lease ? { kind: 'local', lease, reason: d.reason } : undefined;
  }
  return { kind: 'remote', host: d.host, reason: d.reason, done: node.forwards.start(d.host, ir.model, d.target) };
}

async function placeAndRun(
  node: ViiworkNode,
  ir: InferenceRequest,
  res: http.ServerResponse,
  signal: AbortSignal,
  extraHeaders: Record<string, string>,
  trace: Trace,
  hosts: readonly HostView[],
): Promise<{ route: RouteReason; outcome: string }> {
  const firstCandidates = currentCandidates(node, ir, hosts);
  checkServable(ir, hosts, firstCandidates);
  const arrived = node.now();
  /** X-Viiwork-Queued-Ms: 0 when placed at once, else the time since arrival (at least 1). */
  const waited = () => (queued ? Math.max(1, node.now() - arrived) : 0);
  const deadline = arrived + node.config.routing.queue_timeout;
  const queue = node.queues.get(ir.model, ir.workload);
  let refusedMeanwhile = false;
  let queued = false;
  let front = false;
  let first = true;
  for (;;) {
    let placement: Placement | undefined = queue.depth === 0 || front ? attempt(node, ir, first ? firstCandidates : undefined) : undefined;
    first = false;
    if (!placement) {
      if (node.config.routing.queue_max === 0 && !front) throw errors.queueFull(ir.model);
      queued = true;
      const out = await queue.enqueue(() => attempt(node, ir), { signal, deadline, front });
      if (!out.ok) {
        if (out.reason === 'aborted') return { route: 'queued', outcome: 'aborted' };
        if (out.reason === 'full') throw errors.queueFull(ir.model);
        throw refusedMeanwhile ? errors.queueTimeoutRefused(ir.model, node.config.routing.queue_timeout) : errors.queueTimeout(ir.model, node.config.routing.queue_timeout);
      }
      placement = out.value;
      node.metrics.queueWait.observe(out.queuedMs / 1000);
    }
    const queuedMs = waited();
    trace.queuedMs = queuedMs;
    const route: RouteReason = queued ? 'queued' : placement.reason;
    if (placement.kind === 'local') {
      trace.executor = node.name;
      const outcome = await runLocal(node, ir, placement.lease, res, route, queuedMs, signal, node.name, extraHeaders, trace);
      return { route, outcome };
    }
    // A forward: retried on another route before the first byte, up to forward_retry times, then back to the head of the queue.
    let retries = 0;
    let current: Placement | undefined = placement;
    while (current && current.kind === 'remote') {
      trace.queuedMs = waited();
      const result = await forwardOnce(node, ir, current.host, res, signal, { route: queued ? 'queued' : current.reason, queuedMs: trace.queuedMs, extraHeaders });
      current.done();
      if (result.kind !== 'refused') {
        trace.executor = current.host;
        if (result.kind === 'done') trace.firstContentAt = result.firstContentAt;
        node.metrics.forwards.inc({ outcome: result.kind });
        node.queues.pumpAll();
        return { route: queued ? 'queued' : current.reason, outcome: result.kind === 'done' ? String(result.status) : result.kind };
      }
      node.metrics.forwards.inc({ outcome: 'refused' });
      node.forwards.refuse(current.host, ir.model, ir.workload);
      refusedMeanwhile = true;
      node.log.debug('forward refused', { host: current.host, model: ir.model, detail: result.detail });
      if (retries >= node.config.routing.forward_retry) break;
      retries++;
      current = attempt(node, ir);
    }
    if (current && current.kind === 'local') {
      const r: RouteReason = queued ? 'queued' : current.reason;
      trace.executor = node.name;
      trace.queuedMs = waited();
      return { route: r, outcome: await runLocal(node, ir, current.lease, res, r, trace.queuedMs, signal, node.name, extraHeaders, trace) };
    }
    if (node.now() >= deadline) throw errors.queueTimeoutRefused(ir.model, node.config.routing.queue_timeout);
    front = true;
    queued = true;
  }
}

/** Upstream body: for a generation stream, ask the engine for usage so prompt tokens can be measured. */
function upstreamBody(ir: InferenceRequest): { body: Buffer; stripUsage: boolean } {
  if (ir.stream && ir.json && GENERATION_WORKLOADS.includes(ir.workload) && !ir.clientWantsUsage) {
    const so = (ir.json.stream_options as Record<string, unknown> | undefined) ?? {};
    return { body: Buffer.from(JSON.stringify({ ...ir.json, stream_options: { ...so, include_usage: true } })), stripUsage: true };
  }
  return { body: ir.body, stripUsage: false };
}

function meshHeaders(executor: string, origin: string, route: RouteReason, queuedMs: number): Record<string, string> {
  return { 'x-viiwork-node': executor, 'x-viiwork-origin': origin, 'x-viiwork-route': route, 'x-viiwork-queued-ms': String(queuedMs) };
}

/** A verified forward: a free local slot of a capable target now, or 429 (503 when this node lacks the model or workload). */
async function admitForward(node: ViiworkNode, ir: InferenceRequest, from: string, res: http.ServerResponse, signal: AbortSignal, trace: Trace): Promise<string> {
  if (!node.slots.does(ir.model, ir.workload)) throw errors.forwardLacksModel(ir.model, ir.workload);
  const lease = node.slots.tryLease(ir.model, ir.workload, ir.sessionKey);
  if (!lease) throw errors.forwardNoSlot();
  return runLocal(node, ir, lease, res, 'local', 0, signal, from, {}, trace);
}

async function runLocal(
  node: ViiworkNode,
  ir: InferenceRequest,
  lease: Lease,
  res: http.ServerResponse,
  route: RouteReason,
  queuedMs: number,
  signal: AbortSignal,
  origin: string,
  extraHeaders: Record<string, string>,
  trace: Trace,
): Promise<string> {
  try {
    const base = lease.backend.url;
    const responseHeaders = { ...extraHeaders, ...meshHeaders(node.name, origin, route, queuedMs) };
    if (!base) {
      sendError(res, errors.engineFailed(`backend ${lease.backend.id} has no address`), responseHeaders);
      return '502';
    }
    const { body, stripUsage } = upstreamBody(ir);
    const generation = GENERATION_WORKLOADS.includes(ir.workload);
    const result = await relay(
      { origin: base, path: ir.path, method: 'POST', headers: { 'content-type': ir.contentType, accept: ir.stream ? 'text/event-stream' : 'application/json' }, body, signal },
      res,
      { responseHeaders, stripUsage, keepBody: generation && !ir.stream ? 1 << 20 : undefined },
    );
    node.log.debug('request', { model: ir.model, workload: ir.workload, backend: lease.backend.id, route, result: result.kind });
    switch (result.kind) {
      case 'refused':
        if (result.status === undefined) lease.backend.reportFailure(result.detail);
        sendError(res, errors.engineFailed(`${lease.backend.id}: ${result.detail}`), responseHeaders);
        return '502';
      case 'aborted':
      case 'broken':
        return result.kind;
      case 'done':
        trace.firstContentAt = result.firstContentAt;
        if (generation && result.status < 300) measure(node, ir, lease, result);
        return String(result.status);
    }
  } finally {
    lease.release();
  }
}

/** Send the request to a member once; a refusal (429, 503, no connection) comes back before anything reached the client. */
async function forwardOnce(
  node: ViiworkNode,
  ir: InferenceRequest,
  host: string,
  res: http.ServerResponse,
  signal: AbortSignal,
  o: { route: RouteReason; queuedMs: number; extraHeaders: Record<string, string> },
): Promise<RelayResult> {
  const member = node.members?.get(host);
  if (!member?.api) return { kind: 'refused', detail: `member ${host} has no API address` };
  const pathWithQuery = ir.path;
  const headers: Record<string, string> = {
    'content-type': ir.contentType,
    accept: ir.stream ? 'text/event-stream' : 'application/json',
    ...node.signForward('POST', pathWithQuery, ir.body),
  };
  if (ir.sessionKey) headers['x-session-affinity'] = ir.sessionKey;
  // A member that goes quiet (frozen, cut off) while we wait for its first byte would hold the request forever:
  // when its reports go stale or membership stops calling it alive, the forward counts as refused and is retried.
  const quiet = new AbortController();
  const watchdog = setInterval(() => {
    const m = node.members.get(host);
    const report = node.poller?.get(host);
    if (m?.state !== 'alive' || !report || node.now() - report.polledAt > node.config.routing.stale_after) quiet.abort();
  }, 200);
  try {
    const result = await relay(
      { origin: member.api, path: pathWithQuery, method: 'POST', headers, body: ir.body, signal: AbortSignal.any([signal, quiet.signal]), dispatcher: node.peerAgent },
      res,
      // 401 too: a member that has not yet seen us alive (we just restarted) rejects our forward; another route, or a moment later, works.
      { responseHeaders: { ...o.extraHeaders, ...meshHeaders(host, node.name, o.route, o.queuedMs) }, stripUsage: false, isRefusal: (s) => s === 429 || s === 503 || s === 401 },
    );
    if (result.kind === 'aborted' && quiet.signal.aborted && !signal.aborted && !res.headersSent) {
      return { kind: 'refused', detail: `member ${host} went quiet before answering` };
    }
    return result;
  } finally {
    clearInterval(watchdog);
  }
}

function measure(node: ViiworkNode, ir: InferenceRequest, lease: Lease, result: { firstContentAt?: number; promptTokens?: number; body?: Buffer }): void {
  let ttft: number | undefined;
  let tokens = result.promptTokens;
  if (result.firstContentAt !== undefined) ttft = result.firstContentAt - lease.grantedAt;
  else if (result.body) {
    // A whole answer has no first chunk; engines that report their prompt time (llama-server's `timings`) give it instead.
    try {
      const doc = JSON.parse(result.body.toString('utf8')) as { usage?: { prompt_tokens?: number }; timings?: { prompt_ms?: number } };
      tokens = doc.usage?.prompt_tokens;
      ttft = doc.timings?.prompt_ms;
    } catch {
      return;
    }
  }
  if (ttft === undefined || tokens === undefined) return;
  node.perf.record(ir.model, tokens, ttft);
  node.metrics.ttft.observe({ model: ir.model }, ttft / 1000);
}
