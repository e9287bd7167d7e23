/**
 * The calls the node makes to llama-server in router mode
 * (../shared/llama-server-today.md section 5): the model list with each
 * model's status, `POST /models/load` and `/models/unload`, and a loaded
 * model's `/props`. Thin I/O, never throws; what the answers mean is
 * decided in engines/many/listing.ts and engines/many/router-model.ts.
 *
 * Every model of one router asks for the same list: one client per
 * (endpoint, key) shares it, so N models cost one `GET /models` per health
 * round, not N.
 */
import { request } from 'undici';
import { describeOutcome, fetchProps, probe, type EngineProps } from '../health.ts';
import { parseListing, type Listing } from './listing.ts';

/** An answer to a load or unload: done (or already so), or the router's refusal in its words. */
export type RouterAnswer = { ok: true } | { ok: false; status?: number; message: string };

const TIMEOUT_MS = 5000;
/** A backend looks its own model up by name: any id the node could have listed is kept (api.max_model_name is at most 64 KiB). */
const MAX_ID_BYTES = 65_536;

export class RouterClient {
  #list: { at: number; result: Promise<Listing | string> } | undefined;

  constructor(
    readonly base: string,
    private readonly headers: () => Record<string, string>,
  ) {}

  /**
   * The router's models with their status, at most `maxAgeMs` old (callers
   * within that window share one request). A string says why there is none.
   */
  list(maxAgeMs: number, now = performance.now()): Promise<Listing | string> {
    if (this.#list && now - this.#list.at <= maxAgeMs) return this.#list.result;
    const result = probe(this.base, '/models', { timeoutMs: TIMEOUT_MS, headers: this.headers() }).then((o) => {
      if (o.kind !== 'ok') return `${this.base}: ${describeOutcome('/models', o)}`;
      return parseListing(o.body, MAX_ID_BYTES) ?? `${this.base}: GET /models did not answer a model list`;
    });
    this.#list = { at: now, result };
    return result;
  }

  /** The next list() asks the router again (a load or unload changed it). */
  forget(): void {
    this.#list = undefined;
  }

  /** Ask the router to load `model`; one already running counts as loaded. */
  load(model: string): Promise<RouterAnswer> {
    return this.#post('/models/load', model, /already running/i);
  }

  /** Ask the router to unload `model`; one not running counts as unloaded. */
  unload(model: string): Promise<RouterAnswer> {
    return this.#post('/models/unload', model, /not running|not loaded/i);
  }

  /** A loaded model's /props, from its child (never loads it: `autoload=false`). */
  props(model: string): Promise<EngineProps | undefined> {
    return fetchProps(this.base, { timeoutMs: TIMEOUT_MS, headers: this.headers() }, `?model=${encodeURIComponent(model)}&autoload=false`);
  }

  async #post(path: string, model: string, alreadySo: RegExp): Promise<RouterAnswer> {
    this.forget();
    try {
      const r = await request(this.base + path, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...this.headers() },
        body: JSON.stringify({ model }),
        headersTimeout: TIMEOUT_MS,
        bodyTimeout: TIMEOUT_MS,
        signal: AbortSignal.timeout(TIMEOUT_MS),
      });
      const text = await r.body.text();
      if (r.statusCode >= 200 && r.statusCode < 300) return { ok: true };
      let message = text.slice(0, 200);
      try {
        const m = (JSON.parse(text) as { error?: { message?: unknown } }).error?.message;
        if (typeof m === 'string') message = m;
      } catch {
        // not JSON: the text as it is
      }
      if (r.statusCode === 400 && alreadySo.test(message)) return { ok: true };
      return { ok: false, status: r.statusCode, message: `POST ${path}: ${r.statusCode} ${message}` };
    } catch (err) {
      return { ok: false, message: `POST ${path}: ${(err as Error).message}` };
    }
  }
}

/** One client per (endpoint, key): the models of one router share their list. */
const clients = new Map<string, RouterClient>();

export function routerClient(base: string, headers: () => Record<string, string>): RouterClient {
  const key = `${base}\0${headers().authorization ?? ''}`;
  let c = clients.get(key);
  if (!c) clients.set(key, (c = new RouterClient(base, headers)));
  return c;
}
