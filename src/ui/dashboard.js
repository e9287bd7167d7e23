// viiwork dashboards (SPEC section 10): one vanilla module for both pages,
// `/` (the mesh, body[data-page=mesh]) and `/node` (this machine,
// body[data-page=node]). Every second it polls this node's JSON endpoints
// (same origin) and rebuilds the sections from them.
//
// Safety: every string that came over the network reaches the DOM through a
// text node or setAttribute, never as markup; class names come only from
// the constants in dom.js and below. The DOM helpers and formats are in
// dom.js, the fetch in api.js, the decision feed in feed.js.

import { getJson } from '/ui/api.js';
import { TONE, ago, clock, empty, h, isNum, list, meter, num, pill, put, table, tag, td, text } from '/ui/dom.js';
import { pollDecisions, renderFeed } from '/ui/feed.js';

const POLL_MS = 1000;

const PAGE = document.body.dataset.page === 'node' ? 'node' : 'mesh';

// ------------------------------------------------------------------- polling

/** Server clock minus browser clock, from the last report carrying `at`. */
let skew = 0;
const serverNow = () => Date.now() + skew;

const conn = { failures: 0, lostAt: null, lastOk: null };

function setConnection(error) {
  const banner = document.getElementById('banner');
  const updated = document.getElementById('updated');
  if (error) {
    conn.failures++;
    conn.lostAt ??= Date.now();
    banner.replaceChildren(
      'Connection lost — retrying',
      h('span', { class: 'detail' }, `${error} · ${conn.failures} failed poll${conn.failures > 1 ? 's' : ''} in ${ago(Date.now() - conn.lostAt)}`),
    );
    banner.hidden = false;
    document.body.classList.add('disconnected');
    updated.className = 'updated muted lost';
    updated.textContent = conn.lastOk ? `last update ${clock(conn.lastOk)}` : 'not connected';
  } else {
    conn.failures = 0;
    conn.lostAt = null;
    conn.lastOk = Date.now();
    banner.hidden = true;
    banner.replaceChildren();
    document.body.classList.remove('disconnected');
    updated.className = 'updated muted live';
    updated.textContent = `live · ${clock(conn.lastOk)}`;
  }
}

/** Fetch every source of a page; render what arrived; report the first failure. */
async function poll(sources, render) {
  const names = Object.keys(sources);
  const results = await Promise.allSettled(names.map((n) => sources[n]()));
  const data = {};
  let error = null;
  results.forEach((r, i) => {
    if (r.status === 'fulfilled') data[names[i]] = r.value;
    else error ??= r.reason instanceof Error ? r.reason.message : String(r.reason);
  });
  try {
    render(data);
  } catch (err) {
    // A malformed document must not stop the loop; show it like a failed poll.
    error ??= `could not show the data: ${err instanceof Error ? err.message : err}`;
    console.error(err);
  }
  setConnection(error);
}

function loop(sources, render) {
  const tick = async () => {
    try {
      await poll(sources, render);
    } finally {
      setTimeout(tick, POLL_MS);
    }
  };
  tick();
}

// --------------------------------------------------------------- header

function renderWho(info) {
  put('whoami', info, () => [
    h('span', { class: 'name' }, text(info.node)),
    info.version ? h('span', { class: 'muted' }, `v${info.version}`) : null,
    info.mode ? pill(`${info.mode} mesh`, TONE[info.mode]) : null,
    info.status ? pill(info.status === 'ok' ? 'healthy' : info.status, info.status === 'ok' ? 'ok' : 'warn') : null,
  ]);
}

function tile(label, value, small) {
  return h('div', { class: 'tile' }, h('div', { class: 'k' }, label), h('div', { class: 'v' }, value, small ? h('span', { class: 'small' }, small) : null));
}

// ------------------------------------------------------------- mesh page

