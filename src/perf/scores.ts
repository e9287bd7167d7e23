/**
 * Per-model TTFT samples of this node's own executions, and the baseline
 * kept in `state_dir` so a restarted node publishes its last known speed
 * until fresh samples outweigh it.
 */
import fs from 'node:fs';
import path from 'node:path';
import { estimate, publish, SAMPLE_WINDOW_MS, type Baseline, type Published, type Sample } from './estimator.ts';

/** Medians over the most recent samples are plenty; the cap keeps each estimate to microseconds. */
const MAX_SAMPLES = 512;

export class PerfScores {
  readonly #samples = new Map<string, Sample[]>();
  #baselines: Record<string, Baseline> = {};
  readonly #dir: string | undefined;
  readonly #file: string | undefined;
  #dirty = false;
  /** Published values per model, valid until a sample is added or the oldest one leaves the window. */
  readonly #cache = new Map<string, { value: Published; validUntil: number; computedAt: number; stale: boolean }>();

  constructor(
    stateDir: string | undefined,
    private readonly now: () => number = Date.now,
  ) {
    this.#dir = stateDir;
    this.#file = stateDir ? path.join(stateDir, 'perf-baseline.json') : undefined;
    if (this.#file) {
      try {
        const doc = JSON.parse(fs.readFileSync(this.#file, 'utf8'));
        if (doc && typeof doc === 'object' && doc.models && typeof doc.models === 'object') this.#baselines = doc.models;
      } catch {
        // No baseline yet, or an unreadable one: start from measurements alone.
      }
    }
  }

  record(model: string, promptTokens: number, ttftMs: number): void {
    if (!(promptTokens > 0) || !(ttftMs >= 0)) return;
    let list = this.#samples.get(model);
    if (!list) this.#samples.set(model, (list = []));
    const now = this.now();
    list.push({ at: now, promptTokens, ttftMs });
    while (list.length > MAX_SAMPLES || (list.length && now - list[0].at > SAMPLE_WINDOW_MS)) list.shift();
    this.#dirty = true;
    const hit = this.#cache.get(model);
    if (hit) hit.stale = true;
  }

  /**
   * What /v1/capacity publishes for the model. Routing asks on every request
   * and may take a value up to `maxAgeMs` old; the report asks for the
   * current one (maxAgeMs 0).
   */
  published(model: string, maxAgeMs = 0): Published {
    const now = this.now();
    const hit = this.#cache.get(model);
    if (hit && now < hit.validUntil && (!hit.stale || now - hit.computedAt < maxAgeMs)) return hit.value;
    const samples = this.#samples.get(model) ?? [];
    const value = publish(estimate(samples, now), this.#baselines[model] ?? {});
    const oldest = samples.find((s) => now - s.at <= SAMPLE_WINDOW_MS);
    this.#cache.set(model, { value, validUntil: oldest ? oldest.at + SAMPLE_WINDOW_MS + 1 : Infinity, computedAt: now, stale: false });
    return value;
  }

  /** Write the current published values as the new baseline (on an interval and at shutdown). */
  save(): void {
    if (!this.#file || !this.#dirty) return;
    const models: Record<string, Baseline> = { ...this.#baselines };
    for (const model of this.#samples.keys()) {
      const p = this.published(model);
      models[model] = { ttft_overhead_ms: p.ttft_overhead_ms, prefill_ms_per_1k: p.prefill_ms_per_1k };
    }
    fs.mkdirSync(path.dirname(this.#file), { recursive: true });
    const tmp = `${this.#file}.tmp`;
    fs.writeFileSync(tmp, JSON.stringify({ v: 1, models }, null, 1));
    fs.renameSync(tmp, this.#file);
    this.#dirty = false;
  }

  /** save(), a failure handed to `warn` instead of thrown: the node goes on serving, and the next save tries again. */
  trySave(warn: (msg: string) => void): void {
    try {
      this.save();
    } catch (err) {
      warn(`cannot save performance baseline in ${this.#dir}: ${(err as Error).message}`);
    }
  }
}
