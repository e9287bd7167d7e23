/**
 * Per-model TTFT samples of this node's own executions, and the baseline
 * kept in `state_dir` so a restarted node publishes its last known speed
 * until fresh samples outweigh it.
 */
import fs from 'node:fs';
import path from 'node:path';
import { estimate, publish, SAMPLE_WINDOW_MS, type Baseline, type Published, type Sample } from './estimator.ts';

const MAX_SAMPLES = 2000;

export class PerfScores {
  readonly #samples = new Map<string, Sample[]>();
  #baselines: Record<string, Baseline> = {};
  readonly #file: string | undefined;
  #dirty = false;

  constructor(
    stateDir: string | undefined,
    private readonly now: () => number = Date.now,
  ) {
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
  }

  published(model: string): Published {
    return publish(estimate(this.#samples.get(model) ?? [], this.now()), this.#baselines[model] ?? {});
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
}