function renderMesh(d) {
  const mesh = d.mesh;
  const fleet = d.fleet;
  const own = d.capacity;
  const health = d.health;
  if (fleet && isNum(fleet.at)) skew = fleet.at - Date.now();

  if (mesh || health || own) renderWho({ node: mesh?.node ?? health?.node ?? own?.node, version: health?.version, mode: mesh?.mode, status: health?.status });

  const members = Array.isArray(mesh?.members) ? mesh.members : [];
  const fleetModels = Array.isArray(fleet?.models) ? fleet.models : [];
  const ownModels = new Map((Array.isArray(own?.models) ? own.models : []).map((m) => [m.name, m]));
  const catalog = new Map((Array.isArray(d.models?.data) ? d.models.data : []).map((m) => [m.id, m]));
  const aliases = Array.isArray(d.aliases?.data) ? d.aliases.data : [];

  // Summary tiles.
  if (mesh && fleet) {
    const count = (s) => members.filter((m) => m.state === s).length;
    let slots = 0;
    let busy = 0;
    for (const m of fleetModels) for (const host of m.hosts ?? []) if (host.fresh) { slots += host.slots ?? 0; busy += host.busy ?? 0; }
    const queued = [...ownModels.values()].reduce((n, m) => n + (isNum(m.queued) ? m.queued : 0), 0);
    const key = { a: count('alive'), s: count('suspect'), x: count('dead'), m: fleetModels.length, al: aliases.length, slots, busy, queued };
    put('summary', key, () => [
      tile('Members', `${key.a} alive`, [key.s ? ` · ${key.s} suspect` : '', key.x ? ` · ${key.x} dead` : ''].join('')),
      tile('Models', String(key.m), key.al ? `+ ${key.al} alias${key.al > 1 ? 'es' : ''}` : ''),
      tile('Slots busy', `${busy}/${slots}`, `${Math.max(0, slots - busy)} free, fresh hosts`),
      tile('Queued here', String(queued)),
    ]);
  }

  // Members.
  if (mesh) {
    put('members', { members, t: Math.floor(serverNow() / 5000) }, () => {
      const self = mesh.node;
      const note = members.some((m) => m.self)
        ? null
        : h('p', { class: 'note' }, `This node (${text(self)}) is not in the member list: membership has not reported it yet.`);
      if (!members.length) return [empty('No members known yet.'), note];
      const rows = members.map((m) =>
        h(
          'tr',
          { class: m.self ? 'self' : null, 'data-member': m.name },
          h('th', { scope: 'row' }, text(m.name), m.self ? tag('this node') : null),
          td(pill(text(m.state))),
          td(text(m.role)),
          td(text(m.gossip), 'mono'),
          td(text(m.api), 'mono'),
          td(text(m.version)),
          td(m.since ? `${ago(serverNow() - Date.parse(m.since))} ago` : '—', 'muted'),
        ),
      );
      return [table(['Member', 'State', 'Role', 'Gossip', 'API', 'Version', 'Since'], rows, 'members'), note];
    });
  }

  // Model × host grid.
  if (fleet) {
    const stateOf = new Map(members.map((m) => [m.name, m.state]));
    const memoryOf = new Map((Array.isArray(fleet.memory) ? fleet.memory : []).map((x) => [x.node, x]));
    const hostNames = [];
    const local = new Set();
    for (const m of fleetModels) for (const host of m.hosts ?? []) {
      if (!hostNames.includes(host.node)) hostNames.push(host.node);
      if (host.local) local.add(host.node);
    }
    // A member that lends memory has a column even with no model of its own: what it lends, to whom (SPEC section 11).
    for (const x of memoryOf.values()) {
      if (!x.lends || hostNames.includes(x.node)) continue;
      hostNames.push(x.node);
      if (x.node === fleet.node) local.add(x.node);
    }
    hostNames.sort((a, b) => (local.has(a) !== local.has(b) ? (local.has(a) ? -1 : 1) : a < b ? -1 : a > b ? 1 : 0));
    // Ages tick every poll; round them so the grid is not rebuilt for nothing.
    const key = { fleetModels: fleetModels.map((m) => ({ ...m, hosts: (m.hosts ?? []).map((x) => ({ ...x, report_age_ms: Math.round((x.report_age_ms ?? 0) / 100) })) })), own: [...ownModels.values()], cat: [...catalog.values()], st: [...stateOf], mem: [...memoryOf] };
    put('grid', key, () => {
      if (!fleetModels.length) return empty('No model is served anywhere in the mesh.');
      const cols = [
        'Model',
        ...hostNames.map((n) => {
          const st = stateOf.get(n);
          const mem = memoryOf.get(n);
          return h(
            'th',
            null,
            n,
            local.has(n) ? tag('this node') : null,
            st && st !== 'alive' ? [' ', pill(st)] : null,
            mem ? h('div', { class: 'line muted small', 'data-memory': n }, `memory ${bytes(mem.used)} used / ${bytes(mem.budget)} · ${bytes(mem.free)} free`) : null,
            mem && mem.lends ? h('div', { class: 'line muted small', 'data-lends': n }, lendText(mem.lent_to)) : null,
          );
        }),
      ];
      const rows = fleetModels.map((m) => {
        const info = catalog.get(m.name);
        const byHost = new Map((m.hosts ?? []).map((x) => [x.node, x]));
        return h(
          'tr',
          { 'data-model': m.name },
          h(
            'th',
            { scope: 'row' },
            h('div', null, text(m.name)),
            h('div', { class: 'line muted small' }, list(info?.workloads)),
            info && isNum(info.context_length) ? h('div', { class: 'line muted small' }, `ctx ${info.context_length}`) : null,
          ),
          hostNames.map((n) => {
            const x = byHost.get(n);
            return x ? hostCell(x, x.local ? ownModels.get(m.name) : undefined) : h('td', { class: 'none' }, '·');
          }),
        );
      });
      return table(cols, rows, 'grid');
    });
  }

  // Aliases.
  if (d.aliases) {
    const served = new Set(fleetModels.map((m) => m.name));
    put('aliases', { aliases, served: [...served], t: Math.floor(serverNow() / 5000) }, () => {
      if (!aliases.length) return empty('No aliases. Set one with PUT /v1/aliases/NAME or `viiwork alias set`.');
      return table(
        ['Alias', 'Target', 'Fallbacks', 'Workloads', h('th', { class: 'num' }, 'Version'), 'Writer', 'Set'],
        aliases.map((a) => {
          const chain = [a.target, ...(Array.isArray(a.fallbacks) ? a.fallbacks : [])];
          const live = chain.filter((m) => served.has(m));
          return h(
            'tr',
            { 'data-alias': a.alias },
            h('th', { scope: 'row' }, text(a.alias)),
            td([text(a.target), served.has(a.target) ? null : [' ', pill('unserved', 'warn')]]),
            td(list(a.fallbacks)),
            td(live.length ? list(catalog.get(a.alias)?.workloads) : h('span', { class: 'bad-text' }, 'nothing serves it')),
            td(text(a.version), 'num'),
            td(text(a.writer)),
            td(isNum(a.at) ? `${ago(serverNow() - a.at)} ago` : '—', 'muted'),
          );
        }),
        'aliases',
      );
    });
  }

  if (d.decisions) renderFeed(d.decisions);
}

