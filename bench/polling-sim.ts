/**
 * Capacity polling at scale, simulated (issue 11 item 5): one process,
 * thousands of virtual members, an injected clock. The poll schedule is the
 * product's own (src/capacity/schedule.ts: duePolls, routedMember,
 * Interest), driven tick by tick for one observed node; what the others do
 * to it is counted from their own Interest books. CPU and bytes come from
 * per-poll costs measured by bench/polling.ts (calibration below), gossip
 * from the memberlist's parameters fitted to the measured sizes.
 *
 * Fleet layouts (member i serves model i mod M, every fifth member a second
 * one, as bench/polling-child.ts's fleet):
 *   mixed    M = N/5 models (five hosts each); each node is asked for its own
 *            models and for 2 others drawn by popularity (Zipf, s = 1), a
 *            request every 5 s each on average, and once every 5 min for a
 *            model drawn uniformly (the first requests of a model nobody
 *            asked it for lately)
 *   popular  as mixed, but the 2 others are always model 0 and model 1, so
 *            a few members are routed to by everybody
 *   uniform  one model on every member, asked at every node (every node
 *            routes to every member: the worst case for any scheme that
 *            polls only what a node routes to)
 *
 * Schemes on the same trace:
 *   every-1s        today: every member every capacity_poll
 *   routed+bg15s    routed members every 1 s, others every 15 s, interest
 *                   from the decision feed (noted when a request ends) and
 *                   from waiting requests (the node as built)
 *   routed+bg30s    the same with a 30 s background period
 *   routed+bg15s@arrival  the same with interest noted when a request
 *                   arrives (what a dispatch port would give)
 *   adaptive        every member, period doubling 1→2→4→8 s while its
 *                   report does not change, back to 1 s on a change or a
 *                   request for its model here
 * and two computed without the schedule: conditional polls (ETag →
 * 304 on an unchanged report: every member every 1 s, unchanged answers
 * cheaper) and capacity deltas on gossip (every change of every member
 * disseminated to every node).
 *
 * What is counted for the observed node's requests: the report age of every
 * host of the request's model at its arrival. `fresh view`: all of them at
 * most stale_after old (what today gives, hosts polled every second); a
 * request whose hosts are all stale waits for one poll (one round trip);
 * one with some fresh and some stale hosts is routed among the fresh ones
 * (`partial view`).
 */
import { duePolls, Interest, routedMember, type MemberPoll } from '../src/capacity/schedule.ts';
import { seeded } from '../test/helpers/random.ts';

export interface Calibration {
  /** CPU µs of one poll sent (request, answer, parse, report handling) on the polling node. */
  send_us: number;
  /** CPU µs of answering one poll (HTTP, building the report) on the polled node. */
  answer_us: number;
  /** Share of send_us and answer_us a 304 answer saves (no body built, sent, parsed). */
  not_modified_saving: number;
  /** Bytes of one poll: request, and answer per model in the report (plus headers). */
  request_bytes: number;
  answer_header_bytes: number;
  answer_model_bytes: number;
  not_modified_bytes: number;
  /**
   * Cache digests (issue 17): bytes of one target's whole digest (4 slots × 50 links), sent when the member's
   * digest changed since this poller's last poll, and of the `{"v"}` sent instead when it did not. Optional:
   * absent in calibrations of runs before digests (then no digest bytes are counted).
   */
  digest_bytes?: number;
  digest_unchanged_bytes?: number;
  /**
   * Measured CPU (% of a core, floor taken off) against polls per second, sending and answering: a poll's
   * cost is not the same at every rate (at a low rate each one comes with more of the process's wake-ups).
   * When present, the simulation reads costs off these curves (piecewise linear, never decreasing), and
   * also reports the linear per-poll model.
   */
  send_curve?: [number, number][];
  answer_curve?: [number, number][];
  /** Gossip per node: cpu% = a + b × N / pushPullScale(N); bytes/s likewise. */
  gossip_cpu: { a: number; b: number };
  gossip_bytes: { a: number; b: number };
  source: string;
}

