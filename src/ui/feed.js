// viiwork dashboards: the decision feed (SPEC section 10), the mesh page's
// list of this node's last routing decisions, newest first. It asks the node
// only for what came since the last poll, and a row, once shown, stays the
// same element until it falls off the end: in a busy fleet new decisions
// arrive every second, and a row rebuilt under the operator's pointer would
// swallow the click that opens its timeline. At a hundred decisions a second
// even a kept row falls off the end before a hand can reach it, so while the
// pointer is on the feed the rows shown hold still (the polls go on, and a
// pill counts what is held back); leaving the feed shows them.

import { getJson } from '/ui/api.js';
import { ago, clock, empty, h, isNum, num, outcomeTone, table, td, text } from '/ui/dom.js';

const FEED_KEEP = 100;

const feed = { since: 0, rows: [], loaded: false, freshSeqs: new Set() };

export async function pollDecisions() {
  const doc = await getJson(`/v1/decisions?since=${feed.since}`);
  const last = isNum(doc.last) ? doc.last : 0;
  if (last < feed.since) {
    // The node restarted: its sequence began again, so a shown row's number may now name another decision.
    feed.since = 0;
    feed.rows = [];
    for (const tr of shownRows.values()) tr.remove();
    shownRows.clear();
    return pollDecisions();
  }
  const incoming = (Array.isArray(doc.data) ? doc.data : []).filter((d) => d && isNum(d.seq) && d.seq > feed.since);
  incoming.sort((a, b) => b.seq - a.seq);
  feed.freshSeqs = feed.loaded ? new Set(incoming.map((d) => d.seq)) : new Set();
  feed.rows = [...incoming, ...feed.rows].slice(0, FEED_KEEP);
  feed.since = Math.max(feed.since, last);
  feed.loaded = true;
  return feed.rows;
}

const COLUMNS = [
  'Time',
  'Entry',
  'Executor',
  'Model',
  'Workload',
  'Route',
  ['Queued', null],
  ['TTFT', null],
  ['Cached pred. / engine', 'Prompt tokens the entry predicted the engine holds, and the engine’s own count'],
  'Outcome',
];

/** The <tr> of each decision shown, by its sequence number. */
const shownRows = new Map();

/** The pointer is on the feed: what is shown holds still. */
let holding = false;

const feedBox = document.getElementById('feed');
feedBox?.addEventListener('pointerenter', () => {
  holding = true;
});
feedBox?.addEventListener('pointerleave', () => {
  holding = false;
  renderFeed(feed.rows);
});

/** The pill that says the feed holds still, and how many newer decisions wait behind it. */
function showHeld(rows) {
  const pill = document.getElementById('feed-held');
  if (!pill) return;
  const newestShown = Math.max(0, ...shownRows.keys());
  const waiting = holding ? rows.filter((d) => d.seq > newestShown).length : 0;
  pill.hidden = !holding;
  pill.setAttribute('data-waiting', String(waiting));
  const say = holding ? `held while pointing${waiting ? `: ${waiting} newer` : ''}` : '';
  if (pill.textContent !== say) pill.textContent = say;
}

export function renderFeed(rows) {
  const box = feedBox;
  if (!box) return;
  showHeld(rows);
  if (holding && shownRows.size) return;
  if (!rows.length) {
    shownRows.clear();
    const none = 'No requests yet. Each routing decision made by this node appears here as it ends.';
    if (box.textContent !== none) box.replaceChildren(empty(none));
    return;
  }
  let body = box.querySelector('tbody');
  if (!body) {
    shownRows.clear();
    const cols = COLUMNS.map((c) => (typeof c === 'string' ? c : h('th', { class: 'num', title: c[1] }, c[0])));
    box.replaceChildren(table(cols, [], 'feed'));
    body = box.querySelector('tbody');
  }
  const keep = new Set(rows.map((d) => d.seq));
  for (const [seq, tr] of shownRows) {
    if (keep.has(seq)) continue;
    tr.remove();
    shownRows.delete(seq);
  }
  // Newest first: place each row after the one before it, moving nothing that is already in place.
  let before = null;
  for (const d of rows) {
    let tr = shownRows.get(d.seq);
    if (!tr) {
      tr = row(d);
      shownRows.set(d.seq, tr);
    }
    tr.classList.toggle('fresh', feed.freshSeqs.has(d.seq));
    const slot = before ? before.nextSibling : body.firstChild;
    if (tr !== slot) body.insertBefore(tr, slot);
    before = tr;
  }
}

function row(d) {
  return h(
    'tr',
    { 'data-seq': d.seq, 'data-timeline': d.timeline, title: d.timeline ? 'click: this request’s timeline' : null },
    td(clock(d.at), 'mono'),
    td(text(d.entry)),
    td(text(d.executor)),
    td(d.alias ? [text(d.alias), h('span', { class: 'muted' }, ' → '), text(d.model)] : text(d.model)),
    td(text(d.workload)),
    td(text(d.route)),
    td(num(d.queued_ms, ' ms'), 'num'),
    td(num(d.ttft_ms, ' ms'), 'num'),
    td(cachedCell(d), 'num'),
    d.lifecycle ? td([text(d.lifecycle.event), h('span', { class: 'muted' }, ` (${text(d.lifecycle.reason)}): ${text(d.lifecycle.detail)}`)], 'wrap') : td(text(d.outcome), outcomeTone(d.outcome)),
  );
}

/** Predicted against actual cached tokens (issue 17): how well routing knows the caches, per request; the slot it took, what it evicted (issue 25). */
function cachedCell(d) {
  if (!isNum(d.predicted_cached) && !isNum(d.cached_tokens)) return '—';
  const slot = isNum(d.slot) ? h('div', { class: 'muted small' }, `slot ${d.slot}`, isNum(d.evicted_tokens) ? `, evicted ${num(d.evicted_tokens)} tok idle ${ago(d.evicted_idle_ms ?? 0)}` : '') : null;
  const engine = isNum(d.cached_tokens) ? num(d.cached_tokens) : h('span', { class: 'muted', title: 'the engine reports no cached tokens' }, 'not reported');
  return [h('span', null, `${num(d.predicted_cached)} / `, engine), slot];
}
