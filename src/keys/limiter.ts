/**
 * Limits held across the mesh (SPEC section 12), the stateful half: this
 * node's windows per key (what it admitted, kept in
 * `<state_dir>/limits.json` across restarts), its reports to each key's
 * owner and the owners' answers, and — for the keys this node owns — the
 * latest report of every entry. Decisions are limits.ts's; sending is the
 * node's (`send`), so this file does no network I/O.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Limits } from '../config/key-spec.ts';
import { rendezvousRank } from '../hashing/rendezvous.ts';
import { admit, cutOffLimits, ownView, sumReports, type Admission, type OwnerView, type Since } from './limits.ts';
import { addTo, addTokens, addTokensAt, emptyWindow, parseWindow, takeBack, totalsOf, type KeyWindow, type Totals } from './window.ts';

/** Reports go out at most this often (SPEC: at most every 100 ms). */
export const REPORT_MS = 100;
/** An owner's answer older than this is not admitted against; without a newer one the node is cut off. */
export const ANSWER_FRESH_MS = 1000;
/**
 * A node cut off from the owner still holds to the last answer it had, this young, as well as its share: an
 * owner slow to answer on a busy machine must not let an entry forget what the mesh had spent.
 */
export const ANSWER_REMEMBERED_MS = 10_000;
/** A key unused this long is no longer reported (its totals stay in the window and the next report). */
const ACTIVE_MS = 2000;
/** An entry counts towards a key's share while its reports say it used the key this recently. */
const DEMAND_MS = 2000;
export const LIMITS_FILE = 'limits.json';

export interface Report {
  key: string;
  totals: Totals;
  /** The entry used the key since its last report (it shares the key's budget now). */
  demand: boolean;
}

export interface LimiterDeps {
  self: string;
  now(): number;
  /** Alive members' names, this node included: the owner is the first of a key's ranking among them. */
  alive(): string[];
  /** Send reports to owner `host`; its views by key, or undefined when it does not answer. */
  send(host: string, reports: Report[]): Promise<Record<string, OwnerView> | undefined>;
  stateDir?: string;
  log?(msg: string): void;
}

/** A request admitted under its key's limits: end it once (its slot freed), whatever happened. */
export interface Ticket {
  release(): void;
  /**
   * End it as a request the mesh never ran (refused before any engine
   * answered): its slot freed, and its request and tokens given back to the
   * key's windows. Once, like release; after release it does nothing.
   */
  giveBack(): void;
}

const NO_TICKET: Ticket = { release: () => {}, giveBack: () => {} };

interface Held {
  view: OwnerView;
  gotAt: number;
  since: Since;
  inflightAtView: number;
}

export class Limiter {
  readonly #windows = new Map<string, KeyWindow>();
  readonly #held = new Map<string, Held>();
  readonly #lastUse = new Map<string, number>();
  readonly #usedSinceReport = new Set<string>();
  /** As owner: key → entry → its latest report. */
  readonly #reports = new Map<string, Map<string, { totals: Totals; at: number; demandAt: number }>>();
  readonly #flights = new Map<string, Promise<void>>();
  /** As owner: when each key was first reported here. */
  readonly #firstHeard = new Map<string, number>();
  /** What this node admitted per key since it started, counting up: a report marks it, so an answer's `since` is exactly what that report did not carry. */
  readonly #admitted = new Map<string, Since>();
  #timer: NodeJS.Timeout | undefined;
  #saver: NodeJS.Timeout | undefined;
  #dirty = false;

  constructor(private readonly deps: LimiterDeps) {
    this.#read();
  }

