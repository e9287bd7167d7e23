/**
 * The mesh-wide key table (SPEC section 12): name -> what the key may do,
 * converging by gossip exactly as the alias table does (Lamport versions,
 * tombstones kept for good, `merge` keeps the maximum per name), kept in
 * `<state_dir>/keys.json` (hashes only; written atomically, mode 0600).
 *
 * Lookups by secret go through the SHA-256 of what the client sent: the
 * table holds no secret, and a Map lookup on a digest tells a timing
 * observer nothing about the secret.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { checkKeyFields, type KeySpec, type KeyValue } from '../config/key-spec.ts';
import { encodeKeyChange, MAX_KEY_CHANGE_BYTES } from './codec.ts';
import { compareKeyEntries, CONFIG_WRITER, KeyError, parseKeyEntry, type KeyEntry } from './types.ts';

export const KEY_FILE = 'keys.json';
/** How long merged changes wait to be written together. */
const SAVE_COALESCE_MS = 200;

export type KeyChangeListener = (changed: KeyEntry[], origin: 'local' | 'merge' | 'seed') => void;

/** A live key as the table shows it. */
export type KeyView = KeySpec & { version: number; writer: string; at: number };

const copy = (e: KeyEntry): KeyEntry => structuredClone(e);

export class KeyTable {
  readonly #entries = new Map<string, KeyEntry>();
  /** sha256 -> name of the live key holding it. */
  readonly #byHash = new Map<string, string>();
  readonly #listeners = new Set<KeyChangeListener>();
  readonly #file: string | undefined;
  readonly #log: (message: string) => void;
  readonly #now: () => number;
  #version = 0;
  /** The digest of the entries, made on first read after a change. */
  #digest: string | undefined;
  /** A save of merged changes waiting (they are coalesced: a burst of gossip writes the file once). */
  #saveTimer: NodeJS.Timeout | undefined;

  constructor(opts: { file?: string; log?: (message: string) => void; now?: () => number } = {}) {
    this.#file = opts.file;
    this.#log = opts.log ?? (() => {});
    this.#now = opts.now ?? Date.now;
  }

  /** The table kept in `<stateDir>/keys.json`, read now (a missing file is an empty table, an unreadable one is logged). */
  static load(stateDir: string, opts: { log?: (message: string) => void; now?: () => number } = {}): KeyTable {
    const t = new KeyTable({ ...opts, file: path.join(stateDir, KEY_FILE) });
    t.#read();
    return t;
  }

  /** The highest Lamport version in the table (`key_version` in /v1/capacity). */
  get version(): number {
    return this.#version;
  }

