/**
 * The mesh-wide alias table (SPEC section 9): name -> {target, fallbacks},
 * converging by gossip.
 *
 * Every change (set, rm, revert) is an `AliasEntry` with a Lamport version
 * (the highest version in the table + 1) and the writer's node name. For
 * each name the table keeps the highest change by `compareEntries`; a
 * removal is a tombstone, kept for good (they are a few dozen bytes), so a
 * stale set arriving late never resurrects a removed alias. `merge` keeps
 * the maximum per name, so it is idempotent, commutative and associative:
 * the table's state never depends on the order in which changes arrived.
 *
 * Persistence: `<state_dir>/aliases.json`, rewritten atomically (temporary
 * file + rename) on every change; an unreadable file is reported and the
 * table starts empty (the mesh fills it again through push-pull).
 *
 * History is this node's record of the changes it applied, bounded to
 * `HISTORY_LIMIT`, ordered like the changes themselves (most recent last).
 * A node that learnt a name through push-pull only has the winning change.
 */
import fs from 'node:fs';
import path from 'node:path';
import { encodeChange, MAX_CHANGE_BYTES } from './codec.ts';
import {
  AliasError,
  checkName,
  checkValue,
  compareEntries,
  CONFIG_WRITER,
  nameProblem,
  parseEntry,
  sameValue,
  type AliasEntry,
  type AliasValue,
  type AliasView,
} from './types.ts';

export const ALIAS_FILE = 'aliases.json';
export const HISTORY_LIMIT = 256;

/** Where a change came from: an API write on this node, gossip, or the config file. */
export type ChangeOrigin = 'local' | 'merge' | 'seed';
export type ChangeListener = (changed: AliasEntry[], origin: ChangeOrigin) => void;

/** The `aliases:` section of the config: a target name, or a target with fallbacks. */
export type ConfigAliases = Record<string, string | { target: string; fallbacks?: string[] }>;

export type AliasTableOptions = {
  /** The state file; no file keeps the table in memory only. */
  file?: string;
  /** Receives one line per problem with the state file. */
  log?: (message: string) => void;
  /** Wall clock for the `at` of local changes. */
  now?: () => number;
  historyLimit?: number;
};

const copy = (e: AliasEntry): AliasEntry => ({ ...e, value: e.value ? { target: e.value.target, fallbacks: [...e.value.fallbacks] } : null });
const sameChange = (a: AliasEntry, b: AliasEntry) => a.name === b.name && compareEntries(a, b) === 0;

export class AliasTable {
  readonly #entries = new Map<string, AliasEntry>();
  #history: AliasEntry[] = [];
  readonly #listeners = new Set<ChangeListener>();
  readonly #file: string | undefined;
  readonly #log: (message: string) => void;
  readonly #now: () => number;
  readonly #historyLimit: number;
  #version = 0;

  constructor(opts: AliasTableOptions = {}) {
    this.#file = opts.file;
    this.#log = opts.log ?? (() => {});
    this.#now = opts.now ?? Date.now;
    this.#historyLimit = opts.historyLimit ?? HISTORY_LIMIT;
  }

  /** The table kept in `<stateDir>/aliases.json`, read now; a missing file is an empty table, an unreadable one is logged. */
  static load(stateDir: string, opts: Omit<AliasTableOptions, 'file'> = {}): AliasTable {
    const table = new AliasTable({ ...opts, file: path.join(stateDir, ALIAS_FILE) });
    table.#read();
    return table;
  }

  /** The highest Lamport version in the table (`alias_version` in /v1/capacity); 0 when empty. */
  get version(): number {
    return this.#version;
  }

  /** The live alias of this name, or undefined (never set, or removed). */
  get(name: string): AliasView | undefined {
    const e = this.#entries.get(name);
    return e?.value ? view(e) : undefined;
  }

  /** The table's entry for this name, tombstones included. */
  entry(name: string): AliasEntry | undefined {
    const e = this.#entries.get(name);
    return e && copy(e);
  }

  /** Every live alias, sorted by name. */
  list(): AliasView[] {
    return this.snapshot()
      .filter((e) => e.value)
      .map(view);
  }

  /** The changes this node applied, most recent last; only those of `name` when given. */
  history(name?: string): AliasEntry[] {
    return this.#history.filter((e) => name === undefined || e.name === name).map(copy);
  }

