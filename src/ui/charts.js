// viiwork dashboards: the fleet over time (SPEC section 10). Charts of this
// node's GET /v1/history with uPlot (served by the node itself, no CDN):
// first-token times, throughput, queue and slots, cached share; per host or
// per model; over 15 min, 1 h or 6 h; refreshed every 5 s.
//
// Each chart's element carries data-lines (its legend) and data-points (the
// values it draws), so what it shows can be checked without reading pixels.

import uPlot from '/ui/uplot.js';
import { getJson } from '/ui/api.js';
import { h } from '/ui/dom.js';

const REFRESH_MS = 5000;
const RANGES = [
  ['15m', '15 min'],
  ['1h', '1 h'],
  ['6h', '6 h'],
];
const PAGE = document.body.dataset.page === 'node' ? 'node' : 'mesh';

/**
 * What each chart draws: lines of history series, one per host (or model),
 * combined over the other dimension by `agg`: summed (rates, gauges), the
 * worst (quantiles: the slowest model of a host), or weighted by another
 * series (a share, by the tokens it is a share of).
 */
const CHARTS = [
  { id: 'ttft', title: 'Time to first token', unit: 'ms', lines: [{ series: 'ttft_p50', label: 'p50', agg: 'max' }, { series: 'ttft_p95', label: 'p95', agg: 'max', dash: true }] },
  { id: 'throughput', title: 'Throughput', unit: 'req/s · tokens/s', lines: [{ series: 'requests', label: 'req/s', agg: 'sum' }, { series: 'tokens_out', label: 'tokens out/s', agg: 'sum', dash: true, scale: 'tok' }] },
  { id: 'queue', title: 'Queue and slots', unit: 'requests · slots', lines: [{ series: 'slots_busy', label: 'busy', agg: 'sum' }, { series: 'queue_depth', label: 'queued', agg: 'sum', dash: true }] },
  {
    id: 'cache',
    title: 'Cached share of prompt tokens',
    unit: '0–1',
    lines: [{ series: 'cached_share', label: 'cached', agg: 'weighted', weight: 'tokens_in' }],
    // Prompts ran but no engine counted its cache: say so, rather than "no data" or a share of 0 (issue 44 item 3).
    why: (has) => (has('tokens_in') && !has('cached_share') ? 'No engine here reports its cached prompt tokens, so there is no share to show.' : undefined),
  },
];
const NO_DATA = 'No data in this range yet.';
const WANTED = [...new Set(CHARTS.flatMap((c) => c.lines.flatMap((l) => [l.series, l.weight].filter(Boolean))))];

const PALETTE = ['#2f6fde', '#d9822b', '#1f8a4c', '#c0392b', '#8e44ad', '#16a085', '#7f8c8d', '#b7950b'];

const view = { range: PAGE === 'node' ? '1h' : '15m', by: PAGE === 'node' ? 'model' : 'host', self: null };
const plots = new Map();

function toolbar() {
  const group = (name, options, current, set) =>
    h(
      'div',
      { class: 'seg', role: 'group', 'aria-label': name },
      options.map(([value, label]) => {
        const b = h('button', { type: 'button', 'data-value': value, 'aria-pressed': String(value === current()) }, label);
        b.addEventListener('click', () => {
          set(value);
          for (const x of b.parentElement.children) x.setAttribute('aria-pressed', String(x === b));
          refresh();
        });
        return b;
      }),
    );
  const parts = [group('Range', RANGES, () => view.range, (v) => (view.range = v))];
  if (PAGE === 'mesh')
    parts.push(
      group(
        'Lines',
        [
          ['host', 'per host'],
          ['model', 'per model'],
        ],
        () => view.by,
        (v) => (view.by = v),
      ),
    );
  return h('div', { class: 'chart-tools' }, parts);
}

/** Steps from `since` to now, in seconds (uPlot's time scale), and a lookup of a step's index. */
function steps(stepMs, sinceMs, nowMs) {
  const first = Math.floor(sinceMs / stepMs);
  const last = Math.floor(nowMs / stepMs);
  const xs = [];
  for (let s = first; s <= last; s++) xs.push((s * stepMs) / 1000);
  return { xs, index: (ms) => Math.floor(ms / stepMs) - first };
}

/** One chart's uPlot data: x, then a line per (group, line definition); empty lines are left out. */
function chartData(chart, doc, sinceMs, nowMs) {
  const { xs, index } = steps(doc.step_ms, sinceMs, nowMs);
  const key = (s) => (view.by === 'host' ? s.node : s.model);
  const groups = new Map();
  for (const s of doc.series) {
    if (view.self !== null && s.node !== view.self) continue;
    const k = key(s);
    if (k === null || k === undefined) continue;
    if (!groups.has(k)) groups.set(k, new Map());
    const g = groups.get(k);
    if (!g.has(s.name)) g.set(s.name, []);
    g.get(s.name).push(s);
  }
  const names = [...groups.keys()].sort();
  const lines = [];
  names.forEach((name, gi) => {
    const g = groups.get(name);
    for (const def of chart.lines) {
      const ys = combine(def, g, xs.length, index);
      if (ys.every((v) => v === null)) continue;
      lines.push({ label: `${def.label} ${name}`, color: PALETTE[gi % PALETTE.length], dash: def.dash, scale: def.scale ?? 'y', ys });
    }
  });
  // Series with points in range, among those this view shows: a chart with no line says why from them.
  const has = (name) => doc.series.some((s) => s.name === name && (view.self === null || s.node === view.self) && s.points.some(([ms]) => ms >= sinceMs));
  return { xs, lines, empty: lines.length ? undefined : (chart.why?.(has) ?? NO_DATA) };
}