  /**
   * What the table holds, as 16 hex digits of a SHA-256 over every entry,
   * tombstones included (`key_digest` in /v1/capacity). The version alone
   * cannot say it: two nodes written at once give their changes the same
   * Lamport version (issue 46: three nodes at key_version 354 held 720, 420
   * and 718 keys). Two tables with the same digest hold the same entries;
   * members whose digests differ pull each other's table (keys/sync.ts).
   */
  get digest(): string {
    if (this.#digest === undefined) {
      const h = crypto.createHash('sha256');
      for (const name of [...this.#entries.keys()].sort()) h.update(JSON.stringify(this.#entries.get(name))).update('\n');
      this.#digest = h.digest('hex').slice(0, 16);
    }
    return this.#digest;
  }

  /** Does the table hold any entry, tombstones included? (An empty table gossips nothing: a mesh without keys is unchanged.) */
  get empty(): boolean {
    return this.#entries.size === 0;
  }

  /** How many live keys. */
  get size(): number {
    return this.#byHash.size;
  }

  get(name: string): KeyView | undefined {
    const e = this.#entries.get(name);
    return e?.value ? view(e) : undefined;
  }

  /** The table's entry for this name, tombstones included. */
  entry(name: string): KeyEntry | undefined {
    const e = this.#entries.get(name);
    return e && copy(e);
  }

  /** The live key whose secret has this SHA-256 (lower-case hex). */
  byHash(sha256: string): KeyView | undefined {
    const name = this.#byHash.get(sha256);
    return name === undefined ? undefined : this.get(name);
  }

  list(): KeyView[] {
    return this.snapshot()
      .filter((e) => e.value)
      .map(view);
  }

  /** Every entry, tombstones included, sorted by name: the push-pull state. */
  snapshot(): KeyEntry[] {
    return [...this.#entries.keys()].sort().map((k) => copy(this.#entries.get(k)!));
  }

  /** Add a key. Throws KeyError `exists` when a live key has the name or the hash. */
  add(spec: KeySpec, writer: string): KeyEntry {
    if (this.get(spec.name)) throw new KeyError('exists', `a key named "${spec.name}" exists; change it with keys set (PATCH /v1/keys/${spec.name}) or remove it first`);
    if (this.#byHash.has(spec.sha256)) throw new KeyError('exists', 'that secret already belongs to another key');
    const { name, ...value } = spec;
    return this.#write(name, value, writer);
  }

  /** Change the given fields of a live key (validated as a PATCH body). Throws KeyError. */
  patch(name: string, fields: unknown, writer: string): KeyEntry {
    const current = this.get(name);
    if (!current) throw new KeyError('not_found', `no key named "${name.slice(0, 80)}"; GET /v1/keys lists them`);
    const { value, problems } = checkKeyFields(fields, { partial: true });
    if (problems.length) throw new KeyError('invalid', problems.map((p) => `${p.path || 'body'}: ${p.message}`).join('; '));
    const { name: _n, version: _v, writer: _w, at: _a, ...old } = current;
    const next: KeyValue = { ...old, ...value, limits: value.limits === undefined ? old.limits : mergeLimits(old.limits, (fields as { limits: Record<string, unknown> }).limits) };
    if (next.sha256 !== old.sha256 && this.#byHash.has(next.sha256)) throw new KeyError('exists', 'that secret already belongs to another key');
    return this.#write(name, next, writer);
  }

  /** Revoke a key (a tombstone). Throws KeyError `not_found`. */
  remove(name: string, writer: string): KeyEntry {
    if (!this.get(name)) throw new KeyError('not_found', `no key named "${name.slice(0, 80)}"; GET /v1/keys lists them`);
    return this.#write(name, null, writer);
  }

  /** Merge changes from gossip; malformed entries are ignored. Returns the entries that changed this table. */
  merge(entries: Iterable<unknown>): KeyEntry[] {
    const changed: KeyEntry[] = [];
    for (const raw of entries) {
      const e = parseKeyEntry(raw);
      if (e && this.#apply(e)) changed.push(copy(e));
    }
    if (changed.length) this.#changed(changed, 'merge');
    return changed;
  }

  /** Seed a keys file's entries at version 0, only for names the table has no entry for (a revocation in the mesh wins). */
  seed(specs: readonly KeySpec[]): KeyEntry[] {
    const seeded: KeyEntry[] = [];
    for (const { name, ...value } of specs) {
      if (this.#entries.has(name)) continue;
      const e: KeyEntry = { name, version: 0, writer: CONFIG_WRITER, at: 0, value };
      if (this.#apply(e)) seeded.push(copy(e));
    }
    if (seeded.length) this.#changed(seeded, 'seed');
    return seeded;
  }

  onChange(fn: KeyChangeListener): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  #write(name: string, value: KeyValue | null, writer: string): KeyEntry {
    const e: KeyEntry = { name, version: this.#version + 1, writer, at: Math.max(0, Math.floor(this.#now())), value };
    const bytes = encodeKeyChange(e).length;
    if (bytes > MAX_KEY_CHANGE_BYTES) throw new KeyError('too_large', `key "${name}" would take ${bytes} bytes in gossip, more than ${MAX_KEY_CHANGE_BYTES}; use fewer or shorter model globs`);
    this.#apply(e);
    this.#changed([copy(e)], 'local');
    return copy(e);
  }

  #apply(e: KeyEntry): boolean {
    const current = this.#entries.get(e.name);
    if (current && compareKeyEntries(e, current) <= 0) return false;
    if (current?.value && this.#byHash.get(current.value.sha256) === e.name) this.#byHash.delete(current.value.sha256);
    this.#entries.set(e.name, copy(e));
    this.#digest = undefined;
    // Two names for one hash can only come from concurrent writes on two nodes: the lower name holds it, on every node.
    if (e.value) {
      const holder = this.#byHash.get(e.value.sha256);
      if (holder === undefined || e.name < holder) this.#byHash.set(e.value.sha256, e.name);
    }
    if (e.version > this.#version) this.#version = e.version;
    return true;
  }

  #changed(changed: KeyEntry[], origin: 'local' | 'merge' | 'seed'): void {
    // A change written here is on disk before its answer; merged ones are in the mesh already, and a burst of them
    // (a thousand keys gossiped) would rewrite the whole file once each.
    if (origin === 'merge') this.#saveSoon();
    else this.#save();
    for (const fn of this.#listeners) {
      try {
        fn(changed, origin);
      } catch (err) {
        this.#log(`key change listener failed: ${(err as Error).message}`);
      }
    }
  }

  #read(): void {
    const file = this.#file!;
    let doc: { entries?: unknown };
    try {
      doc = JSON.parse(fs.readFileSync(file, 'utf8'));
      if (typeof doc !== 'object' || doc === null || !Array.isArray(doc.entries)) throw new Error('no "entries" list');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.#log(`keys: ${file} is unreadable (${(err as Error).message}); starting with an empty table (the mesh fills it again)`);
      return;
    }
    let skipped = 0;
    for (const raw of doc.entries as unknown[]) {
      const e = parseKeyEntry(raw);
      if (e) this.#apply(e);
      else skipped++;
    }
    if (skipped) this.#log(`keys: skipped ${skipped} malformed entr${skipped === 1 ? 'y' : 'ies'} in ${file}`);
  }

  #saveSoon(): void {
    if (!this.#file || this.#saveTimer) return;
    this.#saveTimer = setTimeout(() => this.#save(), SAVE_COALESCE_MS);
    this.#saveTimer.unref();
  }

  /** Write what a coalesced save still holds (at stop). */
  flush(): void {
    if (this.#saveTimer) this.#save();
  }

  #save(): void {
    clearTimeout(this.#saveTimer);
    this.#saveTimer = undefined;
    if (!this.#file) return;
    const tmp = `${this.#file}.${process.pid}.tmp`;
    try {
      fs.mkdirSync(path.dirname(this.#file), { recursive: true });
      fs.writeFileSync(tmp, JSON.stringify({ v: 1, version: this.#version, entries: this.snapshot() }, null, 1), { mode: 0o600 });
      fs.renameSync(tmp, this.#file);
    } catch (err) {
      this.#log(`keys: cannot save ${this.#file} (${(err as Error).message}); the change is kept in memory and in the mesh`);
      fs.rmSync(tmp, { force: true });
    }
  }
}

/** PATCH limits: a number sets, null removes, a missing kind keeps. */
function mergeLimits(old: KeyValue['limits'], asked: Record<string, unknown>): KeyValue['limits'] {
  const out: Record<string, number> = { ...old };
  for (const [k, v] of Object.entries(asked)) {
    if (v === null) delete out[k];
    else out[k] = v as number;
  }
  return out;
}

function view(e: KeyEntry): KeyView {
  return { name: e.name, ...structuredClone(e.value!), version: e.version, writer: e.writer, at: e.at };
}
