/**
 * A node's history (SPEC section 10): every series in a fixed ring, so
 * memory is bounded by the number of series, never by time or traffic.
 * Requests are counted into one accumulator per (model, host) for the
 * current step (a few additions; nothing is allocated per request); each
 * step's totals become points when the step closes, and a query also shows
 * the step in progress so live charts move before it closes.
 */
import { BUCKETS, bucketOf, quantile } from './quantiles.ts';
import { Ring } from './ring.ts';
import type { SeriesName } from './names.ts';

export const STEP_MS = 10_000;
export const KEEP_MS = 6 * 60 * 60 * 1000;
/** Series beyond this many are not kept (and said once in the log): models and members are few, this is a fuse. */
export const MAX_SERIES = 4096;

/** What history reads of one ended request (dispatch/trace.ts's Trace has these fields). */
export interface RequestFacts {
  readonly executor: string | null;
  readonly outcome: string;
  readonly queuedMs: number;
  readonly startedAt: number;
  readonly firstContentAt?: number;
  readonly promptTokens?: number;
  readonly cachedTokens?: number;
  readonly completionTokens?: number;
  readonly predictedCached?: number;
}

/** One series as GET /v1/history answers it. */
export interface SeriesDoc {
  name: SeriesName;
  node: string;
  model: string | null;
  points: [number, number][];
}

export interface HistoryDoc {
  step_ms: number;
  series: SeriesDoc[];
}

export interface HistoryQuery {
  names: ReadonlySet<SeriesName>;
  /** Unix ms: points from this step on. */
  since: number;
  node?: string;
  model?: string;
}

/** The current step's totals for one (model, host). */
class Step {
  step = -1;
  n = 0;
  rejected = 0;
  errors = 0;
  ttftN = 0;
  readonly ttft = new Uint32Array(BUCKETS);
  waitSum = 0;
  waitN = 0;
  tokensIn = 0;
  tokensOut = 0;
  cached = 0;
  prompt = 0;
  errSum = 0;
  errN = 0;

  reset(step: number): void {
    this.step = step;
    this.n = this.rejected = this.errors = this.ttftN = this.waitSum = this.waitN = 0;
    this.tokensIn = this.tokensOut = this.cached = this.prompt = this.errSum = this.errN = 0;
    this.ttft.fill(0);
  }
}

interface Kept {
  readonly doc: Omit<SeriesDoc, 'points'>;
  readonly ring: Ring;
}

export class History {
  readonly stepMs: number;
  readonly #size: number;
  readonly #series = new Map<string, Kept>();
  /** model → host → the current step's totals. */
  readonly #steps = new Map<string, Map<string, Step>>();
  #full = false;

  constructor(
    readonly self: string,
    opts: { stepMs?: number; keepMs?: number; maxSeries?: number; onFull?: (message: string) => void } = {},
  ) {
    this.stepMs = opts.stepMs ?? STEP_MS;
    this.#size = Math.ceil((opts.keepMs ?? KEEP_MS) / this.stepMs);
    this.#maxSeries = opts.maxSeries ?? MAX_SERIES;
    this.#onFull = opts.onFull ?? (() => {});
  }

  readonly #maxSeries: number;
  readonly #onFull: (message: string) => void;

  get keepMs(): number {
    return this.#size * this.stepMs;
  }

  /** How many series are kept (each costs 16 bytes per step: 6 h of 10 s steps is 35 KB). */
  get seriesCount(): number {
    return this.#series.size;
  }

  /** A request ended at `now`; `host`: where it ran (null: nowhere, e.g. refused before placement: counted under this node). */
  request(model: string, f: RequestFacts, now: number): void {
    const host = f.executor ?? this.self;
    let byHost = this.#steps.get(model);
    if (!byHost) this.#steps.set(model, (byHost = new Map()));
    let s = byHost.get(host);
    if (!s) byHost.set(host, (s = new Step()));
    const step = Math.floor(now / this.stepMs);
    if (s.step !== step) {
      if (s.step >= 0) this.#close(model, host, s, s.step);
      s.reset(step);
    }
    s.n++;
    const o = f.outcome;
    if (o === '429') s.rejected++;
    else if (o === 'broken' || o === 'error' || o.charCodeAt(0) === 53 /* 5xx */) s.errors++;
    if (f.firstContentAt !== undefined) {
      s.ttft[bucketOf(f.firstContentAt - f.startedAt)]++;
      s.ttftN++;
    }
    if (f.executor !== null) {
      s.waitSum += f.queuedMs;
      s.waitN++;
    }
    if (f.promptTokens !== undefined) {
      s.tokensIn += f.promptTokens;
      // The cached share counts only answers whose engine counted its cache: one that reports none is no 0 (issue 44 item 3).
      if (f.cachedTokens !== undefined) {
        s.prompt += f.promptTokens;
        s.cached += Math.min(f.promptTokens, f.cachedTokens);
      }
    }
    if (f.completionTokens !== undefined) s.tokensOut += f.completionTokens;
    if (f.predictedCached !== undefined && f.cachedTokens !== undefined) {
      s.errSum += Math.abs(f.predictedCached - f.cachedTokens);
      s.errN++;
    }
  }