function combine(def, group, n, index) {
  const out = new Array(n).fill(null);
  const weights = def.agg === 'weighted' ? new Array(n).fill(0) : null;
  const weightAt = new Map();
  if (weights)
    for (const w of group.get(def.weight) ?? [])
      for (const [ms, v] of w.points) weightAt.set(`${w.node}\0${w.model}\0${ms}`, v);
  for (const s of group.get(def.series) ?? []) {
    for (const [ms, v] of s.points) {
      const i = index(ms);
      if (i < 0 || i >= n) continue;
      if (def.agg === 'sum') out[i] = (out[i] ?? 0) + v;
      else if (def.agg === 'max') out[i] = Math.max(out[i] ?? -Infinity, v);
      else {
        const w = weightAt.get(`${s.node}\0${s.model}\0${ms}`) ?? 0;
        if (w <= 0) continue;
        out[i] = (out[i] ?? 0) + v * w;
        weights[i] += w;
      }
    }
  }
  if (weights) for (let i = 0; i < n; i++) if (out[i] !== null) out[i] = weights[i] > 0 ? out[i] / weights[i] : null;
  return out;
}

function draw(chart, data) {
  const box = document.getElementById(`chart-${chart.id}`);
  if (!box) return;
  const area = box.querySelector('.plot');
  const signature = data.lines.map((l) => `${l.label}|${l.scale}`).join(',');
  const points = data.lines.reduce((n, l) => n + l.ys.filter((v) => v !== null).length, 0);
  box.dataset.lines = data.lines.map((l) => l.label).join('|');
  box.dataset.points = String(points);
  const none = box.querySelector('.none');
  none.hidden = data.lines.length > 0;
  if (data.empty && none.textContent !== data.empty) none.textContent = data.empty;
  const old = plots.get(chart.id);
  const aligned = [data.xs, ...data.lines.map((l) => l.ys)];
  if (old && old.signature === signature) {
    old.plot.setData(aligned);
    return;
  }
  old?.plot.destroy();
  if (!data.lines.length) return void plots.delete(chart.id);
  const scales = [...new Set(data.lines.map((l) => l.scale))];
  const opts = {
    width: Math.max(280, area.clientWidth || 560),
    height: 200,
    scales: { x: { time: true }, ...Object.fromEntries(scales.map((s) => [s, { auto: true, range: (_u, lo, hi) => [Math.min(0, lo), hi > 0 ? hi * 1.1 : 1] }])) },
    axes: [{}, ...scales.map((s, i) => ({ scale: s, side: i === 0 ? 3 : 1, grid: { show: i === 0 }, size: 56 }))],
    series: [{}, ...data.lines.map((l) => ({ label: l.label, stroke: l.color, width: 1.5, scale: l.scale, dash: l.dash ? [6, 4] : undefined, spanGaps: false, points: { show: false } }))],
    legend: { show: true },
    cursor: { drag: { x: false, y: false } },
  };
  plots.set(chart.id, { signature, plot: new uPlot(opts, aligned, area) });
}

let timer;
let busy = false;
async function refresh() {
  clearTimeout(timer);
  if (busy) return;
  busy = true;
  try {
    if (PAGE === 'node' && view.self === null) view.self = (await getJson('/health', { accept503: true })).node ?? null;
    const doc = await getJson(`/v1/history?series=${WANTED.join(',')}&since=-${view.range}`);
    const nowMs = Date.now();
    const span = { '15m': 15 * 60_000, '1h': 3_600_000, '6h': 6 * 3_600_000 }[view.range];
    // The node's clock decides the steps: the newest point is its "now".
    const newest = Math.max(nowMs, ...doc.series.map((s) => s.points.at(-1)?.[0] ?? 0));
    for (const chart of CHARTS) draw(chart, chartData(chart, doc, newest - span, newest));
    document.getElementById('charts').dataset.updated = String(nowMs);
  } catch (err) {
    // The page's own poll shows a lost connection; the charts keep what they drew.
    console.warn(`charts: ${err instanceof Error ? err.message : err}`);
  } finally {
    busy = false;
    timer = setTimeout(refresh, REFRESH_MS);
  }
}

function build() {
  const root = document.getElementById('charts');
  if (!root) return;
  root.replaceChildren(
    toolbar(),
    h(
      'div',
      { class: 'chart-grid' },
      CHARTS.map((c) => h('figure', { class: 'chart', id: `chart-${c.id}`, 'data-points': '0' }, h('figcaption', null, c.title, h('span', { class: 'muted small' }, ` ${c.unit}`)), h('p', { class: 'none empty' }, NO_DATA), h('div', { class: 'plot' }))),
    ),
  );
  refresh();
}

build();