/** Pill tones of a model's lifecycle state. */
const LIFE_TONE = { loaded: 'ok', loading: 'warn', fetching: 'warn', unloading: 'warn', unloaded: null };

/** Bytes as an operator reads them. */
/** A model file fetch in progress (SPEC section 11): bytes of size and a meter; or, without one, a file that is not there yet. */
function fileLine(fetch, hasFile) {
  if (fetch && isNum(fetch.bytes) && isNum(fetch.size)) {
    const pct = Math.floor((100 * fetch.bytes) / Math.max(1, fetch.size));
    return h('div', { class: 'line', 'data-fetch': 'progress' }, `fetching file ${bytes(fetch.bytes)} of ${bytes(fetch.size)} (${pct}%)`, meter(fetch.bytes, fetch.size));
  }
  if (hasFile === false) return h('div', { class: 'line', 'data-fetch': 'absent' }, 'file not here: fetched from a member before it loads');
  return null;
}

function bytes(n) {
  if (!isNum(n)) return '—';
  if (n >= 1024 ** 3) return `${(n / 1024 ** 3).toFixed(1)} GiB`;
  if (n >= 1024 ** 2) return `${(n / 1024 ** 2).toFixed(0)} MiB`;
  return `${Math.round(n / 1024)} KiB`;
}

