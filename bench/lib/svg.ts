/**
 * Charts for the benchmark results, written as plain SVG text (no
 * dependency): a line chart (one line per series over a numeric x axis,
 * linear or log y) and a grouped bar chart. Self-contained files with a
 * white background, so they read the same embedded in Markdown on a light
 * or dark page.
 */

const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b', '#e377c2', '#17becf', '#7f7f7f', '#bcbd22'];
const FONT = 'font-family="Helvetica, Arial, sans-serif"';

export function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

function num(x: number): string {
  return Number.isInteger(x) ? String(x) : x.toFixed(2).replace(/\.?0+$/, '');
}

/** A short label for an axis value: 1200 → "1.2k". */
export function shortNumber(v: number): string {
  if (Math.abs(v) >= 1000) return `${num(v / 1000)}k`;
  return num(Math.abs(v) < 10 ? Math.round(v * 100) / 100 : Math.round(v));
}

/** Ticks 1-2-5 per decade between lo and hi (log axis). */
export function logTicks(lo: number, hi: number): number[] {
  const out: number[] = [];
  // Less than a decade: 1, 1.5, 2, 3, 4, 5, 7 per decade, so the axis still has a few labels.
  const steps = hi / lo < 10 ? [1, 1.5, 2, 3, 4, 5, 7] : [1, 2, 5];
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
    for (const m of steps) {
      const v = m * 10 ** e;
      if (v >= lo * 0.999 && v <= hi * 1.001) out.push(v);
    }
  }
  return out;
}

/** About `n` round ticks from 0 (or lo) to hi (linear axis). */
export function linearTicks(lo: number, hi: number, n = 5): number[] {
  const span = hi - lo || 1;
  const raw = span / n;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? 10 * mag;
  const out: number[] = [];
  // Up to the first tick at or above hi, so the top of the axis is labelled.
  for (let v = Math.ceil(lo / step) * step; ; v += step) {
    out.push(Math.round(v * 1e6) / 1e6);
    if (v >= hi - step * 1e-9) break;
  }
  return out;
}

export interface Series {
  name: string;
  points: { x: number; y: number | null }[];
  dashed?: boolean;
}

export interface LineChart {
  title: string;
  subtitle?: string;
  xLabel: string;
  yLabel: string;
  series: Series[];
  xTicks: { value: number; label: string }[];
  logY?: boolean;
  /** Horizontal reference lines, e.g. a target. */
  refs?: { y: number; label: string }[];
  width?: number;
  height?: number;
}

/** The plot area of a chart, in pixels. */
interface Frame {
  left: number;
  top: number;
  pw: number;
  ph: number;
}

/** The plot area of a W × H chart with these margins (the top one leaves room for a subtitle when there is one). */
function frameOf(W: number, H: number, left: number, right: number, bottom: number, subtitle?: string): Frame {
  const top = subtitle ? 62 : 46;
  return { left, top, pw: W - left - right, ph: H - top - bottom };
}

/** The opening of a chart: the svg element, a white background, title and subtitle. */
function opening(W: number, H: number, left: number, title: string, subtitle?: string): string[] {
  const out = [`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" ${FONT}>`, `<rect width="${W}" height="${H}" fill="#ffffff"/>`];
  out.push(`<text x="${left}" y="24" font-size="16" font-weight="bold" fill="#222">${esc(title)}</text>`);
  if (subtitle) out.push(`<text x="${left}" y="44" font-size="12" fill="#555">${esc(subtitle)}</text>`);
  return out;
}

/** Horizontal grid lines with their labels on the y axis. */
function yGrid(f: Frame, ticks: number[], yPos: (y: number) => number): string[] {
  return ticks.flatMap((t) => {
    const y = yPos(t).toFixed(1);
    return [
      `<line x1="${f.left}" x2="${f.left + f.pw}" y1="${y}" y2="${y}" stroke="#e5e5e5"/>`,
      `<text x="${f.left - 6}" y="${(yPos(t) + 4).toFixed(1)}" font-size="11" text-anchor="end" fill="#444">${shortNumber(t)}</text>`,
    ];
  });
}

