/**
 * Usage per key, model and host (SPEC section 12): what this node served
 * (it is the host) and what it refused at its entry, in hourly rollups kept
 * in `<state_dir>/usage.json` for 30 days. The mesh-wide answer of
 * `/v1/usage` is the merge of every member's rows (`mergeRows`).
 */
import fs from 'node:fs';
import path from 'node:path';

export const USAGE_FILE = 'usage.json';
export const HOUR_MS = 3_600_000;
export const KEEP_HOURS = 30 * 24;

export interface Counts {
  requests: number;
  errors: number;
  /** Refused at the entry by one of the key's limits. */
  limited: number;
  prompt_cached: number;
  prompt_uncached: number;
  completion: number;
}

export interface UsageRow extends Counts {
  key: string;
  model: string;
  host: string;
  /** Start of the hour (ms since the epoch); absent in totals over a span. */
  hour?: number;
}

const zero = (): Counts => ({ requests: 0, errors: 0, limited: 0, prompt_cached: 0, prompt_uncached: 0, completion: 0 });
const COUNT_FIELDS = Object.keys(zero()) as (keyof Counts)[];

export interface ServedRecord {
  key: string;
  model: string;
  outcome: 'ok' | 'error' | 'limited';
  promptCached?: number;
  promptUncached?: number;
  completion?: number;
}

export class UsageBook {
  /** hour → "key\0model" → counts (this node is the host of all of them). */
  readonly #hours = new Map<number, Map<string, Counts>>();
  #dirty = false;

  constructor(
    private readonly host: string,
    private readonly now: () => number,
    private readonly file?: string,
    private readonly log?: (msg: string) => void,
  ) {
    if (file) this.#read(file);
  }

  static load(host: string, now: () => number, stateDir: string, log?: (msg: string) => void): UsageBook {
    return new UsageBook(host, now, path.join(stateDir, USAGE_FILE), log);
  }

  record(r: ServedRecord): void {
    const hour = Math.floor(this.now() / HOUR_MS) * HOUR_MS;
    let rows = this.#hours.get(hour);
    if (!rows) this.#hours.set(hour, (rows = new Map()));
    const id = `${r.key}\0${r.model}`;
    let c = rows.get(id);
    if (!c) rows.set(id, (c = zero()));
    if (r.outcome === 'limited') c.limited++;
    else {
      c.requests++;
      if (r.outcome === 'error') c.errors++;
    }
    c.prompt_cached += Math.max(0, r.promptCached ?? 0);
    c.prompt_uncached += Math.max(0, r.promptUncached ?? 0);
    c.completion += Math.max(0, r.completion ?? 0);
    this.#dirty = true;
  }

  /** This node's rows since `sinceMs` (hours that end after it), of one key when given; per hour or summed over the span. */
  rows(sinceMs: number, key?: string, byHour = false): UsageRow[] {
    const out: UsageRow[] = [];
    for (const [hour, rows] of [...this.#hours].sort((a, b) => a[0] - b[0])) {
      if (hour + HOUR_MS <= sinceMs) continue;
      for (const [id, c] of rows) {
        const [k, model] = id.split('\0');
        if (key !== undefined && k !== key) continue;
        out.push({ key: k, model, host: this.host, ...(byHour ? { hour } : {}), ...c });
      }
    }
    return byHour ? out : mergeRows(out);
  }

  save(): void {
    if (!this.file) return;
    this.#prune();
    if (!this.#dirty) return;
    this.#dirty = false;
    const tmp = `${this.file}.${process.pid}.tmp`;
    try {
      const hours = [...this.#hours].map(([hour, rows]) => ({ hour, rows: [...rows].map(([id, c]) => ({ id, ...c })) }));
      fs.writeFileSync(tmp, JSON.stringify({ v: 1, hours }));
      fs.renameSync(tmp, this.file);
    } catch (err) {
      this.log?.(`usage: cannot save ${this.file} (${(err as Error).message})`);
      fs.rmSync(tmp, { force: true });
    }
  }

  #prune(): void {
    const oldest = Math.floor(this.now() / HOUR_MS) * HOUR_MS - KEEP_HOURS * HOUR_MS;
    for (const hour of this.#hours.keys()) {
      if (hour < oldest) {
        this.#hours.delete(hour);
        this.#dirty = true;
      }
    }
  }

  #read(file: string): void {
    let doc: { hours?: { hour: unknown; rows: unknown }[] };
    try {
      doc = JSON.parse(fs.readFileSync(file, 'utf8'));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.log?.(`usage: ${file} is unreadable (${(err as Error).message}); starting empty`);
      return;
    }
    for (const h of Array.isArray(doc.hours) ? doc.hours : []) {
      if (typeof h.hour !== 'number' || !Array.isArray(h.rows)) continue;
      const rows = new Map<string, Counts>();
      for (const r of h.rows as Record<string, unknown>[]) {
        if (typeof r.id !== 'string') continue;
        const c = zero();
        for (const f of COUNT_FIELDS) c[f] = typeof r[f] === 'number' && Number.isFinite(r[f]) ? (r[f] as number) : 0;
        rows.set(r.id, c);
      }
      this.#hours.set(h.hour, rows);
    }
    this.#prune();
  }
}

/** Rows summed by (key, model, host[, hour]), sorted. Pure. */
export function mergeRows(rows: readonly UsageRow[]): UsageRow[] {
  const by = new Map<string, UsageRow>();
  for (const r of rows) {
    const id = `${r.key}\0${r.model}\0${r.host}\0${r.hour ?? ''}`;
    const m = by.get(id);
    if (!m) by.set(id, { ...r });
    else for (const f of COUNT_FIELDS) m[f] += r[f];
  }
  return [...by.values()].sort((a, b) => (a.hour ?? 0) - (b.hour ?? 0) || cmp(a.key, b.key) || cmp(a.model, b.model) || cmp(a.host, b.host));
}

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** Rows from untrusted JSON (a member's answer); malformed ones are left out. */
export function parseRows(x: unknown): UsageRow[] {
  if (!Array.isArray(x)) return [];
  const out: UsageRow[] = [];
  for (const r of x as Record<string, unknown>[]) {
    if (!r || typeof r.key !== 'string' || typeof r.model !== 'string' || typeof r.host !== 'string') continue;
    const row: UsageRow = { key: r.key, model: r.model, host: r.host, ...zero() };
    if (typeof r.hour === 'number') row.hour = r.hour;
    for (const f of COUNT_FIELDS) row[f] = typeof r[f] === 'number' && Number.isFinite(r[f]) ? (r[f] as number) : 0;
    out.push(row);
  }
  return out;
}