/** One model on one host: busy/slots, free, freshness and age; queue and scores where the host's own report is at hand. */
function hostCell(x, report) {
  const slots = isNum(x.slots) ? x.slots : 0;
  const busy = isNum(x.busy) ? x.busy : 0;
  const fresh = x.fresh !== false;
  const targets = x.targets;
  let targetLines = null;
  if (targets === null) targetLines = h('div', { class: 'targets' }, 'older node: chat and completion only');
  else if (Array.isArray(targets) && targets.length === 0) targetLines = h('div', { class: 'targets' }, 'serves nothing now');
  else if (Array.isArray(targets) && targets.length > 1)
    targetLines = h(
      'div',
      { class: 'targets' },
      targets.map((t) => h('div', null, `${list(t.workloads)}${t.audio ? ' +audio' : ''}: ${num(t.busy)}/${num(t.slots)}`)),
    );
  let perf = null;
  // This node's own report when at hand; else what the fleet document carries from the host's last report.
  const r = report ?? (isNum(x.queued) || isNum(x.ttft_overhead_ms) || isNum(x.prefill_ms_per_1k) ? x : null);
  if (r) {
    const scores = [isNum(r.ttft_overhead_ms) ? `${num(r.ttft_overhead_ms)} ms overhead` : null, isNum(r.prefill_ms_per_1k) ? `${num(r.prefill_ms_per_1k)} ms/1k` : null].filter(Boolean);
    perf = h('div', { class: 'line' }, `queue ${isNum(r.queued) ? r.queued : '—'} · ${scores.length ? scores.join(' · ') : 'no score yet'}`);
  }
  // An on-demand model's state there (SPEC section 11): unloaded models are available, not down.
  const onDemand = Array.isArray(targets) && targets.some((t) => t.on_demand);
  const life = x.state && (onDemand || x.state !== 'loaded') ? h('div', { class: 'line', 'data-state': x.state }, pill(text(x.state), LIFE_TONE[x.state]), onDemand ? ' on demand' : '', onDemand && isNum(targets[0]?.memory) ? ` · ${bytes(targets[0].memory)}` : '') : null;
  // A model bigger than one host running split here (SPEC section 11): which member holds which part.
  const split = Array.isArray(x.split) && x.split.length ? h('div', { class: 'line', 'data-split': x.node }, 'split: ', x.split.map((p) => `${text(p.member)} ${bytes(p.bytes)}`).join(' + ')) : null;
  return h(
    'td',
    { class: fresh ? 'cell' : 'cell stale', 'data-host': x.node },
    life,
    split,
    fileLine(x.fetch, x.has_file),
    h('div', { class: 'busy' }, `${busy}/${slots} busy`),
    meter(busy, slots),
    h('div', { class: 'line' }, `${Math.max(0, isNum(x.free) ? x.free : slots - busy)} free · `, h('span', { class: fresh ? 'ok-text' : 'warn-text' }, fresh ? 'fresh' : 'stale'), ` · ${ago(x.report_age_ms)}`),
    perf,
    targetLines,
    slotLines(targets),
  );
}

/** Each engine slot and what it holds (issue 25): busy, or idle with its prompt's tokens and for how long; empty. */
function slotLines(targets) {
  const slots = Array.isArray(targets) ? targets.flatMap((t) => (Array.isArray(t.slot_state) ? t.slot_state : [])) : [];
  if (!slots.length) return null;
  return h(
    'div',
    { class: 'slots line small', 'data-slots': slots.length },
    slots.map((s, i) => {
      const what = s.busy ? 'busy' : isNum(s.tokens) && s.tokens > 0 ? `${num(s.tokens)} tok, idle ${isNum(s.idle_ms) ? ago(s.idle_ms) : '—'}` : 'empty';
      const title = isNum(s.unique_tokens) ? `${num(s.unique_tokens)} tokens no other slot holds` : '';
      return h('div', { class: s.busy ? 'slot busy' : s.tokens > 0 ? 'slot held' : 'slot empty', title, 'data-slot': i }, `slot ${i}: ${what}`);
    }),
  );
}

// ------------------------------------------------------------- node page