/** Stand-in values until a measurement replaces them (bench/polling.ts passes the run's own). */
export const DEFAULT_CALIBRATION: Calibration = {
  send_us: 60,
  answer_us: 70,
  not_modified_saving: 0.15,
  request_bytes: 76,
  answer_header_bytes: 160,
  answer_model_bytes: 300,
  not_modified_bytes: 150,
  digest_bytes: 2900,
  digest_unchanged_bytes: 24,
  gossip_cpu: { a: 0.4, b: 0.004 },
  gossip_bytes: { a: 400, b: 10 },
  source: 'defaults',
};

const INTERVAL_MS = 1000;
const INTEREST_MS = 600_000;
const STALE_AFTER_MS = 3000;
const RTT_MS = 2;
const REQUEST_MS = 5000;
const ASK_EVERY_S = 5;
const EXPLORE_EVERY_S = 300;

export interface SimRow {
  layout: string;
  members: number;
  scheme: string;
  /** Polls the observed node sends per second, and the mean over all nodes (equal to the mean answered). */
  polls_sent_per_s: number;
  polls_mean_per_s: number;
  /** Polls the busiest member answers per second. */
  polls_answered_max_per_s: number;
  /** The mean node: sending and answering its share, plus gossip; % of one core (measured curves when calibrated). */
  cpu_pct: number;
  cpu_pct_polling: number;
  /** The same with a fixed cost per poll (send_us + answer_us). */
  cpu_pct_linear: number;
  cpu_pct_gossip: number;
  bytes_per_s: number;
  /** The observed node's requests. */
  requests: number;
  fresh_view_share: number;
  waited_one_poll: number;
  partial_view: number;
  /** Cache digest bytes per poll answered (mean) and per second per node (both directions), within bytes_per_s. */
  digest_bytes_per_poll: number;
  digest_bytes_per_s: number;
  /** Share of polls that carried a whole digest (the member's changed since the poller's previous poll). */
  digest_resent_share: number;
  /** Report age of the host a request was routed to, at routing time, p99 and max (ms). */
  routed_age_p99_ms: number;
  routed_age_max_ms: number;
  routed_members_mean: number;
}

function modelsOf(i: number, models: number): number[] {
  const a = i % models;
  return i % 5 === 0 ? [...new Set([a, (i + 7) % models])] : [a];
}

function pushPullScale(n: number): number {
  return n <= 32 ? 1 : Math.ceil(Math.log2(n) - Math.log2(32)) + 1;
}

export function gossipCost(cal: Calibration, n: number): { cpu: number; bytes: number } {
  const x = n / pushPullScale(n);
  return { cpu: cal.gossip_cpu.a + cal.gossip_cpu.b * x, bytes: cal.gossip_bytes.a + cal.gossip_bytes.b * x };
}

interface Fleet {
  n: number;
  models: number;
  servesOf: number[][];
  hostsOf: number[][];
  /** Per node: the models it is asked for steadily. */
  asked: number[][];
}

function fleet(layout: string, n: number, rnd: () => number): Fleet {
  const models = layout === 'uniform' ? 1 : Math.max(1, Math.round(n / 5));
  const servesOf = Array.from({ length: n }, (_, i) => (layout === 'uniform' ? [0] : modelsOf(i, models)));
  const hostsOf = Array.from({ length: models }, () => [] as number[]);
  servesOf.forEach((ms, i) => ms.forEach((m) => hostsOf[m].push(i)));
  // Zipf(1) popularity over models.
  const weights = Array.from({ length: models }, (_, k) => 1 / (k + 1));
  const total = weights.reduce((a, b) => a + b, 0);
  const zipf = () => {
    let x = rnd() * total;
    for (let k = 0; k < models; k++) if ((x -= weights[k]) <= 0) return k;
    return models - 1;
  };
  const asked = servesOf.map((own) => {
    if (layout === 'uniform') return [0];
    if (layout === 'popular') return [...new Set([...own, 0, 1 % models])];
    const out = new Set(own);
    for (let tries = 0; out.size < own.length + 2 && tries < 50; tries++) out.add(zipf());
    return [...out];
  });
  return { n, models, servesOf, hostsOf, asked };
}

type Scheme = 'every-1s' | 'routed+bg15s' | 'routed+bg30s' | 'routed+bg15s@arrival' | 'adaptive';

/** The background period of a scheme named routed+bgNs. */
const backgroundOf = (scheme: Scheme) => Number(/bg(\d+)s/.exec(scheme)?.[1] ?? 15) * 1000;

