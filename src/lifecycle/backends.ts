/**
 * This node's backends, kept by model entry so a reload (SIGHUP) replaces
 * only what changed (SPEC section 11): made at start and on reload (an
 * on-demand entry, or an always entry whose file must be fetched first, as
 * placeholders the lifecycle loads later), wired to the node's events,
 * swapped when the lifecycle loads or unloads an entry, and counted against
 * the memory budget by their engine processes.
 */
import type { ModelConfig } from '../config/schema.ts';
import type { Backend, BackendInfo } from '../engines/backend.ts';
import type { SlotKeeper } from '../engines/llamacpp/llamacpp.ts';
import { configDescriptor, createBackendsFor, createEntryBackends, createSplitBackend, entryInfos, entryKey } from '../engines/factory.ts';
import { hideFromEngines } from '../engines/llamacpp/engine-env.ts';
import type { SlotTable } from '../engines/targets.ts';
import type { Log } from '../log.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { bytesText, Lifecycle, splitOf } from './lifecycle.ts';
import { entryMemory } from './memory.ts';

/** What keeping the backends needs from the node. */
export interface EntryBackendPorts {
  readonly slots: SlotTable;
  /** Wake the waiting requests: a backend changed state, or the lists changed. */
  pump(): void;
  /** The lifecycle the entries are added to and removed from (made after this, hence a getter). */
  lifecycle(): Pick<Lifecycle, 'add' | 'remove' | 'lost'>;
  /** Where each entry's file is (files/model-files.ts). */
  readonly files: {
    /** The entry with the file its memory is measured from. */
    measured(m: ModelConfig): ModelConfig;
    /** An always entry's file: here, or to be fetched before it loads. */
    alwaysFile(m: ModelConfig): { kind: 'here'; entry: ModelConfig } | { kind: 'fetch' };
    /** An always entry waits for its file. */
    awaitFile(model: string): void;
  };
  /** node.state_dir: engines record themselves there (engines/llamacpp/leftovers.ts). */
  readonly stateDir: string;
  /** Keeps llama-server slots' prompts over a stop or an unload (survive/slot-store.ts); absent: none kept. */
  readonly keeper?: SlotKeeper;
  readonly log: Pick<Log, 'info' | 'warn' | 'debug'>;
  readonly metrics: Pick<Metrics, 'engineRestarts'>;
}

export class EntryBackends {
  /** Every backend of this node, in the order targets list them. */
  #list: Backend[] = [];
  /** Backends by model entry (entryKey), so a reload replaces only what changed. */
  readonly #byEntry = new Map<string, Backend[]>();
  /** The last replacement asked (apply): the next one runs after it. */
  #applying: Promise<unknown> = Promise.resolve();

  constructor(private readonly p: EntryBackendPorts) {}

  get list(): readonly Backend[] {
    return this.#list;
  }

