/**
 * The models of each `models: auto` entry (SPEC section 3, "Endpoints that
 * serve many models"): its endpoint's `GET /v1/models`, read at start, on
 * SIGHUP and every `LIST_REFRESH_MS`. When a list changes, the node's
 * entries (engines/many/listing.ts `expandModels`) go through the same
 * replacement a reload does (EntryBackends.apply): a model that appears gets
 * its target, one that goes has its backends removed, the others keep
 * theirs.
 *
 * - An endpoint that does not answer keeps the models it listed last: its
 *   backends' own health checks say it is down, and a refresh that lists
 *   nothing is not taken for "every model is gone".
 * - llama-server in router mode (statuses in the list, or `/props` saying
 *   `role: "router"`) is asked with `?reload=1`, so a GGUF put in its
 *   `--models-dir` is listed without restarting it. Models it has loaded
 *   that this node's lifecycle counts unloaded (loaded before this node
 *   started, or by another client) are taken in as loaded (`adopt`), so
 *   they count as loaded here and unload when idle like the node's own.
 */
import type { ModelConfig } from '../config/schema.ts';
import { entryKey } from '../engines/factory.ts';
import { fetchProps, normalizeBaseUrl, probe, Ticker } from '../engines/health.ts';
import { expandModels, isAuto, parseListing, routerState, type Listing } from '../engines/many/listing.ts';
import type { Log } from '../log.ts';

/** How often every `models: auto` endpoint is listed again. */
export const LIST_REFRESH_MS = 10_000;

export interface ListedModelsPorts {
  /** The node's entries changed: replace them as a reload does (EntryBackends.apply). */
  apply(models: ModelConfig[], why: string): Promise<unknown>;
  /** A router's model is loaded there but unloaded in this node's lifecycle: take it in as loaded. */
  adopt(model: string, detail: string): void;
  /** api.max_model_name: longer ids are skipped (no client could ask for them). */
  readonly maxName: number;
  readonly log: Pick<Log, 'info' | 'warn'>;
  /** The environment the entries' api_key_env are read from. */
  readonly env?: NodeJS.ProcessEnv;
  readonly intervalMs?: number;
}

interface Watched {
  listing?: Listing;
  /** The endpoint's /props was asked whether it is a router (once, while its list carried no statuses). */
  propsAsked: boolean;
  router: boolean;
  /** The last failure logged, so a down endpoint is one line, not one every refresh. */
  failing?: string;
  /** performance.now() when `listing` was read. */
  readAt: number;
}

/** A list this fresh may adopt what it shows loaded (see adoptLoaded). */
const ADOPT_FRESH_MS = 1000;

export class ListedModels {
  #models: readonly ModelConfig[] = [];
  readonly #watched = new Map<string, Watched>();
  readonly #ticker: Ticker;
  #refreshing: Promise<void> | undefined;

  constructor(private readonly p: ListedModelsPorts) {
    this.#ticker = new Ticker(() => this.refresh(), p.intervalMs ?? LIST_REFRESH_MS);
  }