/** Nodes whose pollers are driven tick by tick (the first ones of the fleet); the rest only keep their interest. */
const OBSERVED = 20;

/**
 * One run: `seconds` of simulated time; the first OBSERVED nodes' pollers
 * ticked every second; requests at every node as Poisson arrivals.
 */
export function simulate(layout: string, n: number, scheme: Scheme, cal: Calibration, seconds = 1800, seed = 1): SimRow {
  const rnd = seeded(seed);
  const f = fleet(layout, n, rnd);
  let now = 0;
  const clock = () => now;
  // Every node's interest (the others' only say who polls whom every second); local models are always wanted.
  const interest = Array.from({ length: n }, () => new Interest(INTEREST_MS, clock));
  const wants = (j: number, m: number) => f.servesOf[j].includes(m) || interest[j].has(String(m));
  // What each node noted and when (to list who wants what when sampling; the product never needs the list).
  const noted = Array.from({ length: n }, () => new Map<number, number>());
  const remember = (j: number, m: number) => {
    noted[j].set(m, now);
    return interest[j].note(String(m));
  };
  const obs = Array.from({ length: Math.min(OBSERVED, n) }, (_, k) => k);
  // Each observed node's poller: when it last polled each member, until when it forwards to it, the adaptive period.
  const lastSent = obs.map(() => new Array<number | undefined>(n).fill(undefined));
  const forwardsUntil = obs.map(() => new Array<number>(n).fill(-Infinity));
  const period = obs.map(() => new Array<number>(n).fill(INTERVAL_MS));
  // A member's report changes when its busy count moves (requests start or end on it): its request rate comes from
  // every node asking for its models (ASK_EVERY_S each), split over the model's hosts.
  const askers = new Array(f.models).fill(0);
  f.asked.forEach((ms) => ms.forEach((m) => askers[m]++));
  const changeRate = f.servesOf.map((ms) => ms.reduce((r, m) => r + (2 * askers[m]) / ASK_EVERY_S / f.hostsOf[m].length, 0));
  const changedAt = new Array<number>(n).fill(0);

  // Requests at every node: each (node, steady model) every ASK_EVERY_S on average, plus exploration.
  type Ev = { at: number; node: number; model: number };
  const events: Ev[] = [];
  const exp = (mean: number) => -Math.log(1 - rnd()) * mean * 1000;
  for (let j = 0; j < n; j++) {
    for (const m of f.asked[j]) for (let t = exp(ASK_EVERY_S); t < seconds * 1000; t += exp(ASK_EVERY_S)) events.push({ at: t, node: j, model: m });
    if (layout !== 'uniform') for (let t = exp(EXPLORE_EVERY_S); t < seconds * 1000; t += exp(EXPLORE_EVERY_S)) events.push({ at: t, node: j, model: Math.floor(rnd() * f.models) });
  }
  events.sort((a, b) => a.at - b.at);
  // Interest noted when a request ends (the node reads its decision feed every 250 ms), as built; @arrival notes it
  // when the request arrives.
  const pendingNotes: Ev[] = [];
  const feedOnly = scheme === 'routed+bg15s' || scheme === 'routed+bg30s';

  const warmup = Math.min(600, seconds / 3) * 1000;
  let sent = 0;
  let bytes = 0;
  let digestBytes = 0;
  let digestResent = 0;
  let answeredSum = 0;
  let answeredMax = 0;
  let samples = 0;
  let routedMembersSum = 0;
  let requests = 0;
  let freshView = 0;
  let waited = 0;
  let partial = 0;
  const routedAges: number[] = [];

  const poll = (o: number, i: number) => {
    if (scheme === 'adaptive') {
      // Back off while the report did not change since the last poll; back to every second when it did.
      const last = lastSent[o][i];
      period[o][i] = last === undefined || changedAt[i] > last ? INTERVAL_MS : Math.min(8 * INTERVAL_MS, period[o][i] * 2);
    }
    const changed = changedAt[i] > (lastSent[o][i] ?? -Infinity);
    lastSent[o][i] = now;
    if (now >= warmup) {
      sent++;
      bytes += cal.request_bytes + cal.answer_header_bytes + cal.answer_model_bytes * f.servesOf[i].length;
      // One digest per target (one target per model here): whole when it changed since this poller's last poll.
      const d = (changed ? (cal.digest_bytes ?? 0) : (cal.digest_unchanged_bytes ?? 0)) * f.servesOf[i].length;
      digestBytes += d;
      bytes += d;
      if (changed) digestResent++;
    }
  };
  const tick = (o: number) => {
    const members: MemberPoll[] = [];
    for (let i = 0; i < n; i++) {
      if (i === o) continue;
      const routed =
        scheme === 'every-1s'
          ? true
          : scheme === 'adaptive'
            ? now - (lastSent[o][i] ?? -Infinity) >= period[o][i] - INTERVAL_MS / 2
            : routedMember({ models: f.servesOf[i].map(String), unsettled: false, forwarding: forwardsUntil[o][i] > now }, (m) => wants(o, Number(m)));
      members.push({ name: String(i), routed, lastSentAt: lastSent[o][i], inFlight: false });
    }
    const due =
      scheme === 'adaptive'
        ? members.filter((m) => m.routed || m.lastSentAt === undefined).map((m) => m.name)
        : duePolls(members, now, { intervalMs: INTERVAL_MS, backgroundMs: scheme === 'every-1s' ? INTERVAL_MS : backgroundOf(scheme) });
    for (const name of due) poll(o, Number(name));
    if (now >= warmup && scheme !== 'adaptive') routedMembersSum += members.filter((m) => m.routed).length;
  };
  const note = (j: number, model: number) => {
    if (remember(j, model) && j < obs.length && scheme !== 'every-1s' && scheme !== 'adaptive') tick(j);
  };
  // Who polls whom every second (sampled): member h is polled every second by every node that wants one of its models.
  const sampleAnswered = () => {
    if (scheme === 'every-1s' || scheme === 'adaptive') return;
    const wantedBy = Array.from({ length: f.models }, () => new Set<number>());
    for (let j = 0; j < n; j++) for (const m of new Set([...f.asked[j], ...f.servesOf[j]])) if (wants(j, m)) wantedBy[m].add(j);
    // Exploration interest (models outside the steady set) is counted too.
    for (let j = 0; j < n; j++) for (const [m, at] of noted[j]) if (now - at <= INTEREST_MS) wantedBy[m].add(j);
    let sum = 0;
    for (let h = 0; h < n; h++) {
      const u = new Set<number>();
      for (const m of f.servesOf[h]) for (const j of wantedBy[m]) if (j !== h) u.add(j);
      const rate = u.size + (n - 1 - u.size) / (backgroundOf(scheme) / 1000);
      sum += rate;
      answeredMax = Math.max(answeredMax, rate);
    }
    answeredSum += sum / n;
    samples++;
  };

  let ei = 0;
  for (let s = 0; s < seconds; s++) {
    const end = (s + 1) * 1000;
    now = s * 1000;
    for (let i = 0; i < n; i++) if (rnd() < 1 - Math.exp(-changeRate[i])) changedAt[i] = now - 1;
    for (const o of obs) tick(o);
    while (ei < events.length && events[ei].at < end) {
      const ev = events[ei++];
      now = ev.at;
      while (pendingNotes.length && pendingNotes[0].at <= now) {
        const p = pendingNotes.shift()!;
        note(p.node, p.model);
      }
      if (scheme === 'routed+bg15s' || scheme === 'routed+bg30s') {
        pendingNotes.push({ at: Math.ceil((ev.at + REQUEST_MS) / 250) * 250, node: ev.node, model: ev.model });
        if (pendingNotes.length > 1 && pendingNotes.at(-2)!.at > pendingNotes.at(-1)!.at) pendingNotes.sort((a, b) => a.at - b.at);
      }
      const o = ev.node;
      if (o >= obs.length) {
        if (!feedOnly) remember(o, ev.model);
        continue;
      }
      const hosts = f.hostsOf[ev.model].filter((h) => h !== o);
      const local = f.servesOf[o].includes(ev.model);
      if (hosts.length === 0) {
        if (!feedOnly) note(o, ev.model);
        continue;
      }
      const ages = hosts.map((h) => (lastSent[o][h] === undefined ? Infinity : now + 0 - lastSent[o][h]!));
      const freshHosts = hosts.filter((_, k) => ages[k] <= STALE_AFTER_MS);
      let host: number;
      let routedAge: number;
      if (freshHosts.length === hosts.length) {
        if (now >= warmup) freshView++;
        host = hosts[Math.floor(rnd() * hosts.length)];
        routedAge = now - lastSent[o][host]!;
      } else if (freshHosts.length === 0 && !local) {
        // It waits in the queue: the node notes the model (a waiting request) and polls its hosts at once.
        if (now >= warmup) waited++;
        if (scheme === 'adaptive') for (const h of hosts) period[o][h] = INTERVAL_MS;
        remember(o, ev.model);
        for (const h of hosts) if (now - (lastSent[o][h] ?? -Infinity) >= INTERVAL_MS / 2) poll(o, h);
        host = hosts[Math.floor(rnd() * hosts.length)];
        routedAge = RTT_MS;
      } else {
        // Routed among the fresh hosts (and this node): the stale ones are left out of this decision.
        if (now >= warmup) partial++;
        host = freshHosts.length ? freshHosts[Math.floor(rnd() * freshHosts.length)] : o;
        routedAge = host === o ? 0 : now - lastSent[o][host]!;
      }
      if (!feedOnly) note(o, ev.model);
      if (scheme === 'adaptive') for (const h of hosts) period[o][h] = INTERVAL_MS;
      if (host !== o) forwardsUntil[o][host] = Math.max(forwardsUntil[o][host], now + REQUEST_MS);
      if (now >= warmup) {
        requests++;
        routedAges.push(routedAge);
      }
    }
    if (s * 1000 >= warmup && s % 30 === 0) sampleAnswered();
  }
  const measured = seconds - warmup / 1000;
  const sentPerS = sent / measured / obs.length;
  const meanPerS = scheme === 'every-1s' || scheme === 'adaptive' ? sentPerS : answeredSum / Math.max(1, samples);
  const g = gossipCost(cal, n);
  // The mean node sends and answers the mean number of polls (every poll sent is answered by someone).
  const linearCpu = (meanPerS * (cal.send_us + cal.answer_us)) / 1e4;
  const pollingCpu = cal.send_curve && cal.answer_curve ? onCurve(cal.send_curve, meanPerS) + onCurve(cal.answer_curve, meanPerS) : linearCpu;
  const bytesPerPoll = sent ? bytes / sent : cal.request_bytes + cal.answer_header_bytes + cal.answer_model_bytes;
  routedAges.sort((a, b) => a - b);
  const r3 = (x: number) => Number(x.toFixed(3));
  return {
    layout,
    members: n,
    scheme,
    polls_sent_per_s: Number(sentPerS.toFixed(1)),
    polls_mean_per_s: Number(meanPerS.toFixed(1)),
    polls_answered_max_per_s: Number((scheme === 'every-1s' || scheme === 'adaptive' ? sentPerS : answeredMax).toFixed(1)),
    cpu_pct: r3(pollingCpu + g.cpu),
    cpu_pct_polling: r3(pollingCpu),
    cpu_pct_linear: r3(linearCpu + g.cpu),
    cpu_pct_gossip: r3(g.cpu),
    bytes_per_s: Math.round(2 * meanPerS * bytesPerPoll + g.bytes),
    digest_bytes_per_poll: Math.round(sent ? digestBytes / sent : 0),
    digest_bytes_per_s: Math.round(2 * meanPerS * (sent ? digestBytes / sent : 0)),
    digest_resent_share: r3(sent ? digestResent / sent : 0),
    requests,
    fresh_view_share: r3(requests ? freshView / requests : 1),
    waited_one_poll: waited,
    partial_view: partial,
    routed_age_p99_ms: Math.round(routedAges[Math.floor(0.99 * (routedAges.length - 1))] ?? 0),
    routed_age_max_ms: Math.round(routedAges.at(-1) ?? 0),
    routed_members_mean: Number((routedMembersSum / Math.max(1, measured) / obs.length).toFixed(1)),
  };
}