  /** A gauge's value at `now` (the last value of a step wins). */
  gauge(name: SeriesName, node: string, model: string | null, value: number, now: number): void {
    this.#ring(name, node, model)?.set(Math.floor(now / this.stepMs), value);
  }

  /**
   * Bring the request series up to `now`: steps that have ended are written
   * whole (a (model, host) with no request in them reads 0 req/s), and the
   * step in progress is written as far as it has come.
   */
  advance(now: number): void {
    const step = Math.floor(now / this.stepMs);
    for (const [model, byHost] of this.#steps) {
      for (const [host, s] of byHost) {
        if (s.step < step) {
          if (s.step >= 0) this.#close(model, host, s, s.step);
          // The steps between its last request and now had none.
          for (let q = Math.max(s.step + 1, step - this.#size + 1); q < step; q++) this.#zero(model, host, q);
          s.reset(step);
        }
        this.#write(model, host, s, step, Math.max(1000, now - step * this.stepMs));
      }
    }
  }

  query(q: HistoryQuery, now: number): HistoryDoc {
    this.advance(now);
    const to = Math.floor(now / this.stepMs);
    const from = Math.max(Math.floor(q.since / this.stepMs), to - this.#size + 1);
    const series: SeriesDoc[] = [];
    for (const k of this.#series.values()) {
      const d = k.doc;
      if (!q.names.has(d.name) || (q.node !== undefined && d.node !== q.node) || (q.model !== undefined && d.model !== q.model)) continue;
      const points = k.ring.points(from, to);
      if (points.length) series.push({ ...d, points });
    }
    return { step_ms: this.stepMs, series };
  }

  #close(model: string, host: string, s: Step, step: number): void {
    this.#write(model, host, s, step, this.stepMs);
  }

  #zero(model: string, host: string, step: number): void {
    for (const name of ['requests', 'rejected', 'errors'] as const) this.#ring(name, host, model)?.set(step, 0);
  }

  /** The totals of `step` so far, as rates over `spanMs`. */
  #write(model: string, host: string, s: Step, step: number, spanMs: number): void {
    const perS = 1000 / spanMs;
    const set = (name: SeriesName, v: number | undefined) => {
      if (v !== undefined) this.#ring(name, host, model)?.set(step, v);
    };
    set('requests', s.n * perS);
    set('rejected', s.rejected * perS);
    set('errors', s.errors * perS);
    set('ttft_p50', quantile(s.ttft, s.ttftN, 0.5));
    set('ttft_p95', quantile(s.ttft, s.ttftN, 0.95));
    set('queue_wait', s.waitN ? s.waitSum / s.waitN : undefined);
    if (s.prompt > 0 || s.tokensOut > 0) {
      set('tokens_in', s.tokensIn * perS);
      set('tokens_out', s.tokensOut * perS);
    }
    set('cached_share', s.prompt > 0 ? s.cached / s.prompt : undefined);
    set('cache_error', s.errN ? s.errSum / s.errN : undefined);
  }

  #ring(name: SeriesName, node: string, model: string | null): Ring | undefined {
    const key = `${name}\0${node}\0${model ?? ''}`;
    const kept = this.#series.get(key);
    if (kept) return kept.ring;
    if (this.#series.size >= this.#maxSeries) {
      if (!this.#full) this.#onFull(`history keeps at most ${this.#maxSeries} series; ${name} of ${node} ${model ?? ''} is not kept`);
      this.#full = true;
      return undefined;
    }
    const ring = new Ring(this.stepMs, this.#size);
    this.#series.set(key, { doc: { name, node, model }, ring });
    return ring;
  }
}