function renderNode(d) {
  const health = d.health;
  const cap = d.capacity;
  if (cap && isNum(cap.at)) skew = cap.at - Date.now();
  if (health || cap) renderWho({ node: health?.node ?? cap?.node, version: health?.version ?? cap?.ver, status: health?.status });

  const backends = Array.isArray(health?.backends) ? health.backends : [];
  if (health) {
    const healthy = backends.filter((b) => b.state === 'healthy').length;
    put('health', { health }, () => [
      tile('Status', pill(health.status === 'ok' ? 'healthy' : text(health.status), health.status === 'ok' ? 'ok' : 'warn')),
      tile('Serving', health.serving ? 'yes' : 'no', health.serving ? '' : 'no healthy backend'),
      tile('Role', text(health.role)),
      tile('Backends healthy', `${healthy}/${backends.length}`),
      tile('Version', text(health.version)),
    ]);
    put('backends', backends, () => {
      if (!backends.length) return empty('This node runs no backends (a gateway).');
      return table(
        ['Backend', 'Model', 'Engine', 'State', 'Reason'],
        backends.map((b) => h('tr', { 'data-backend': b.id }, h('th', { scope: 'row' }, text(b.id)), td(text(b.model)), td(text(b.engine)), td(pill(text(b.state))), td(text(b.reason), 'wrap'))),
        'backends',
      );
    });
  }

  if (cap) {
    const models = Array.isArray(cap.models) ? cap.models : [];
    if (cap.memory)
      put('memory', { m: cap.memory, l: cap.lending }, () => [
        tile('Memory budget', bytes(cap.memory.budget)),
        tile('Used', bytes(cap.memory.used), ' loading, loaded or unloading'),
        tile('Free', bytes(cap.memory.free)),
        // Memory lent to members running a model bigger than one host (node.lend_memory).
        cap.lending ? tile('Lent', bytes(cap.lending.lent), ` ${lendText(cap.lending.lends)}`) : null,
      ]);
    put('report-meta', { v: cap.alias_version }, () => (isNum(cap.alias_version) ? `alias version ${cap.alias_version}` : ''));
    put('models', models, () => {
      if (!models.length) return empty('This node serves no model.');
      const rows = [];
      for (const m of models) {
        rows.push(
          h(
            'tr',
            { 'data-model': m.name },
            h('th', { scope: 'row' }, text(m.name)),
            td(text(m.engine)),
            td([h('div', { class: 'busy' }, `${num(m.busy)}/${num(m.slots)} busy`), meter(m.busy ?? 0, m.slots ?? 0)]),
            td(text(m.queued), 'num'),
            td(text(m.ctx), 'num'),
            td(isNum(m.backends) ? `${num(m.healthy_backends)}/${m.backends}` : '—', 'num'),
            td(num(m.ttft_overhead_ms, ' ms'), 'num'),
            td(num(m.prefill_ms_per_1k, ' ms'), 'num'),
            td(text(m.perf_samples), 'num'),
          ),
        );
        const fl = fileLine(m.fetch);
        if (fl) rows.push(h('tr', { class: 'sub' }, td(fl), td(''), td(''), td(''), td(''), td(''), td(''), td(''), td('')));
        const targets = Array.isArray(m.targets) ? m.targets : [];
        for (const t of targets) {
          rows.push(
            h(
              'tr',
              { class: 'sub' },
              td([
                'target: ',
                list(t.workloads),
                t.state ? [' ', pill(text(t.state), LIFE_TONE[t.state]), t.load === 'on_demand' ? ' on demand' : '', isNum(t.memory) ? ` · ${bytes(t.memory)}` : ''] : null,
                t.split && Array.isArray(t.split.parts) ? h('span', { 'data-split': m.name }, ` · split: ${t.split.parts.map((p) => `${text(p.member)} ${bytes(p.bytes)}`).join(' + ')}`) : null,
              ]),
              td(t.audio ? 'audio' : ''),
              td(`${num(t.busy)}/${num(t.slots)} busy`),
              td(''),
              td(''),
              td(''),
              td(''),
              td(''),
              td(''),
            ),
          );
        }
        if (m.targets === undefined) rows.push(h('tr', { class: 'sub' }, h('td', { colspan: 9 }, 'no targets reported')));
      }
      return table(
        [
          'Model',
          'Engine',
          'Slots',
          h('th', { class: 'num' }, 'Queued'),
          h('th', { class: 'num' }, 'Context'),
          h('th', { class: 'num' }, 'Backends'),
          h('th', { class: 'num', title: 'time to first token on an empty prompt' }, 'Overhead'),
          h('th', { class: 'num', title: 'prefill time per 1000 prompt tokens' }, 'Per 1k'),
          h('th', { class: 'num', title: 'samples in the last ten minutes' }, 'Samples'),
        ],
        rows,
        'models',
      );
    });
  }
}

// ------------------------------------------------------------------ start

if (PAGE === 'node') {
  loop(
    {
      health: () => getJson('/health', { accept503: true }),
      capacity: () => getJson('/v1/capacity'),
    },
    renderNode,
  );
} else {
  loop(
    {
      mesh: () => getJson('/v1/mesh'),
      fleet: () => getJson('/v1/fleet/capacity'),
      capacity: () => getJson('/v1/capacity'),
      models: () => getJson('/v1/models'),
      aliases: () => getJson('/v1/aliases'),
      decisions: () => pollDecisions(),
      health: () => getJson('/health', { accept503: true }),
    },
    renderMesh,
  );
}

/** What a lending member lends now, to whom (SPEC section 11, a model bigger than one host). */
function lendText(lends) {
  const list = Array.isArray(lends) ? lends : [];
  return list.length ? `lends ${list.map((l) => `${bytes(l.bytes)} to ${text(l.to)} (${text(l.model)})`).join(', ')}` : 'lends memory; none lent now';
}