  /** The node's entries now: as written, with every `models: auto` entry replaced by the models its endpoint listed. */
  entries(): ModelConfig[] {
    return expandModels(this.#models, (m) => this.#watched.get(entryKey(m))?.listing);
  }

  /**
   * Watch these entries (start, and each reload): forget entries no longer
   * written, list every endpoint now (so SIGHUP also picks up a model added
   * there at once). Does not apply: the caller starts or replaces with
   * `entries()` itself.
   */
  async watch(models: readonly ModelConfig[]): Promise<void> {
    this.#models = models;
    const keys = new Set(models.filter(isAuto).map(entryKey));
    for (const k of this.#watched.keys()) if (!keys.has(k)) this.#watched.delete(k);
    await Promise.all(models.filter(isAuto).map((m) => this.#read(m)));
  }

  /** Refresh every interval from now; adopt what routers hold loaded. */
  start(): void {
    this.adoptLoaded();
    if (!this.#ticker.running) this.#ticker.start();
  }

  stop(): void {
    this.#ticker.stop();
  }

  /** List every endpoint again; apply when any list changed. Concurrent calls share one round. */
  refresh(): Promise<void> {
    this.#refreshing ??= this.#refresh().finally(() => (this.#refreshing = undefined));
    return this.#refreshing;
  }

  async #refresh(): Promise<void> {
    // Compared as entries, not ids: a router's child restarted with --embeddings changes its entry's workloads.
    const keysOf = () => this.entries().map(entryKey).join('\n');
    const before = keysOf();
    await Promise.all(this.#models.filter(isAuto).map((m) => this.#read(m)));
    const changed = keysOf() !== before;
    // Not awaited: an added backend's start may be a long load, and the next refresh must not wait for it (applies queue in order).
    if (changed) void this.p.apply(this.entries(), 'models listed').catch((err) => this.p.log.warn(`applying listed models: ${(err as Error).message}`));
    this.adoptLoaded();
  }

  /**
   * Routers' models loaded there: the lifecycle takes in those it counts
   * unloaded (a no-op for the others). Only from a list read within
   * ADOPT_FRESH_MS: an older one may still show a model this node has
   * unloaded since, which would be loaded right back.
   */
  adoptLoaded(now = performance.now()): void {
    for (const m of this.#models) {
      const w = this.#watched.get(entryKey(m));
      if (!w?.listing?.router || m.load !== 'on_demand' || now - w.readAt > ADOPT_FRESH_MS) continue;
      for (const [id, s] of w.listing.status) if (routerState(s) === 'loaded') this.p.adopt(id, `already loaded on the router at ${m.engine === 'openai' ? m.url : ''}`);
    }
  }

  /** Read one entry's endpoint and keep its list; a change of ids is logged. */
  async #read(m: ModelConfig): Promise<void> {
    if (m.engine !== 'openai') return;
    const key = entryKey(m);
    let w = this.#watched.get(key);
    if (!w) this.#watched.set(key, (w = { propsAsked: false, router: false, readAt: -Infinity }));
    const base = normalizeBaseUrl(m.url);
    const bearer = m.api_key_env ? (this.p.env ?? process.env)[m.api_key_env] : undefined;
    const headers: Record<string, string> = bearer ? { authorization: `Bearer ${bearer}` } : {};
    // A router rescans its models dir on ?reload=1 (a file added there is listed at once); others get the plain list.
    const askedAt = performance.now();
    const o = await probe(base, w.router ? '/v1/models?reload=1' : '/v1/models', { headers });
    const listing = o.kind === 'ok' ? parseListing(o.body, this.p.maxName) : undefined;
    if (!listing) {
      const why = o.kind === 'ok' ? 'GET /v1/models did not answer a model list' : o.kind === 'status' ? `GET /v1/models: ${o.status} ${o.message}` : `GET /v1/models: ${o.message}`;
      if (w.failing !== why) this.p.log.warn(`${m.name}: cannot list the models of ${base} (${why}); keeping the ${w.listing?.ids.length ?? 0} listed before, asking again in ${Math.round((this.p.intervalMs ?? LIST_REFRESH_MS) / 1000)} s`);
      w.failing = why;
      return;
    }
    w.failing = undefined;
    if (!listing.router && !w.propsAsked) {
      w.propsAsked = true;
      const props = await fetchProps(base, { headers });
      if (props?.raw.role === 'router') w.router = true;
    }
    if (listing.router) w.router = true;
    const next: Listing = { ...listing, router: w.router };
    const before = w.listing;
    w.listing = next;
    w.readAt = askedAt;
    const added = next.ids.filter((id) => !before?.ids.includes(id));
    const gone = before?.ids.filter((id) => !next.ids.includes(id)) ?? [];
    const kindChanged = before !== undefined && before.router !== next.router;
    if (!added.length && !gone.length && !kindChanged) return;
    const what = [added.length ? `new: ${added.join(', ')}` : '', gone.length ? `gone: ${gone.join(', ')}` : ''].filter(Boolean).join('; ');
    this.p.log.info(`${m.name}: ${base}${next.router ? ' (llama-server in router mode)' : ''} lists ${next.ids.length} model(s)${what ? ` (${what})` : ''}`);
    for (const s of next.skipped) if (!before?.skipped.includes(s)) this.p.log.warn(`${m.name}: skipped ${s}`);
  }
}
