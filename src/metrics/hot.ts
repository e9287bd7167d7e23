/**
 * Counters and histograms for the request path. prom-client's own cost
 * 0.3–0.8 µs per update (it sorts and joins the label names into a key and
 * validates them on every call): with half a dozen updates per request, 2–3%
 * of a node's busy time under load. These keep each series in Maps keyed by
 * the label values in declared order (the types already hold the label
 * names), and hand prom-client's Registry what its own metrics hand it at a
 * scrape (`get()`), so the exposition stays prom-client's, byte for byte.
 */
import type { Metric, Registry } from 'prom-client';

interface Options<L extends string> {
  name: string;
  help: string;
  labelNames: readonly L[];
  registers: Registry[];
}

/** One value as prom-client's Registry formats it (its `metricName` and `sharedLabels` as its Histogram sets them). */
interface Exposed {
  labels: Partial<Record<string, string | number>>;
  value: number;
  metricName?: string;
  sharedLabels?: Partial<Record<string, string>>;
}

/** A label's values, each to the next label's level; the last label's to the series. */
type Level<S> = Map<string | undefined, Level<S> | S>;

/** A series' labels: every declared name, or some left out (gen_ai's error_type is set only on failures). */
export type Labels<L extends string> = Partial<Record<L, string>>;

abstract class HotMetric<L extends string, S extends { labels: Labels<L> }> {
  readonly name: string;
  readonly help: string;
  readonly aggregator = 'sum';
  abstract readonly type: 'counter' | 'histogram';
  readonly labelNames: readonly L[];
  #root: Level<S> = new Map();
  #all: S[] = [];

  constructor(opts: Options<L>) {
    this.name = opts.name;
    this.help = opts.help;
    this.labelNames = opts.labelNames;
    // The Registry reads a metric through get(), name, help, type and aggregator: the interface its own metrics have.
    for (const r of opts.registers) r.registerMetric(this as unknown as Metric);
  }

  /** The series of a label set; a label left out (undefined) is absent from the series, as in prom-client. */
  protected seriesOf(labels: Labels<L>, make: (labels: Labels<L>) => S): S {
    // One Map per label, keyed by its value: no key string is built (and hashed) per update.
    const names = this.labelNames;
    let level: Level<S> = this.#root;
    for (let i = 0; i < names.length; i++) {
      const v = labels[names[i]];
      let next = level.get(v);
      if (next === undefined) {
        next = i === names.length - 1 ? this.#add(labels, make) : new Map();
        level.set(v, next);
      }
      level = next as Level<S>;
    }
    return names.length === 0 ? (this.#all[0] ?? this.#add(labels, make)) : (level as unknown as S);
  }

  #add(labels: Labels<L>, make: (labels: Labels<L>) => S): S {
    // A copy of the caller's labels, in declared order, with nothing extra.
    const own: Labels<L> = {};
    for (const name of this.labelNames) {
      const v = labels[name];
      if (v !== undefined) own[name] = String(v);
    }
    const s = make(own);
    this.#all.push(s);
    return s;
  }

  /** Every series, in the order first seen. */
  protected get series(): readonly S[] {
    return this.#all;
  }

  protected abstract values(): Exposed[];

  async get(): Promise<{ name: string; help: string; type: string; aggregator: string; values: Exposed[] }> {
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values: this.values() };
  }

  reset(): void {
    this.#root = new Map();
    this.#all = [];
    // A metric without labels shows its one series from the start, as prom-client's do.
    if (this.labelNames.length === 0) this.seriesOf({}, this.fresh);
  }

  /** A new series of these labels, at zero. */
  protected abstract readonly fresh: (labels: Labels<L>) => S;
}

interface CounterSeries<L extends string> {
  labels: Labels<L>;
  value: number;
}

export class HotCounter<L extends string> extends HotMetric<L, CounterSeries<L>> {
  readonly type = 'counter';

  constructor(opts: Options<L>) {
    super(opts);
    this.reset();
  }

  /** Adds `n` (1 by default); a counter never falls, so a negative or non-finite `n` is dropped, not thrown on the request path. */
  inc(labels: Labels<L>, n = 1): void {
    if (!(n >= 0) || n === Infinity) return;
    this.seriesOf(labels, this.fresh).value += n;
  }

  protected readonly fresh = (labels: Labels<L>): CounterSeries<L> => ({ labels, value: 0 });

  protected values(): Exposed[] {
    return this.series.map((s) => ({ labels: s.labels, value: s.value }));
  }
}

interface HistogramSeries<L extends string> {
  labels: Labels<L>;
  /** Observations per bucket (not cumulative); the last counts those above every bound. */
  counts: number[];
  sum: number;
  count: number;
}

export class HotHistogram<L extends string> extends HotMetric<L, HistogramSeries<L>> {
  readonly type = 'histogram';
  readonly buckets: readonly number[];

  constructor(opts: Options<L> & { buckets: readonly number[] }) {
    super(opts);
    this.buckets = [...opts.buckets].sort((a, b) => a - b);
    this.reset();
  }

  protected readonly fresh = (labels: Labels<L>): HistogramSeries<L> => ({ labels, counts: new Array<number>(this.buckets.length + 1).fill(0), sum: 0, count: 0 });

  /** Records one value; a non-finite one is dropped. */
  observe(labels: Labels<L>, value: number): void {
    if (!Number.isFinite(value)) return;
    const s = this.seriesOf(labels, this.fresh);
    const b = this.buckets;
    let i = 0;
    while (i < b.length && value > b[i]) i++;
    s.counts[i]++;
    s.sum += value;
    s.count++;
  }

  protected values(): Exposed[] {
    const out: Exposed[] = [];
    const bucket = `${this.name}_bucket`;
    for (const s of this.series) {
      let acc = 0;
      for (let i = 0; i < this.buckets.length; i++) {
        acc += s.counts[i];
        out.push({ labels: { le: this.buckets[i] }, value: acc, metricName: bucket, sharedLabels: s.labels });
      }
      out.push(
        { labels: { le: '+Inf' }, value: s.count, metricName: bucket, sharedLabels: s.labels },
        { labels: {}, value: s.sum, metricName: `${this.name}_sum`, sharedLabels: s.labels },
        { labels: {}, value: s.count, metricName: `${this.name}_count`, sharedLabels: s.labels },
      );
    }
    return out;
  }
}
