// viiwork dashboards: the DOM helpers and number formats every page module
// shares. Every string that came over the network reaches the DOM through a
// text node or setAttribute, never as markup; class names come only from
// the constants here and in the page modules.

/** Member, backend and health states → pill colour. Unknown states stay neutral. */
export const TONE = {
  alive: 'ok',
  suspect: 'warn',
  dead: 'bad',
  left: '',
  healthy: 'ok',
  starting: 'warn',
  unhealthy: 'bad',
  stopped: '',
  ok: 'ok',
  fresh: 'ok',
  stale: 'warn',
  open: 'warn',
  secured: 'ok',
};

// ---------------------------------------------------------------- DOM helpers

/** An element with attributes and children; strings become text nodes. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

export function pill(text, tone) {
  const t = tone ?? TONE[text] ?? '';
  return h('span', { class: t ? `pill ${t}` : 'pill' }, text ?? '?');
}

export function tag(text) {
  return h('span', { class: 'tag' }, text);
}

export function empty(text) {
  return h('p', { class: 'empty' }, text);
}

/** A table from column headings and rows (arrays of cells, or <tr> elements). */
export function table(cols, rows, cls) {
  return h(
    'table',
    { class: cls },
    h('thead', null, h('tr', null, cols.map((c) => (typeof c === 'string' ? h('th', null, c) : c)))),
    h('tbody', null, rows),
  );
}

export function td(content, cls) {
  return h('td', cls ? { class: cls } : null, content);
}

/** Replace a container's content, but only when what it shows has changed. */
const shown = new Map();
export function put(id, key, build) {
  const el = document.getElementById(id);
  if (!el) return;
  const k = JSON.stringify(key);
  if (shown.get(id) === k) return;
  shown.set(id, k);
  el.replaceChildren(...[build()].flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

// ------------------------------------------------------------------- formats

export const isNum = (v) => typeof v === 'number' && Number.isFinite(v);
export const num = (v, unit = '') => (isNum(v) ? `${Math.round(v * 10) / 10}${unit}` : '—');
export const text = (v) => (v === undefined || v === null || v === '' ? '—' : String(v));

export function ago(ms) {
  if (!isNum(ms)) return '—';
  if (ms < 0) ms = 0;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)} min`;
  if (ms < 86_400_000) return `${Math.floor(ms / 3_600_000)} h ${Math.floor((ms % 3_600_000) / 60_000)} min`;
  return `${Math.floor(ms / 86_400_000)} d`;
}

export function clock(ms) {
  if (!isNum(ms)) return '—';
  const d = new Date(ms);
  const p = (n, w = 2) => String(n).padStart(w, '0');
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

export function list(v) {
  return Array.isArray(v) && v.length ? v.map(String).join(', ') : '—';
}

export function meter(busy, slots) {
  const frac = slots > 0 ? Math.min(1, Math.max(0, busy / slots)) : 0;
  const bar = h('span');
  bar.style.width = `${Math.round(frac * 100)}%`;
  return h('div', { class: frac >= 1 ? 'meter full' : frac >= 0.75 ? 'meter mid' : 'meter', 'aria-hidden': 'true' }, bar);
}

export function outcomeTone(outcome) {
  const o = String(outcome);
  if (/^2\d\d$/.test(o) || o === 'ok' || o === 'done') return 'ok-text';
  if (o === '429' || o === 'aborted' || o === 'refused') return 'warn-text';
  return 'bad-text';
}
