/**
 * An inference request on this node: parse, check, place (now or after
 * waiting in the queue), run on the leased backend, measure, release.
 */
import type http from 'node:http';
import { GENERATION_WORKLOADS, descriptorDoes, type Workload } from '../workloads/workloads.ts';
import type { ViiworkNode, Placement } from '../node/node.ts';
import type { Lease } from '../engines/targets.ts';
import { readBody } from './body.ts';
import { ApiError, errors, sendError } from './errors.ts';
import { relay } from './proxy.ts';
import { parseInference, type InferenceRequest } from './request.ts';

export type RouteReason = 'local' | 'scored' | 'session' | 'pinned' | 'preferred' | 'explore' | 'most-free' | 'queued';

export async function handleInference(node: ViiworkNode, req: http.IncomingMessage, res: http.ServerResponse, url: URL, workload: Workload): Promise<void> {
  const abort = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) abort.abort();
  });
  const body = await readBody(req, node.config.api.max_body);
  const ir = parseInference(req, url, workload, body);
  let route: RouteReason = 'local';
  let outcome = 'ok';
  try {
    checkServed(node, ir);
    const placed = await place(node, ir, abort.signal);
    if (!placed) return; // client went away while queued
    if (placed.queuedMs > 0) route = 'queued';
    outcome = await runLocal(node, ir, placed.placement.lease, res, route, placed.queuedMs, abort.signal);
  } catch (err) {
    outcome = err instanceof ApiError ? String(err.status) : 'error';
    throw err;
  } finally {
    node.metrics.requests.inc({ model: ir.model, workload, route, outcome });
  }
}

/** 404 unknown model, 400 unsupported workload, 503 nothing healthy: decided before any waiting. */
function checkServed(node: ViiworkNode, ir: InferenceRequest): void {
  const targets = node.slots.targetsOf(ir.model);
  if (targets.length === 0) throw errors.unknownModel(ir.model);
  const capable = targets.filter((t) => descriptorDoes(t.descriptor, ir.workload));
  if (capable.length === 0) throw errors.unsupportedWorkload(ir.model, ir.workload);
  if (!capable.some((t) => t.backends.some((b) => b.state === 'healthy'))) throw errors.noHealthyBackend(ir.model);
}

async function place(node: ViiworkNode, ir: InferenceRequest, signal: AbortSignal): Promise<{ placement: Placement; queuedMs: number } | undefined> {
  const attempt = (): Placement | undefined => {
    const lease = node.slots.tryLease(ir.model, ir.workload, ir.sessionKey);
    return lease ? { kind: 'local', lease } : undefined;
  };
  const queue = node.queues.get(ir.model, ir.workload);
  if (queue.depth === 0) {
    const now = attempt();
    if (now) return { placement: now, queuedMs: 0 };
  }
  if (node.config.routing.queue_max === 0) throw errors.queueFull(ir.model);
  node.metrics.queueDepth.set({ model: ir.model, workload: ir.workload }, queue.depth + 1);
  const out = await queue.enqueue(attempt, { signal });
  node.metrics.queueDepth.set({ model: ir.model, workload: ir.workload }, queue.depth);
  if (out.ok) {
    node.metrics.queueWait.observe(out.queuedMs / 1000);
    return { placement: out.value, queuedMs: Math.max(1, out.queuedMs) };
  }
  if (out.reason === 'aborted') return undefined;
  if (out.reason === 'full') throw errors.queueFull(ir.model);
  throw errors.queueTimeout(ir.model, node.config.routing.queue_timeout);
}

/** Upstream body: for a generation stream, ask the engine for usage so prompt tokens can be measured. */
function upstreamBody(ir: InferenceRequest): { body: Buffer; stripUsage: boolean } {
  if (ir.stream && ir.json && GENERATION_WORKLOADS.includes(ir.workload) && !ir.clientWantsUsage) {
    const so = (ir.json.stream_options as Record<string, unknown> | undefined) ?? {};
    return { body: Buffer.from(JSON.stringify({ ...ir.json, stream_options: { ...so, include_usage: true } })), stripUsage: true };
  }
  return { body: ir.body, stripUsage: false };
}

async function runLocal(
  node: ViiworkNode,
  ir: InferenceRequest,
  lease: Lease,
  res: http.ServerResponse,
  route: RouteReason,
  queuedMs: number,
  signal: AbortSignal,
): Promise<string> {
  try {
    const origin = lease.backend.url;
    if (!origin) throw errors.engineFailed(`backend ${lease.backend.id} has no address`);
    const { body, stripUsage } = upstreamBody(ir);
    const responseHeaders = {
      'x-viiwork-node': node.name,
      'x-viiwork-origin': node.name,
      'x-viiwork-route': route,
      'x-viiwork-queued-ms': String(queuedMs),
    };
    const generation = GENERATION_WORKLOADS.includes(ir.workload);
    const result = await relay(
      {
        origin,
        path: ir.path,
        method: 'POST',
        headers: { 'content-type': ir.contentType, accept: ir.stream ? 'text/event-stream' : 'application/json' },
        body,
        signal,
      },
      res,
      { responseHeaders, stripUsage, keepBody: generation && !ir.stream ? 1 << 20 : undefined },
    );
    node.log.debug('request', { model: ir.model, workload: ir.workload, backend: lease.backend.id, route, result: result.kind });
    switch (result.kind) {
      case 'refused':
        sendError(res, errors.engineFailed(`${lease.backend.id}: ${result.detail}`), responseHeaders);
        return '502';
      case 'aborted':
        return 'aborted';
      case 'broken':
        return 'broken';
      case 'done':
        if (generation && result.status < 300) measure(node, ir, lease, result);
        return String(result.status);
    }
  } finally {
    lease.release();
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