  start(): void {
    this.#timer = setInterval(() => void this.flush(), REPORT_MS);
    this.#timer.unref();
    this.#saver = setInterval(() => this.save(), 5000);
    this.#saver.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
    clearInterval(this.#saver);
    this.save();
  }

  ownerOf(key: string): string {
    const alive = this.deps.alive();
    return rendezvousRank(key, alive.length ? alive : [this.deps.self])[0];
  }

  /**
   * Admit one request of key `key` needing `tokens` (its estimate) under
   * `limits`. Without limits nothing is counted. The first request of a key
   * here (or after the owner's answer went stale) waits for one report.
   */
  async admit(key: string, limits: Limits, tokens: number): Promise<{ ok: true; ticket: Ticket } | Extract<Admission, { ok: false }>> {
    if (Object.keys(limits).length === 0) return { ok: true, ticket: NO_TICKET };
    const w = this.#window(key);
    this.#lastUse.set(key, this.deps.now());
    this.#usedSinceReport.add(key);
    let held = this.#held.get(key);
    if (!held || this.deps.now() - held.gotAt > ANSWER_FRESH_MS) {
      await this.flush([key]);
      held = this.#held.get(key);
    }
    const now = this.deps.now();
    const fresh = held && now - held.gotAt <= ANSWER_FRESH_MS;
    const remembered = held && now - held.gotAt <= ANSWER_REMEMBERED_MS ? held : undefined;
    let d = fresh
      ? admit(limits, held!.view, held!.since, tokens, w.inflight, held!.inflightAtView, now)
      : admit(cutOffLimits(limits, this.deps.alive().length), ownView(totalsOf(w, now)), { requests: 0, tokens: 0 }, tokens, w.inflight, w.inflight, now);
    if (d.ok && !fresh && remembered) d = admit(limits, remembered.view, remembered.since, tokens, w.inflight, remembered.inflightAtView, now);
    if (!d.ok) return d;
    addTo(w.requests, now, 1);
    addTokens(w, now, tokens);
    w.inflight++;
    if (remembered) {
      remembered.since.requests++;
      remembered.since.tokens += tokens;
    }
    const count = this.#count(key);
    count.requests++;
    count.tokens += tokens;
    this.#dirty = true;
    let done = false;
    const release = (): boolean => {
      if (done) return false;
      done = true;
      w.inflight = Math.max(0, w.inflight - 1);
      return true;
    };
    return {
      ok: true,
      ticket: {
        release: () => void release(),
        giveBack: () => {
          if (!release()) return;
          // Out of the second it was counted in (while the minute still holds it) and out of `since` and the running
          // count, so neither this node's next report nor its admissions against the answer in hand count it.
          takeBack(w, now, tokens, this.deps.now());
          const c = this.#count(key);
          c.requests--;
          c.tokens -= tokens;
          const h = this.#held.get(key);
          if (h) {
            // An answer that came after the admission holds it in its totals, not in `since`.
            h.since.requests = Math.max(0, h.since.requests - 1);
            h.since.tokens = Math.max(0, h.since.tokens - tokens);
          }
          this.#lastUse.set(key, this.deps.now());
          this.#usedSinceReport.add(key);
          this.#dirty = true;
        },
      },
    };
  }

  /**
   * Tokens a request of `key` used beyond its estimate (negative: less), counted where it ran: the owner sums it in.
   * `atMs`: when the run began (about when it was admitted): counted in that second of the minute, so the estimate and
   * its correction leave the sliding minute together; a correction counted later would outlive the estimate it corrects
   * there and, negative, let the key be admitted again for a moment (the first minute of a burst overshot so).
   */
  settle(key: string, extraTokens: number, atMs?: number): void {
    if (extraTokens === 0) return;
    addTokensAt(this.#window(key), atMs ?? this.deps.now(), this.deps.now(), extraTokens);
    // Admissions here count it at once, as they count what they admit: in the running count a report marks, and in the
    // `since` of the answer in hand (the owner hears of it with this node's next report).
    this.#count(key).tokens += extraTokens;
    const h = this.#held.get(key);
    if (h) h.since.tokens += extraTokens;
    // Reported with the next batch (lastUse), but not as demand: a node that only settles forwards other entries
    // admitted is no entry of the key, and counting it as one would halve the real entries' shares.
    this.#lastUse.set(key, this.deps.now());
    this.#dirty = true;
  }

  /** As a key's owner: take an entry's reports, answer each key's mesh-wide view. */
  receive(from: string, reports: readonly Report[]): Record<string, OwnerView> {
    const now = this.deps.now();
    const out: Record<string, OwnerView> = {};
    for (const r of reports) {
      let byEntry = this.#reports.get(r.key);
      if (!byEntry) this.#reports.set(r.key, (byEntry = new Map()));
      const prev = byEntry.get(from);
      byEntry.set(from, { totals: r.totals, at: now, demandAt: r.demand ? now : (prev?.demandAt ?? 0) });
      const all = [...byEntry.values()];
      let entries = all.filter((e) => now - e.demandAt <= DEMAND_MS).length;
      // While a key is new here, entries that have not reported yet may be sending already: the first to report
      // would hold a share of the whole budget until its next answer. Until its demand is known, every member counts.
      const heardAt = this.#firstHeard.get(r.key) ?? this.#firstHeard.set(r.key, now).get(r.key)!;
      if (now - heardAt < DEMAND_MS) entries = Math.max(entries, this.deps.alive().length);
      out[r.key] = { totals: sumReports(all, now, 3000), entries: Math.max(1, entries) };
      // Reports of entries gone quiet for a day say nothing any more.
      for (const [name, e] of byEntry) if (now - e.at > 86_400_000) byEntry.delete(name);
    }
    return out;
  }

  /** Report the active keys (or `only`) to their owners now; one report per owner at a time. */
  async flush(only?: readonly string[]): Promise<void> {
    const now = this.deps.now();
    const keys = only ?? [...this.#lastUse].filter(([k, at]) => now - at <= ACTIVE_MS || (this.#windows.get(k)?.inflight ?? 0) > 0).map(([k]) => k);
    if (keys.length === 0) return;
    const byOwner = new Map<string, string[]>();
    for (const k of keys) {
      const o = this.ownerOf(k);
      byOwner.set(o, [...(byOwner.get(o) ?? []), k]);
    }
    await Promise.all([...byOwner].map(([owner, ks]) => this.#flushTo(owner, ks)));
  }

  #flushTo(owner: string, keys: string[]): Promise<void> {
    const inFlight = this.#flights.get(owner);
    if (inFlight) return inFlight;
    const now = this.deps.now();
    const reports = keys.map((key) => ({ key, totals: totalsOf(this.#window(key), now, true), demand: this.#usedSinceReport.delete(key) }));
    const inflight = new Map(keys.map((k) => [k, this.#window(k).inflight]));
    // What was admitted while the report travelled is not in the owner's answer: it stays in `since`, or every entry could spend its share twice.
    const marks = new Map(keys.map((k) => [k, { ...this.#count(k) }]));
    const done = (views: Record<string, OwnerView> | undefined) => {
      if (!views) return;
      const at = this.deps.now();
      for (const [key, view] of Object.entries(views)) {
        const mark = marks.get(key);
        if (!mark) continue;
        const count = this.#count(key);
        const since = { requests: count.requests - mark.requests, tokens: count.tokens - mark.tokens };
        this.#held.set(key, { view, gotAt: at, since, inflightAtView: inflight.get(key)! });
      }
    };
    if (owner === this.deps.self) {
      done(this.receive(this.deps.self, reports));
      return Promise.resolve();
    }
    const p = this.deps
      .send(owner, reports)
      .then(done, () => undefined)
      .finally(() => this.#flights.delete(owner));
    this.#flights.set(owner, p);
    return p;
  }

  #count(key: string): Since {
    let c = this.#admitted.get(key);
    if (!c) this.#admitted.set(key, (c = { requests: 0, tokens: 0 }));
    return c;
  }

  #window(key: string): KeyWindow {
    let w = this.#windows.get(key);
    if (!w) this.#windows.set(key, (w = emptyWindow(this.deps.now())));
    return w;
  }

  /** This node's totals of a key now (tests, usage). */
  totals(key: string): Totals {
    return totalsOf(this.#window(key), this.deps.now());
  }

  save(): void {
    const dir = this.deps.stateDir;
    if (!dir || !this.#dirty) return;
    this.#dirty = false;
    const file = path.join(dir, LIMITS_FILE);
    const tmp = `${file}.${process.pid}.tmp`;
    try {
      fs.writeFileSync(tmp, JSON.stringify({ v: 1, windows: Object.fromEntries(this.#windows) }));
      fs.renameSync(tmp, file);
    } catch (err) {
      this.deps.log?.(`limits: cannot save ${file} (${(err as Error).message})`);
      fs.rmSync(tmp, { force: true });
    }
  }

  #read(): void {
    if (!this.deps.stateDir) return;
    const file = path.join(this.deps.stateDir, LIMITS_FILE);
    let doc: { windows?: Record<string, unknown> };
    try {
      doc = JSON.parse(fs.readFileSync(file, 'utf8'));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.deps.log?.(`limits: ${file} is unreadable (${(err as Error).message}); counting from zero`);
      return;
    }
    for (const [key, raw] of Object.entries(doc.windows ?? {})) {
      const w = parseWindow(raw);
      if (w) {
        this.#windows.set(key, w);
        this.#lastUse.set(key, this.deps.now());
      }
    }
  }
}