  /** Every entry, tombstones included, sorted by name: the push-pull state. */
  snapshot(): AliasEntry[] {
    return [...this.#entries.keys()].sort().map((k) => copy(this.#entries.get(k)!));
  }

  /** Point `name` at `target`, then `fallbacks` in order. Throws `AliasError` on a bad name or a change too large to gossip. */
  set(name: string, target: string, fallbacks: readonly string[], writer: string): AliasEntry {
    checkName('alias', name);
    return this.#write(name, checkValue(target, fallbacks), writer);
  }

  /** Remove `name`, leaving a tombstone. Throws `AliasError('not_found')` when no live alias has this name. */
  remove(name: string, writer: string): AliasEntry {
    checkName('alias', name);
    if (!this.#entries.get(name)?.value) throw new AliasError('not_found', `no alias named "${name}"`);
    return this.#write(name, null, writer);
  }

  /**
   * Restore the value `name` had before its current one, as a new change:
   * the latest change in this node's history that is older than the current
   * one and holds a different live value (so after a removal, the value
   * before it). Throws `AliasError` when there is none.
   */
  revert(name: string, writer: string): AliasEntry {
    checkName('alias', name);
    const current = this.#entries.get(name);
    if (!current) throw new AliasError('not_found', `no alias named "${name}"`);
    const earlier = this.#history.filter((h) => h.name === name && h.value && compareEntries(h, current) < 0 && !sameValue(h.value, current.value));
    const previous = earlier.at(-1);
    if (!previous) throw new AliasError('nothing_to_revert', `alias "${name}" has no earlier value in this node's history`);
    return this.#write(name, previous.value, writer);
  }

  /**
   * Merge changes from gossip (one change, or a whole table from push-pull).
   * Malformed entries are ignored. Returns the entries that changed this
   * table (the ones to gossip on); an entry already known or older than the
   * current one changes nothing.
   */
  merge(entries: Iterable<unknown>): AliasEntry[] {
    const changed: AliasEntry[] = [];
    for (const raw of entries) {
      const e = parseEntry(raw);
      if (e && this.#apply(e)) changed.push(copy(e));
    }
    if (changed.length) this.#changed(changed, 'merge');
    return changed;
  }

  /**
   * Seed the aliases of the config file, each at version 0 by writer
   * `config`, only for names the table has no entry for (a tombstone counts),
   * so any change made in the mesh wins over a config default. Throws
   * `AliasError` on an invalid config alias before seeding anything.
   */
  seed(aliases: ConfigAliases): AliasEntry[] {
    const values = Object.entries(aliases).map(([name, spec]) => {
      checkName('alias', name);
      return [name, typeof spec === 'string' ? checkValue(spec, []) : checkValue(spec?.target, spec?.fallbacks ?? [])] as const;
    });
    const seeded: AliasEntry[] = [];
    for (const [name, value] of values) {
      if (this.#entries.has(name)) continue;
      const e: AliasEntry = { name, version: 0, writer: CONFIG_WRITER, at: 0, value };
      if (this.#apply(e)) seeded.push(copy(e));
    }
    if (seeded.length) this.#changed(seeded, 'seed');
    return seeded;
  }

  /** Call `fn` after every change with the entries that changed; returns the unsubscribe function. */
  onChange(fn: ChangeListener): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  #write(name: string, value: AliasValue | null, writer: string): AliasEntry {
    const problem = nameProblem(writer);
    if (problem) throw new AliasError('invalid_name', `writer node name ${problem}`);
    const e: AliasEntry = { name, version: this.#version + 1, writer, at: Math.max(0, Math.floor(this.#now())), value };
    const bytes = encodeChange(e).length;
    if (bytes > MAX_CHANGE_BYTES) {
      throw new AliasError('too_large', `alias "${name.slice(0, 80)}" would take ${bytes} bytes in gossip, more than ${MAX_CHANGE_BYTES}; use shorter names or fewer fallbacks`);
    }
    this.#apply(e);
    this.#changed([copy(e)], 'local');
    return copy(e);
  }

  /** Keep `e` if it beats the current entry of its name; true when it did. */
  #apply(e: AliasEntry): boolean {
    const current = this.#entries.get(e.name);
    if (current && compareEntries(e, current) <= 0) return false;
    this.#entries.set(e.name, copy(e));
    if (e.version > this.#version) this.#version = e.version;
    this.#remember(e);
    return true;
  }

  #remember(e: AliasEntry): void {
    const h = this.#history;
    if (h.some((x) => sameChange(x, e))) return;
    // Ordered like the changes: usually appended, a late arrival slots in.
    let i = h.length;
    while (i > 0 && compareEntries(h[i - 1], e) > 0) i--;
    h.splice(i, 0, copy(e));
    if (h.length > this.#historyLimit) h.splice(0, h.length - this.#historyLimit);
  }

  #changed(changed: AliasEntry[], origin: ChangeOrigin): void {
    this.#save();
    for (const fn of this.#listeners) {
      try {
        fn(changed, origin);
      } catch (err) {
        this.#log(`alias change listener failed: ${(err as Error).message}`);
      }
    }
  }

  #read(): void {
    const file = this.#file!;
    let text: string;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.#log(`aliases: cannot read ${file} (${(err as Error).message}); starting with an empty table`);
      return;
    }
    let doc: { v?: unknown; entries?: unknown; history?: unknown };
    try {
      doc = JSON.parse(text);
      if (typeof doc !== 'object' || doc === null || !Array.isArray(doc.entries)) throw new Error('no "entries" list');
    } catch (err) {
      this.#log(`aliases: ${file} is unreadable (${(err as Error).message}); starting with an empty table`);
      return;
    }
    let skipped = 0;
    for (const raw of doc.entries as unknown[]) {
      const e = parseEntry(raw);
      if (e) this.#apply(e);
      else skipped++;
    }
    if (skipped) this.#log(`aliases: skipped ${skipped} malformed entr${skipped === 1 ? 'y' : 'ies'} in ${file}`);
    // #apply recorded the current entries; the saved history brings the older ones back.
    for (const raw of Array.isArray(doc.history) ? doc.history : []) {
      const e = parseEntry(raw);
      if (e) this.#remember(e);
    }
  }

  #save(): void {
    if (!this.#file) return;
    const doc = { v: 1, version: this.#version, entries: this.snapshot(), history: this.#history };
    const tmp = `${this.#file}.${process.pid}.tmp`;
    try {
      fs.mkdirSync(path.dirname(this.#file), { recursive: true });
      fs.writeFileSync(tmp, JSON.stringify(doc, null, 1));
      fs.renameSync(tmp, this.#file);
    } catch (err) {
      this.#log(`aliases: cannot save ${this.#file} (${(err as Error).message}); the change is kept in memory and in the mesh`);
      try {
        fs.rmSync(tmp, { force: true });
      } catch {
        // nothing more to do
      }
    }
  }
}

function view(e: AliasEntry): AliasView {
  return { name: e.name, target: e.value!.target, fallbacks: [...e.value!.fallbacks], version: e.version, writer: e.writer, at: e.at };
}
