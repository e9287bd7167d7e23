/**
 * The CLI's pictures of the last minutes (`viiwork status`, `viiwork top`):
 * one-line sparklines of GET /v1/history series, per host.
 */
import type { HistoryDoc, SeriesDoc } from '../history/store.ts';

const BARS = '▁▂▃▄▅▆▇█';

/** Values as block characters scaled to their own maximum (a missing value is a space; all zero is the lowest bar). */
export function sparkline(values: readonly (number | null)[]): string {
  const max = Math.max(0, ...values.filter((v): v is number => v !== null));
  return values.map((v) => (v === null ? ' ' : BARS[max > 0 ? Math.min(BARS.length - 1, Math.floor((v / max) * (BARS.length - 1) + 0.5)) : 0])).join('');
}

/** A series' values on the steps from `from` to `to` (ms), combined over the models of a host by `agg`. */
export function stepValues(series: readonly SeriesDoc[], stepMs: number, from: number, to: number, agg: 'sum' | 'max'): (number | null)[] {
  const first = Math.floor(from / stepMs);
  const n = Math.floor(to / stepMs) - first + 1;
  const out: (number | null)[] = new Array(n).fill(null);
  for (const s of series)
    for (const [ms, v] of s.points) {
      const i = Math.floor(ms / stepMs) - first;
      if (i < 0 || i >= n) continue;
      out[i] = out[i] === null ? v : agg === 'sum' ? out[i]! + v : Math.max(out[i]!, v);
    }
  return out;
}

/** `values` squeezed to at most `width` characters: each the mean (rates, slots) or the max (quantiles) of its steps. */
export function squeeze(values: readonly (number | null)[], width: number, agg: 'mean' | 'max'): (number | null)[] {
  const per = Math.max(1, Math.ceil(values.length / width));
  const out: (number | null)[] = [];
  for (let i = 0; i < values.length; i += per) {
    const xs = values.slice(i, i + per).filter((v): v is number => v !== null);
    out.push(xs.length === 0 ? null : agg === 'max' ? Math.max(...xs) : xs.reduce((a, b) => a + b, 0) / xs.length);
  }
  return out;
}

const fmt = (v: number | null | undefined, unit = '') => (v === null || v === undefined ? '-' : `${v >= 100 ? Math.round(v) : Math.round(v * 10) / 10}${unit}`);

/** Characters per sparkline: 15 minutes of 10 s steps in 30, each character 30 s. */
const DEFAULT_WIDTH = 30;

/**
 * One row per host: requests/s, first-token p95 (its slowest model) and busy
 * slots over the window, each a sparkline with its latest value.
 */
export function historyRows(doc: HistoryDoc, now: number, windowMs = 15 * 60_000, width = DEFAULT_WIDTH): string[][] {
  const step = doc.step_ms;
  const from = now - windowMs;
  const hosts = [...new Set(doc.series.map((s) => s.node))].sort();
  const of = (host: string, name: string) => doc.series.filter((s) => s.node === host && s.name === name);
  const last = (xs: (number | null)[]) => [...xs].reverse().find((v) => v !== null) ?? null;
  return hosts.map((host) => {
    const req = stepValues(of(host, 'requests'), step, from, now, 'sum');
    const ttft = stepValues(of(host, 'ttft_p95'), step, from, now, 'max');
    const busy = stepValues(of(host, 'slots_busy'), step, from, now, 'sum');
    return [host, sparkline(squeeze(req, width, 'mean')), fmt(last(req), '/s'), sparkline(squeeze(ttft, width, 'max')), fmt(last(ttft), ' ms'), sparkline(squeeze(busy, width, 'mean')), fmt(last(busy))];
  });
}

/** The series the CLI asks for. */
export const CLI_SERIES = 'requests,ttft_p95,slots_busy,queue_depth';
