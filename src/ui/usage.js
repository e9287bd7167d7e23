// viiwork dashboards: usage per key and model (SPEC section 12, "Usage"),
// from GET /v1/usage: every alive member's rows, merged by this node. The
// node decides whose rows a caller sees (a user key: its own; an admin key:
// every key's), so this table shows what it is given. Rows come per host;
// the table sums them per (key, model), with the hosts named.
//
// Polled every USAGE_POLL_MS rather than every second: each poll asks every
// member for its rows.

import { getJson } from '/ui/api.js';
import { h } from '/ui/dom.js';

const USAGE_POLL_MS = 5000;
const SPANS = [
  ['1h', 'last hour'],
  ['24h', 'last 24 h'],
  ['7d', 'last 7 days'],
  ['30d', 'last 30 days'],
];
const FIELDS = ['requests', 'prompt_cached', 'prompt_uncached', 'completion', 'errors', 'limited'];

const count = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
const fmt = (n) => n.toLocaleString('en-US');

/** Rows summed per (key, model), sorted by key then model; each with the hosts it ran on. */
export function usageByKeyModel(rows) {
  const by = new Map();
  for (const r of Array.isArray(rows) ? rows : []) {
    if (!r || typeof r.key !== 'string' || typeof r.model !== 'string') continue;
    const k = `${r.key}\u0000${r.model}`;
    let s = by.get(k);
    if (!s) by.set(k, (s = { key: r.key, model: r.model, hosts: new Set(), ...Object.fromEntries(FIELDS.map((f) => [f, 0])) }));
    for (const f of FIELDS) s[f] += count(r[f]);
    if (typeof r.host === 'string') s.hosts.add(r.host);
  }
  return [...by.values()].sort((a, b) => (a.key === b.key ? (a.model < b.model ? -1 : 1) : a.key < b.key ? -1 : 1));
}

function render(el, doc, error) {
  const span = el.dataset.since;
  if (error) {
    el.replaceChildren(h('p', { class: 'empty' }, `Usage is not available: ${error}`));
    return;
  }
  const rows = usageByKeyModel(doc.rows);
  const missing = Array.isArray(doc.missing) && doc.missing.length ? h('p', { class: 'muted small' }, `not answering, so not counted: ${doc.missing.map(String).join(', ')}`) : null;
  if (!rows.length) {
    el.replaceChildren(h('p', { class: 'empty' }, `No usage in the ${SPANS.find((s) => s[0] === span)?.[1] ?? span}. Usage is counted per key once the mesh has keys.`), missing);
    return;
  }
  const total = Object.fromEntries(FIELDS.map((f) => [f, rows.reduce((n, r) => n + r[f], 0)]));
  const numTh = (label, title) => h('th', { class: 'num', title }, label);
  const line = (r, cls) =>
    h(
      'tr',
      { class: cls, 'data-key': r.key, 'data-model': r.model },
      h('td', null, r.key),
      h('td', null, r.model),
      h('td', { class: 'muted' }, r.hosts ? [...r.hosts].sort().join(', ') : ''),
      FIELDS.map((f) => h('td', { class: f === 'errors' && r[f] > 0 ? 'num bad-text' : f === 'limited' && r[f] > 0 ? 'num warn-text' : 'num', 'data-field': f }, fmt(r[f]))),
    );
  el.replaceChildren(
    h(
      'table',
      { class: 'usage' },
      h(
        'thead',
        null,
        h(
          'tr',
          null,
          h('th', null, 'Key'),
          h('th', null, 'Model'),
          h('th', null, 'Hosts'),
          numTh('Requests'),
          numTh('Prompt cached', 'prompt tokens the engine served from its cache'),
          numTh('Prompt uncached', 'prompt tokens the engine had to prefill'),
          numTh('Completion'),
          numTh('Errors', 'engine answers of 400 or more'),
          numTh('Limit refusals', 'requests refused by the key’s limits (429 key_limit)'),
        ),
      ),
      h('tbody', null, rows.map((r) => line(r))),
      rows.length > 1 ? h('tfoot', null, line({ key: 'total', model: '', ...total }, 'total')) : null,
    ),
    missing,
  );
}

function start() {
  const el = document.getElementById('usage');
  const picker = document.getElementById('usage-since');
  if (!el) return;
  el.dataset.since = '24h';
  if (picker) {
    picker.replaceChildren(...SPANS.map(([v, label]) => h('option', { value: v, selected: v === '24h' }, label)));
    picker.addEventListener('change', () => {
      el.dataset.since = picker.value;
      void tick();
    });
  }
  let timer;
  // One poll at a time; a change of span polls at once and the next one follows USAGE_POLL_MS after it.
  const tick = async () => {
    clearTimeout(timer);
    try {
      render(el, await getJson(`/v1/usage?since=${encodeURIComponent(el.dataset.since)}`));
    } catch (err) {
      render(el, null, err instanceof Error ? err.message : String(err));
    } finally {
      timer = setTimeout(tick, USAGE_POLL_MS);
    }
  };
  void tick();
}

start();