/** CPU at `rate` polls/s on a measured curve: through (0, 0), never decreasing, the last slope beyond the last point. */
export function onCurve(points: [number, number][], rate: number): number {
  const pts: [number, number][] = [[0, 0]];
  for (const [x, y] of [...points].sort((a, b) => a[0] - b[0])) if (x > pts.at(-1)![0]) pts.push([x, Math.max(y, pts.at(-1)![1])]);
  if (pts.length === 1) return 0;
  for (let k = 1; k < pts.length; k++) {
    const [x0, y0] = pts[k - 1];
    const [x1, y1] = pts[k];
    if (rate <= x1 || k === pts.length - 1) return Math.max(0, y0 + ((rate - x0) * (y1 - y0)) / (x1 - x0));
  }
  return pts.at(-1)![1];
}

/** The two schemes computed without the schedule, for the same sizes. */
export function alternatives(n: number, cal: Calibration, changesPerMemberS: number): Record<string, unknown>[] {
  const g = gossipCost(cal, n);
  const polls = n - 1;
  const pUnchanged = Math.exp(-changesPerMemberS);
  const full = cal.request_bytes + cal.answer_header_bytes + cal.answer_model_bytes;
  const everyPoll = cal.send_curve && cal.answer_curve ? onCurve(cal.send_curve, polls) + onCurve(cal.answer_curve, polls) : (polls * (cal.send_us + cal.answer_us)) / 1e4;
  const cond = {
    scheme: 'conditional polls (ETag/304), every member every 1 s',
    members: n,
    changes_per_member_s: changesPerMemberS,
    cpu_pct: Number((everyPoll * (1 - cal.not_modified_saving * pUnchanged) + g.cpu).toFixed(3)),
    bytes_per_s: Math.round(2 * polls * (pUnchanged * (cal.request_bytes + cal.not_modified_bytes) + (1 - pUnchanged) * full) + g.bytes),
  };
  // Deltas on gossip: every change (and a heartbeat a second, so a quiet member is told from a silent one) of every
  // member reaches every node retransmitLimit = 4 × ceil(log10(n+1)) times (memberlist's limit; each node that
  // learns a message transmits it that many times, so each node receives about as many copies).
  const limit = 4 * Math.ceil(Math.log10(n + 1));
  const msgs = n * (changesPerMemberS + 1) * limit;
  const deltaBytes = 60;
  const perMsgUs = 8;
  const deltas = {
    scheme: 'capacity deltas + 1 s heartbeats on gossip',
    members: n,
    changes_per_member_s: changesPerMemberS,
    messages_received_per_s: Math.round(msgs),
    cpu_pct: Number(((2 * msgs * perMsgUs) / 1e4 + g.cpu).toFixed(3)),
    bytes_per_s: Math.round(2 * msgs * deltaBytes + g.bytes),
    freshness: `dissemination takes about log3(n) gossip rounds of 200 ms (${(Math.log(n) / Math.log(3) * 0.2).toFixed(1)} s at ${n}) plus queueing, against one poll round trip`,
  };
  return [cond, deltas];
}