  /** The backends of the config's entries at start, in the slot table; not yet started. */
  async startWith(models: readonly ModelConfig[]): Promise<Backend[]> {
    const fresh = await this.#create(models);
    this.#list = fresh;
    this.p.slots.setBackends(this.#list);
    return fresh;
  }

  /**
   * A reload's entries: those whose key is gone are removed (lists, slot
   * table, lifecycle), new ones made; unchanged ones keep their backends.
   * The caller stops the removed and starts the added.
   */
  async replace(models: readonly ModelConfig[]): Promise<{ removed: Backend[]; added: Backend[] }> {
    const wanted = new Set(models.map(entryKey));
    const removed: Backend[] = [];
    for (const [key, list] of this.#byEntry) {
      if (!wanted.has(key)) {
        removed.push(...list);
        this.#byEntry.delete(key);
      }
    }
    const have = new Set(this.#byEntry.keys());
    const addedEntries = models.filter((m) => !have.has(entryKey(m)));
    this.#list = this.#list.filter((b) => !removed.includes(b));
    this.p.lifecycle().remove(removed);
    for (const m of addedEntries) if (m.api_key_env) hideFromEngines(m.api_key_env);
    const added = await this.#create(addedEntries);
    this.#list = [...this.#list, ...added];
    this.p.slots.setBackends(this.#list);
    return { removed, added };
  }

  /**
   * Replace the entries (a reload, or a many-model endpoint's list that
   * changed; one at a time, in the order asked), then stop the removed
   * backends and start the added ones; resolves once they have.
   */
  async apply(models: readonly ModelConfig[], why: string): Promise<{ removed: Backend[]; added: Backend[] }> {
    const replaced = this.#applying.then(() => this.replace(models));
    this.#applying = replaced.catch(() => {});
    const { removed, added } = await replaced;
    for (const b of removed) this.p.log.info(`${why}: stopping ${b.id}`);
    for (const b of added) this.p.log.info(`${why}: starting ${b.id}`);
    await Promise.all([...removed.map((b) => b.stop()), ...added.map((b) => b.start())]);
    this.p.pump();
    return { removed, added };
  }

  /** Real backends for an entry with these ids (the lifecycle's `create`: an on-demand load), wired, not started. */
  createFor(entry: ModelConfig, infos: readonly BackendInfo[]): Promise<Backend[]> {
    return this.#wire(createBackendsFor(entry, infos, (msg, fields) => this.#engineLog(msg, fields), this.p.stateDir, this.p.keeper));
  }

  /** The backend of a model split across members (its llama-server with `rpcArgs`), wired, not started; `teardown` once it stops. */
  createSplit(entry: ModelConfig, infos: readonly BackendInfo[], rpcArgs: readonly string[], teardown: () => Promise<void>): Promise<Backend[]> {
    if (entry.engine !== 'llamacpp') return Promise.reject(new Error(`${entry.name}: only a llamacpp entry runs split`));
    return this.#wire(Promise.all(infos.map((info) => createSplitBackend(entry, info, (msg, fields) => this.#engineLog(msg, fields), rpcArgs, teardown))));
  }

  /** The lifecycle replaced an entry's backends (loaded, unloaded): the lists and slot table follow. */
  swap(old: readonly Backend[], next: readonly Backend[]): void {
    const swapIn = (list: Backend[]) => {
      const out = list.filter((b) => !old.includes(b));
      const at = list.findIndex((b) => old.includes(b));
      out.splice(at < 0 ? out.length : at, 0, ...next);
      return out;
    };
    this.#list = swapIn(this.#list);
    for (const [key, list] of this.#byEntry) if (list.some((b) => old.includes(b))) this.#byEntry.set(key, swapIn(list));
    this.p.slots.setBackends(this.#list);
    this.p.pump();
    this.p.slots.changed();
  }

  /** Pids of this node's engine processes (memory_budget: auto does not count their GPU use as others'). */
  pids(): Set<number> {
    const pids = new Set<number>();
    for (const b of this.#list) {
      const pid = (b as { pid?: number }).pid;
      if (typeof pid === 'number') pids.add(pid);
    }
    return pids;
  }

  async #create(entries: readonly ModelConfig[]): Promise<Backend[]> {
    const p = this.p;
    const taken = new Set(this.#list.map((b) => b.id));
    const out: Backend[] = [];
    for (const m of entries) {
      const key = entryKey(m);
      let memory = 0;
      try {
        // A file fetched earlier is measured where it is (SPEC section 11).
        memory = await entryMemory(p.files.measured(m));
      } catch (err) {
        p.log.warn(`${(err as Error).message}; counting it as 0 bytes`);
      }
      // An always entry whose file is not here: its verified copy, else fetched from a member first (SPEC section 11).
      const always = m.load === 'always' ? p.files.alwaysFile(m) : { kind: 'here' as const, entry: m };
      // An on-demand entry starts as placeholders (its target listed with 0 slots); the lifecycle loads it when asked.
      // An always entry with `split` too: it may need lenders, and its lifecycle places it (SPEC section 11).
      const made =
        m.load === 'on_demand' || always.kind === 'fetch' || splitOf(m) !== undefined
          ? Lifecycle.placeholders(entryInfos(m, taken), configDescriptor(m))
          : await this.#wire(createEntryBackends(always.entry, taken, (msg, fields) => this.#engineLog(msg, fields), p.stateDir, p.keeper));
      p.lifecycle().add(m, made, memory, { fetchFirst: always.kind === 'fetch' });
      if (m.load === 'on_demand') p.log.info(`${m.name}: on demand, ${bytesText(memory * made.length)} when loaded`);
      else if (splitOf(m) !== undefined && always.kind === 'here') p.log.info(`${m.name}: ${bytesText(memory)}; loaded here when the budget holds it, else split across lending members (split: ${JSON.stringify(splitOf(m))})`);
      if (always.kind === 'fetch') {
        p.files.awaitFile(m.name);
        p.log.info(`${m.name}: ${'path' in m ? m.path : ''} is not here; it loads once it is fetched from a member that has it`);
      }
      this.#byEntry.set(key, [...(this.#byEntry.get(key) ?? []), ...made]);
      out.push(...made);
    }
    return out;
  }

  /** The node's events on real backends: queues wake on state changes, descriptors regroup targets, restarts count. */
  async #wire(made: Promise<Backend[]>): Promise<Backend[]> {
    const list = await made;
    for (const b of list) {
      b.on('state', () => {
        this.p.pump();
        // A poll held open for a free slot (?wait=) answers when a backend comes up too: an on-demand load's end
        // reaches the entry that waits for it at once, not at its next poll.
        this.p.slots.changed();
      });
      b.on('descriptor', () => this.p.slots.setBackends(this.#list));
      b.on('restart', () => this.p.metrics.engineRestarts.inc({ model: b.info.model }));
      // A router's model that the router unloaded by itself (engines/many/router-model.ts).
      b.on('lost', (why: string) => this.p.lifecycle().lost(b, why));
    }
    return list;
  }

  /**
   * Engine output (`[model/idx] …`) is shown while the engine loads or fails,
   * where it explains what is going on; once it serves, llama-server prints
   * a line per request, so those lines are debug (VIIWORK_DEBUG=1).
   */
  #engineLog(msg: string, fields?: Record<string, unknown>): void {
    if (!fields?.engine_output) return this.p.log.info(msg);
    const b = this.#list.find((x) => x.id === fields.backend);
    if (b && b.state === 'healthy') this.p.log.debug(msg);
    else this.p.log.info(msg);
  }
}