/** Dashed reference lines (a target), labelled at the left or right end. */
function refLines(f: Frame, refs: { y: number; label: string }[], yPos: (y: number) => number, labelAt: 'left' | 'right'): string[] {
  return refs.flatMap((r) => {
    const y = yPos(r.y);
    const x = labelAt === 'left' ? `x="${f.left + 4}"` : `x="${f.left + f.pw - 4}" text-anchor="end"`;
    return [
      `<line x1="${f.left}" x2="${f.left + f.pw}" y1="${y.toFixed(1)}" y2="${y.toFixed(1)}" stroke="#555" stroke-dasharray="2 3"/>`,
      `<text ${x} y="${(y - 4).toFixed(1)}" font-size="10" fill="#555">${esc(r.label)}</text>`,
    ];
  });
}

export function lineChart(c: LineChart): string {
  const W = c.width ?? 760;
  const H = c.height ?? 440;
  const frame = frameOf(W, H, 70, 190, 56, c.subtitle);
  const { left, top, pw, ph } = frame;
  const ys = c.series.flatMap((s) => s.points.map((p) => p.y)).filter((y): y is number => y !== null && Number.isFinite(y) && (!c.logY || y > 0));
  const xs = c.xTicks.map((t) => t.value);
  const xMin = Math.min(...xs);
  const xMax = Math.max(...xs);
  let yMin = ys.length ? Math.min(...ys) : 1;
  let yMax = ys.length ? Math.max(...ys) : 10;
  for (const r of c.refs ?? []) {
    yMin = Math.min(yMin, r.y);
    yMax = Math.max(yMax, r.y);
  }
  let yTicks: number[];
  let yPos: (y: number) => number;
  if (c.logY) {
    const lo = Math.log10(Math.max(yMin, 1e-9)) - 0.05;
    const hi = Math.log10(yMax) + 0.08;
    yTicks = logTicks(10 ** lo, 10 ** hi);
    yPos = (y) => top + ph - ((Math.log10(y) - lo) / (hi - lo)) * ph;
  } else {
    yMin = 0;
    yTicks = linearTicks(0, yMax * 1.08);
    const hi = Math.max(yTicks[yTicks.length - 1], yMax);
    yPos = (y) => top + ph - (y / hi) * ph;
  }
  const xPos = (x: number) => left + (xMax === xMin ? pw / 2 : ((x - xMin) / (xMax - xMin)) * pw);
  const out = opening(W, H, left, c.title, c.subtitle);
  out.push(...yGrid(frame, yTicks, yPos));
  for (const t of c.xTicks) {
    const x = xPos(t.value);
    out.push(`<line x1="${x.toFixed(1)}" x2="${x.toFixed(1)}" y1="${top}" y2="${top + ph}" stroke="#f0f0f0"/>`);
    out.push(`<text x="${x.toFixed(1)}" y="${top + ph + 18}" font-size="11" text-anchor="middle" fill="#444">${esc(t.label)}</text>`);
  }
  out.push(`<rect x="${left}" y="${top}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`);
  out.push(`<text x="${left + pw / 2}" y="${H - 12}" font-size="12" text-anchor="middle" fill="#222">${esc(c.xLabel)}</text>`);
  out.push(`<text transform="translate(16 ${top + ph / 2}) rotate(-90)" font-size="12" text-anchor="middle" fill="#222">${esc(c.yLabel)}${c.logY ? ' (log scale)' : ''}</text>`);
  out.push(...refLines(frame, c.refs ?? [], yPos, 'left'));
  c.series.forEach((s, k) => {
    const color = PALETTE[k % PALETTE.length];
    const pts = s.points.filter((p) => p.y !== null && Number.isFinite(p.y) && (!c.logY || p.y > 0)) as { x: number; y: number }[];
    if (pts.length > 1) {
      const d = pts.map((p, i) => `${i ? 'L' : 'M'}${xPos(p.x).toFixed(1)} ${yPos(p.y).toFixed(1)}`).join(' ');
      out.push(`<path d="${d}" fill="none" stroke="${color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6 4"' : ''}/>`);
    }
    for (const p of pts) out.push(`<circle cx="${xPos(p.x).toFixed(1)}" cy="${yPos(p.y).toFixed(1)}" r="3.5" fill="${color}"><title>${esc(`${s.name}: ${shortNumber(p.y)}`)}</title></circle>`);
    const ly = top + 8 + k * 20;
    out.push(`<line x1="${left + pw + 14}" x2="${left + pw + 40}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6 4"' : ''}/>`);
    out.push(`<circle cx="${left + pw + 27}" cy="${ly}" r="3.5" fill="${color}"/>`);
    out.push(`<text x="${left + pw + 46}" y="${ly + 4}" font-size="12" fill="#222">${esc(s.name)}</text>`);
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}

export interface BarChart {
  title: string;
  subtitle?: string;
  yLabel: string;
  /** Bars within each group, in `series` order; null: not measured (drawn as a gap with a note). */
  groups: { label: string; values: (number | null)[]; notes?: (string | undefined)[] }[];
  series: string[];
  refs?: { y: number; label: string }[];
  width?: number;
  height?: number;
}

export function barChart(c: BarChart): string {
  const W = c.width ?? 760;
  const H = c.height ?? 420;
  const frame = frameOf(W, H, 64, 170, 60, c.subtitle);
  const { left, top, pw, ph } = frame;
  const vals = c.groups.flatMap((g) => g.values).filter((v): v is number => v !== null && Number.isFinite(v));
  const yMax = Math.max(...vals, ...(c.refs ?? []).map((r) => r.y), 0.001);
  const ticks = linearTicks(0, yMax * 1.1);
  const hi = Math.max(ticks[ticks.length - 1], yMax);
  const yPos = (y: number) => top + ph - (y / hi) * ph;
  const gw = pw / c.groups.length;
  const bw = Math.min(28, (gw * 0.8) / c.series.length);
  const out = opening(W, H, left, c.title, c.subtitle);
  out.push(...yGrid(frame, ticks, yPos));
  out.push(`<text transform="translate(16 ${top + ph / 2}) rotate(-90)" font-size="12" text-anchor="middle" fill="#222">${esc(c.yLabel)}</text>`);
  c.groups.forEach((g, gi) => {
    const gx = left + gi * gw + (gw - bw * c.series.length) / 2;
    g.values.forEach((v, si) => {
      const x = gx + si * bw;
      const color = PALETTE[si % PALETTE.length];
      if (v === null || !Number.isFinite(v)) {
        out.push(`<text transform="translate(${(x + bw / 2 + 3).toFixed(1)} ${top + ph - 4}) rotate(-90)" font-size="9" fill="#999">${esc(g.notes?.[si] ?? '–')}</text>`);
        return;
      }
      const y = yPos(v);
      out.push(`<rect x="${x.toFixed(1)}" y="${y.toFixed(1)}" width="${(bw - 2).toFixed(1)}" height="${(top + ph - y).toFixed(1)}" fill="${color}"><title>${esc(`${g.label}, ${c.series[si]}: ${shortNumber(v)}`)}</title></rect>`);
      out.push(`<text x="${(x + bw / 2 - 1).toFixed(1)}" y="${(y - 3).toFixed(1)}" font-size="9" text-anchor="middle" fill="#333">${shortNumber(v)}</text>`);
    });
    out.push(`<text x="${(left + gi * gw + gw / 2).toFixed(1)}" y="${top + ph + 18}" font-size="11" text-anchor="middle" fill="#222">${esc(g.label)}</text>`);
  });
  out.push(`<rect x="${left}" y="${top}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`);
  out.push(...refLines(frame, c.refs ?? [], yPos, 'right'));
  c.series.forEach((s, k) => {
    const ly = top + 8 + k * 20;
    out.push(`<rect x="${left + pw + 14}" y="${ly - 6}" width="14" height="12" fill="${PALETTE[k % PALETTE.length]}"/>`);
    out.push(`<text x="${left + pw + 34}" y="${ly + 4}" font-size="12" fill="#222">${esc(s)}</text>`);
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}