export function simulateAll(cal: Calibration = DEFAULT_CALIBRATION, sizes = [10, 30, 100, 300, 1000, 3000], seconds = 1800): { rows: SimRow[]; alternatives: Record<string, unknown>[]; calibration: Calibration } {
  const rows: SimRow[] = [];
  const schemes: Scheme[] = ['every-1s', 'routed+bg15s', 'routed+bg30s', 'routed+bg15s@arrival', 'adaptive'];
  for (const layout of ['mixed', 'popular', 'uniform']) {
    for (const n of sizes) {
      if (layout !== 'mixed' && n > 1000) continue;
      for (const scheme of schemes) {
        if (layout !== 'mixed' && (scheme === 'routed+bg15s@arrival' || scheme === 'routed+bg30s')) continue;
        rows.push(simulate(layout, n, scheme, cal, n >= 1000 ? Math.min(seconds, 1200) : seconds));
      }
    }
  }
  const alts = sizes.flatMap((n) => [...alternatives(n, cal, 0.1), ...alternatives(n, cal, 2)]);
  return { rows, alternatives: alts, calibration: cal };
}

if (process.argv[1] && new URL(import.meta.url).pathname === process.argv[1]) {
  const t0 = performance.now();
  const sizes = (process.env.POLLING_SIM_SIZES ?? '10,30,100,300,1000,3000').split(',').map(Number);
  const out = simulateAll(DEFAULT_CALIBRATION, sizes, Number(process.env.POLLING_SIM_SECONDS ?? 1800));
  console.table(out.rows);
  console.table(out.alternatives);
  console.error(`simulated in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
}
