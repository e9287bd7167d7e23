/** The node's Prometheus registry (SPEC section 10). One instance per node, so tests can run several nodes in one process. */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Gauge, Registry } from 'prom-client';
import { DURATION_BUCKETS, TTFT_BUCKETS } from './gen-ai.ts';
import { HotCounter, HotHistogram } from './hot.ts';

export class Metrics {
  readonly registry = new Registry();
  readonly requests = new HotCounter({
    name: 'viiwork_requests_total',
    help: 'Inference requests by model, workload, route reason and outcome',
    labelNames: ['model', 'workload', 'route', 'outcome'] as const,
    registers: [this.registry],
  });
  readonly queueDepth = new Gauge({
    name: 'viiwork_queue_depth',
    help: 'Requests waiting in this node’s queue per (model, workload)',
    labelNames: ['model', 'workload'] as const,
    registers: [this.registry],
  });
  /** Set at each scrape from the gate (queue/gate.ts) by whoever owns it: `lineDepthOf`. */
  lineDepthOf: (() => { model: string; depth: number }[]) | undefined;
  readonly forwardLine = (() => {
    const of = () => this.lineDepthOf?.() ?? [];
    return new Gauge({
      name: 'viiwork_forward_line_depth',
      help: 'Forwards from members waiting here for a slot of the model, ordered with this node’s own waiters by band and key (routing.forward_wait)',
      labelNames: ['model'] as const,
      registers: [this.registry],
      collect() {
        this.reset();
        for (const l of of()) this.set({ model: l.model }, l.depth);
      },
    });
  })();
  readonly queueWait = new HotHistogram({
    name: 'viiwork_queue_wait_seconds',
    help: 'Time requests spent in the queue before placement',
    labelNames: [] as const,
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 60],
    registers: [this.registry],
  });
  readonly ttft = new HotHistogram({
    name: 'viiwork_ttft_seconds',
    help: 'Time from slot grant to first content chunk on this node',
    labelNames: ['model'] as const,
    buckets: [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30],
    registers: [this.registry],
  });
  readonly forwards = new HotCounter({
    name: 'viiwork_forwards_total',
    help: 'Forwards sent by this node, by outcome',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  readonly reportAge = new Gauge({
    name: 'viiwork_capacity_report_age_seconds',
    help: 'Age of the newest capacity report of each member',
    labelNames: ['member'] as const,
    registers: [this.registry],
  });
  readonly members = new Gauge({
    name: 'viiwork_members',
    help: 'Members of the mesh by state',
    labelNames: ['state'] as const,
    registers: [this.registry],
  });
  readonly engineRestarts = new HotCounter({
    name: 'viiwork_engine_restarts_total',
    help: 'Engine processes restarted by this node',
    labelNames: ['model'] as const,
    registers: [this.registry],
  });
  readonly modelLoads = new HotCounter({
    name: 'viiwork_model_loads_total',
    help: 'On-demand model loads finished on this node, by model and reason (request, scale, operator)',
    labelNames: ['model', 'reason'] as const,
    registers: [this.registry],
  });
  readonly fileTransferBytes = new HotCounter({
    name: 'viiwork_file_transfer_bytes_total',
    help: 'Bytes of model files sent to and received from members (direction: sent, received)',
    labelNames: ['direction'] as const,
    registers: [this.registry],
  });
  readonly fileTransfers = new Gauge({
    name: 'viiwork_file_transfers',
    help: 'Model file transfers in flight on this node (direction: sending, fetching)',
    labelNames: ['direction'] as const,
    registers: [this.registry],
  });
  readonly modelUnloads = new HotCounter({
    name: 'viiwork_model_unloads_total',
    help: 'Model unloads on this node, by model and reason (idle, room, operator, failed)',
    labelNames: ['model', 'reason'] as const,
    registers: [this.registry],
  });
  /** Set on each scrape from the node's lifecycle (budget, used, free; lent: of used, what members running a split model hold). */
  readonly memoryBytes = new Gauge({
    name: 'viiwork_memory_bytes',
    help: 'Memory budget of this node and what its engines use of it, in bytes (kind: budget, used, free; lent: of used, lent to members)',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });
  readonly authRejected = new HotCounter({
    name: 'viiwork_forward_auth_rejected_total',
    help: 'Requests rejected with 401 for bad X-Viiwork-* forward headers',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });
  readonly otlpExportFailures = new HotCounter({
    name: 'viiwork_otlp_export_failures_total',
    help: 'OpenTelemetry trace exports the collector refused or that did not reach it',
    labelNames: [] as const,
    registers: [this.registry],
  });
  /** SPEC section 12: tokens per key and model on this host (kind: prompt_cached, prompt_uncached, completion). */
  readonly keyTokens = new HotCounter({
    name: 'viiwork_key_tokens_total',
    help: 'Tokens this host served per client key and model: kind="prompt_cached", "prompt_uncached" or "completion"',
    labelNames: ['key', 'model', 'kind'] as const,
    registers: [this.registry],
  });
  /** SPEC section 12: requests per key and model (outcome: ok, error, limited). */
  readonly keyRequests = new HotCounter({
    name: 'viiwork_key_requests_total',
    help: 'Requests per client key and model: outcome="ok" or "error" where they ran, "limited" where a key limit refused them',
    labelNames: ['key', 'model', 'outcome'] as const,
    registers: [this.registry],
  });
  readonly promptTokens = new HotCounter({
    name: 'viiwork_prompt_tokens_total',
    help: 'Prompt tokens of this node’s own executions by model, host and whether the engine served them from its cache (cache="cached") or processed them ("uncached")',
    labelNames: ['model', 'host', 'cache'] as const,
    registers: [this.registry],
  });
  readonly cachedTokens = new HotCounter({
    name: 'viiwork_cached_tokens_total',
    help: 'Cached prompt tokens of requests that entered here, by model and executing host: as the entry predicted (source="predicted") and as the engine counted (source="engine")',
    labelNames: ['model', 'host', 'source'] as const,
    registers: [this.registry],
  });
  readonly streamContinuations = new HotCounter({
    name: 'viiwork_stream_continuations_total',
    help: 'Streams this entry node saw cut after their first byte (their executor or its engine gone), by model and outcome: continued (another host finished the answer), failed (the continuation broke or found no host) or not_continued (the answer had streamed more than text, or its API cannot be continued)',
    labelNames: ['model', 'outcome'] as const,
    registers: [this.registry],
  });
  readonly cacheMoves = new HotCounter({
    name: 'viiwork_cache_moves_total',
    help: "Slot caches this node took from a member (SPEC 13, \"Moving a cache\"), by outcome: moved (restored into the slot the turn took), priced_out (prefilling here was priced cheaper), refused (the holder or this node refused: another model file, context or layout, a non-member, no room in cache_disk), gone (the holder's slot no longer held it), failed (a call, the transfer or the restore failed)",
    labelNames: ['model', 'outcome'] as const,
    registers: [this.registry],
  });
  readonly cacheMoveBytes = new HotCounter({
    name: 'viiwork_cache_move_bytes_total',
    help: 'Bytes of slot files moved: sent (saved here for a member) and received (restored here)',
    labelNames: ['direction'] as const,
    registers: [this.registry],
  });
  readonly cacheMoveSeconds = new HotHistogram({
    name: 'viiwork_cache_move_seconds',
    help: 'Time from asking the holder to the end of the restore, of moves restored here',
    labelNames: ['model'] as const,
    buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10],
    registers: [this.registry],
  });
  readonly restoredPrompts = new HotCounter({
    name: 'viiwork_restored_prompts_total',
    help: 'Requests this node ran whose cached prompt its engine restores from its host-RAM prompt cache (today’s llama-server --cache-ram) rather than finds in the slot, as the executor’s cache model predicts, by model and host; restored_tokens_total counts their tokens',
    labelNames: ['model', 'host'] as const,
    registers: [this.registry],
  });
  readonly restoredTokens = new HotCounter({
    name: 'viiwork_restored_tokens_total',
    help: 'Cached prompt tokens of the requests counted in viiwork_restored_prompts_total: restored from RAM, not held by the slot',
    labelNames: ['model', 'host'] as const,
    registers: [this.registry],
  });
  readonly evictedPrompts = new HotCounter({
    name: 'viiwork_evicted_prompts_total',
    help: 'Live cached prompts this node’s slot choice destroyed (a conversation likely to return, whose slot another request took), by model and host; evicted_tokens_total counts their tokens',
    labelNames: ['model', 'host'] as const,
    registers: [this.registry],
  });
  readonly evictedTokens = new HotCounter({
    name: 'viiwork_evicted_tokens_total',
    help: 'Tokens of the live cached prompts counted in viiwork_evicted_prompts_total, by model and host',
    labelNames: ['model', 'host'] as const,
    registers: [this.registry],
  });
  /** Issue 44 item 3: the error histogram's requests and those it cannot have, so a fleet whose engines report no cache is seen as such, not as no data. */
  readonly cachePredictions = new HotCounter({
    name: 'viiwork_cache_predictions_total',
    help: 'Requests that entered here with a cache prediction, by model and executing host: checked="yes" when the engine counted its cached tokens (cache_prediction_error_tokens has them), checked="no" when the engine reports no cached tokens',
    labelNames: ['model', 'host', 'checked'] as const,
    registers: [this.registry],
  });
  readonly cachePredictionError = new HotHistogram({
    name: 'viiwork_cache_prediction_error_tokens',
    help: 'Absolute difference between the cached tokens the entry predicted and the engine’s own count, per request, by model and executing host',
    labelNames: ['model', 'host'] as const,
    buckets: [0, 16, 64, 256, 1024, 4096, 16384, 65536],
    registers: [this.registry],
  });
  /**
   * The OpenTelemetry GenAI server metrics (gen-ai.ts), under the names the
   * OpenTelemetry-to-Prometheus rules give them: observed once per client
   * request, at its entry node.
   */
  readonly genAiTtft = new HotHistogram({
    name: 'gen_ai_server_time_to_first_token_seconds',
    help: 'gen_ai.server.time_to_first_token: time from a request reaching its entry node to the first content, for streamed and whole answers',
    labelNames: ['gen_ai_operation_name', 'gen_ai_request_model', 'gen_ai_provider_name'] as const,
    buckets: TTFT_BUCKETS,
    registers: [this.registry],
  });
  readonly genAiDuration = new HotHistogram({
    name: 'gen_ai_server_request_duration_seconds',
    help: 'gen_ai.server.request.duration: time from a request reaching its entry node to its end (error_type set when it failed)',
    labelNames: ['gen_ai_operation_name', 'gen_ai_request_model', 'gen_ai_provider_name', 'error_type'] as const,
    buckets: DURATION_BUCKETS,
    registers: [this.registry],
  });
  /** Sampled every 10 ms; each scrape reads the longest delay since the previous one, then starts afresh. */
  readonly #loopDelay = monitorEventLoopDelay({ resolution: 10 });
  readonly loopStall = (() => {
    const h = this.#loopDelay;
    h.enable();
    return new Gauge({
      name: 'viiwork_event_loop_delay_max_seconds',
      help: 'Longest event-loop delay of this node since the previous scrape (a stalled loop delays every request and the capacity it reports)',
      registers: [this.registry],
      collect() {
        this.set(h.max / 1e9);
        h.reset();
      },
    });
  })();

  /** This node's forwards that members refused, all told (history/ keeps it as a series). */
  async forwardsRefused(): Promise<number> {
    return (await this.forwards.get()).values.filter((v) => v.labels.outcome === 'refused').reduce((n, v) => n + v.value, 0);
  }

  stop(): void {
    this.#loopDelay.disable();
  }
}
