// viiwork dashboards: a request's timeline (SPEC section 10), opened by a
// click on a decision-feed row: GET /v1/timeline/{id} from this node, which
// joins the executor's part across the hop. Phases are bars on one time
// axis (ms from the request's arrival at its entry); the routing decision's
// candidates and prices are a table under them.

import { getJson } from '/ui/api.js';
import { h } from '/ui/dom.js';

const PHASE_LABEL = { queue: 'queue wait', forward: 'forward', slot: 'slot wait', prefill: 'prefill → first token', decode: 'decode' };
const fmt = (v) => (typeof v === 'number' && Number.isFinite(v) ? `${Math.round(v * 10) / 10}` : '—');

function bars(doc) {
  const total = Math.max(1, doc.total_ms);
  const rows = doc.phases.map((p) => {
    const bar = h('span', { class: `tl-bar tl-${p.name}` });
    bar.style.marginLeft = `${(100 * p.from_ms) / total}%`;
    bar.style.width = `${Math.max(0.5, (100 * (p.to_ms - p.from_ms)) / total)}%`;
    return h(
      'div',
      { class: 'tl-row', 'data-phase': p.name, 'data-node': p.node },
      h('div', { class: 'tl-name' }, `${PHASE_LABEL[p.name] ?? p.name}`, h('span', { class: 'muted' }, ` on ${p.node}`)),
      h('div', { class: 'tl-track' }, bar),
      h('div', { class: 'tl-ms num' }, `${fmt(p.from_ms)}–${fmt(p.to_ms)} ms`),
    );
  });
  return h('div', { class: 'tl-bars' }, rows);
}

function decision(doc) {
  const d = doc.decision;
  if (!d || !Array.isArray(d.candidates) || !d.candidates.length) return null;
  const cols = ['Host', 'Free', 'Cached', 'Overhead', 'Per 1k', 'Release', 'RTT', 'Wait', 'Service', 'Score'];
  return h(
    'table',
    { class: 'tl-cands' },
    h('caption', null, `routing decision: ${d.reason}`),
    h('thead', null, h('tr', null, cols.map((c) => h('th', null, c)))),
    h(
      'tbody',
      null,
      d.candidates.map((c) =>
        h(
          'tr',
          { class: c.chosen ? 'chosen' : null, 'data-host': c.host },
          h('th', { scope: 'row' }, c.host, c.chosen ? ' ✓' : ''),
          [c.free, c.cached, c.overhead_ms, c.prefill_ms_per_1k, c.release_ms, c.rtt_ms, c.wait_ms, c.service_ms, c.score].map((v) => h('td', { class: 'num' }, fmt(v))),
        ),
      ),
    ),
  );
}

function show(doc) {
  const box = document.getElementById('timeline');
  const part = doc.executor_part;
  box.replaceChildren(
    h(
      'div',
      { class: 'tl-head' },
      h('strong', null, `request ${doc.id}`),
      ` · ${doc.model} · entry ${doc.entry} → executor ${doc.executor ?? '—'} · ${doc.outcome} · ${fmt(doc.total_ms)} ms`,
      doc.first_token_ms !== null ? ` · first token at ${fmt(doc.first_token_ms)} ms` : '',
      part && !part.joined ? h('div', { class: 'warn-text' }, `the executor's part is missing: ${part.error}`) : null,
    ),
    bars(doc),
    decision(doc),
  );
  box.hidden = false;
  box.dataset.id = doc.id;
}

async function open(id) {
  const box = document.getElementById('timeline');
  try {
    show(await getJson(`/v1/timeline/${encodeURIComponent(id)}`));
  } catch (err) {
    box.replaceChildren(h('p', { class: 'empty' }, `no timeline for ${id}: ${err instanceof Error ? err.message : err}`));
    box.hidden = false;
  }
}

document.getElementById('feed')?.addEventListener('click', (e) => {
  const row = e.target instanceof Element ? e.target.closest('tr[data-timeline]') : null;
  if (row) open(row.getAttribute('data-timeline'));
});
