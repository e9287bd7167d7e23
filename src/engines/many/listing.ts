/**
 * What an endpoint that serves many models lists (SPEC section 3,
 * "Endpoints that serve many models"), and the entries the node makes of it.
 * Pure: the I/O is engines/many/router-client.ts and lifecycle/listed-models.ts.
 *
 * - `GET /v1/models` of llama-server in router mode, llama-swap, Ollama or
 *   LM Studio: `{"data": [{"id": …}, …]}`. The listed id is the model's name
 *   here, as it is: clients send it, and the endpoint gets it back unchanged
 *   in the body's `model`, so nothing maps between two names.
 * - llama-server's router mode is told by its entries' `status` (`{"value":
 *   "loaded" | "loading" | "unloaded" | "sleeping" | "downloading", "failed"?,
 *   "exit_code"?}`); `GET /props` answering `role: "router"` says so too
 *   when the list is empty.
 */
import type { ListedFrom, ModelConfig } from '../../config/schema.ts';
import { workloadsFromArgs } from '../../workloads/gate.ts';

/** A router's word for one model's state; `failed` marks an unloaded model whose last load failed. */
export interface RouterStatus {
  value: string;
  failed: boolean;
  exitCode?: number;
  /** The child's command line (its `--parallel`, `--embeddings`, …), when the router gives it. */
  args: string[];
}

export interface Listing {
  /** Listed ids in the endpoint's order, each once. */
  ids: string[];
  /** llama-server in router mode: statuses by id. */
  router: boolean;
  status: Map<string, RouterStatus>;
  /** Ids left out, with why (logged once per change). */
  skipped: string[];
}

/** An endpoint listing more than this is cut here: every listed model is a target in every report. */
export const MAX_LISTED = 256;

/**
 * Read a `/v1/models` document. Undefined when it is not one (the caller
 * keeps what it had). Ids longer than `maxName` bytes (api.max_model_name:
 * no client could ask for them) are skipped.
 */
export function parseListing(doc: unknown, maxName: number): Listing | undefined {
  const data = (doc as { data?: unknown } | null)?.data;
  if (!Array.isArray(data)) return undefined;
  const ids: string[] = [];
  const status = new Map<string, RouterStatus>();
  const skipped: string[] = [];
  let router = false;
  for (const m of data) {
    const id = (m as { id?: unknown } | null)?.id;
    if (typeof id !== 'string' || id.length === 0 || ids.includes(id)) continue;
    if (Buffer.byteLength(id) > maxName) {
      skipped.push(`${id.slice(0, 40)}…: longer than api.max_model_name (${maxName} bytes)`);
      continue;
    }
    if (ids.length >= MAX_LISTED) {
      skipped.push(`${id}: past the first ${MAX_LISTED} models`);
      continue;
    }
    ids.push(id);
    const s = readStatus((m as { status?: unknown }).status);
    if (s) {
      router = true;
      status.set(id, s);
    }
  }
  return { ids, router, status, skipped };
}

function readStatus(raw: unknown): RouterStatus | undefined {
  if (typeof raw !== 'object' || raw === null) return undefined;
  const r = raw as { value?: unknown; failed?: unknown; exit_code?: unknown; args?: unknown };
  if (typeof r.value !== 'string') return undefined;
  return {
    value: r.value,
    failed: r.failed === true,
    ...(typeof r.exit_code === 'number' ? { exitCode: r.exit_code } : {}),
    args: Array.isArray(r.args) ? r.args.filter((a): a is string => typeof a === 'string') : [],
  };
}

/** A router's status in our lifecycle's words: loaded, loading (loading, downloading), or not loaded. */
export function routerState(s: RouterStatus | undefined): 'loaded' | 'loading' | 'unloaded' {
  if (!s) return 'unloaded';
  // A sleeping child keeps its slot and wakes on the next request: it serves.
  if (s.value === 'loaded' || s.value === 'sleeping') return 'loaded';
  if (s.value === 'loading' || s.value === 'downloading') return 'loading';
  return 'unloaded';
}

/** The slots a router's child runs, from its command line (`--parallel N`, `-np N`); undefined when it left them to the engine. */
export function parallelFromArgs(args: readonly string[]): number | undefined {
  for (let i = 0; i < args.length - 1; i++) {
    if (args[i] === '--parallel' || args[i] === '-np') {
      const n = Number(args[i + 1]);
      if (Number.isInteger(n) && n > 0) return n;
    }
  }
  return undefined;
}

/** A `models: auto` entry. */
export function isAuto(m: ModelConfig): boolean {
  return m.engine === 'openai' && m.models === 'auto';
}

/**
 * The node's entries: every entry as written, but each `models: auto` entry
 * replaced by one entry per model its endpoint lists (none while it has
 * listed nothing yet). A listed entry is the auto entry with the listed id
 * as its name; with a router it keeps the entry's `load` (on_demand by
 * default: the node loads and unloads through the router), otherwise it is
 * `always` (the endpoint loads by itself; the node only sends requests).
 * Equal inputs give equal entries, so a refresh that lists the same models
 * keeps their backends (EntryBackends.replace compares entries).
 */
export function expandModels(models: readonly ModelConfig[], listings: (m: ModelConfig) => Listing | undefined): ModelConfig[] {
  const out: ModelConfig[] = [];
  for (const m of models) {
    if (!isAuto(m) || m.engine !== 'openai') {
      out.push(m);
      continue;
    }
    const listing = listings(m);
    if (!listing) continue;
    const { models: _auto, ...rest } = m;
    for (const id of listing.ids) {
      const listed: ListedFrom = { group: m.name, router: listing.router };
      // A router's child started with --embeddings or --reranking does that, not chat, when the entry names no workloads.
      const args = listing.status.get(id)?.args ?? [];
      const fromArgs = m.workloads === undefined && args.length ? workloadsFromArgs(args) : undefined;
      const workloads = fromArgs && !fromArgs.includes('chat') ? { workloads: fromArgs } : {};
      out.push({ ...rest, ...workloads, name: id, load: listing.router ? m.load : 'always', listed });
    }
  }
  return out;
}
