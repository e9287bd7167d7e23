/**
 * Health probing shared by the engines that talk HTTP to a server: one GET
 * with a deadline, classified into what a backend decides on (answered OK,
 * answered with a status, refused, reset, timed out), llama-server's /props,
 * and a non-overlapping periodic ticker.
 */
import { Agent, request } from 'undici';
import { parseBuildInfo } from './llamacpp/version.ts';

/** What one probe found. */
export type ProbeOutcome =
  /** A 2xx answer; `body` is the parsed JSON when the answer was JSON, else its text. */
  | { kind: 'ok'; status: number; body: unknown }
  /** An answer that is not 2xx (503 while llama-server loads, 404 where there is no such path). */
  | { kind: 'status'; status: number; message: string }
  /** Nothing listens on the port (ECONNREFUSED). */
  | { kind: 'refused'; message: string }
  /** The connection was reset or closed before an answer. */
  | { kind: 'reset'; message: string }
  /** No answer within the deadline. */
  | { kind: 'timeout'; message: string }
  /** Anything else (bad URL, DNS failure...). */
  | { kind: 'error'; message: string };

export interface ProbeOptions {
  /** Deadline for the whole probe, connect to last body byte (default 5000 ms). */
  timeoutMs?: number;
  /** Abort the probe early (a backend that stops). */
  signal?: AbortSignal;
  /** Extra headers (the engine's key). */
  headers?: Record<string, string>;
}

/**
 * Probes get their own small pool so that they never queue behind inference
 * traffic, and each probe closes its connection (`reset`): an engine that was
 * restarted or crashed never leaves a stale keep-alive socket that a later
 * probe would misread as a reset.
 */
const probeAgent = new Agent({ connections: 64, keepAliveTimeout: 1000, connect: { timeout: 5000 } });

/** "http://127.0.0.1:8080/v1/" → "http://127.0.0.1:8080" (no trailing slash, no trailing /v1). */
export function normalizeBaseUrl(url: string): string {
  let u = url.trim().replace(/\/+$/, '');
  if (u.endsWith('/v1')) u = u.slice(0, -3);
  return u;
}

/** Sort a network error into refused, reset, timeout or error. */
export function classifyError(err: unknown): Exclude<ProbeOutcome, { kind: 'ok' } | { kind: 'status' }> {
  const e = err as { code?: string; name?: string; message?: string; cause?: { code?: string; message?: string } } | undefined;
  const code = e?.code ?? e?.cause?.code;
  const message = e?.cause?.message ?? e?.message ?? String(err);
  if (code === 'ECONNREFUSED') return { kind: 'refused', message: 'connection refused' };
  if (code === 'ECONNRESET' || code === 'EPIPE' || code === 'UND_ERR_SOCKET' || code === 'UND_ERR_CLOSED') return { kind: 'reset', message: `connection reset (${message})` };
  if (
    code === 'UND_ERR_CONNECT_TIMEOUT' ||
    code === 'UND_ERR_HEADERS_TIMEOUT' ||
    code === 'UND_ERR_BODY_TIMEOUT' ||
    code === 'ETIMEDOUT' ||
    e?.name === 'TimeoutError' ||
    e?.name === 'AbortError'
  )
    return { kind: 'timeout', message: 'no answer in time' };
  return { kind: 'error', message };
}

/** GET `base + path` once. Never throws. */
export async function probe(base: string, path: string, opts: ProbeOptions = {}): Promise<ProbeOutcome> {
  const timeoutMs = opts.timeoutMs ?? 5000;
  const signals = [AbortSignal.timeout(timeoutMs)];
  if (opts.signal) signals.push(opts.signal);
  try {
    const res = await request(base + path, {
      method: 'GET',
      dispatcher: probeAgent,
      signal: AbortSignal.any(signals),
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      reset: true,
      headers: { accept: 'application/json', ...opts.headers },
    });
    const text = await res.body.text();
    const type = String(res.headers['content-type'] ?? '');
    let body: unknown = text;
    if (type.includes('json')) {
      try {
        body = JSON.parse(text);
      } catch {
        body = text;
      }
    }
    if (res.statusCode >= 200 && res.statusCode < 300) return { kind: 'ok', status: res.statusCode, body };
    const msg = (body as { error?: { message?: unknown } } | undefined)?.error?.message;
    return { kind: 'status', status: res.statusCode, message: typeof msg === 'string' ? msg : text.slice(0, 200) };
  } catch (err) {
    return classifyError(err);
  }
}

/** One line for a log or a backend's `reason`: "GET /health: connection refused". */
export function describeOutcome(path: string, o: ProbeOutcome): string {
  if (o.kind === 'ok') return `GET ${path}: ${o.status}`;
  if (o.kind === 'status') return `GET ${path}: ${o.status}${o.message ? ` ${o.message}` : ''}`;
  return `GET ${path}: ${o.message}`;
}

/** What an engine says about itself on llama-server's `GET /props`. */
export interface EngineProps {
  /** `build_info` verbatim, e.g. "b4500-abcdef". */
  buildInfo: string | undefined;
  /** The build number in it (4500), for version gates; undefined when unknown or squashed (parseBuildNumber). */
  buildNumber: number | undefined;
  /** `total_slots` (the engine's --parallel). */
  totalSlots: number | undefined;
  /** The whole /props document. */
  raw: Record<string, unknown>;
}

/**
 * "b4500-abcdef" → 4500; undefined when it is not llama.cpp's "b<number>"
 * form, or when the number means nothing: "b1-de3ff81" (a squashed source)
 * and "b0-…" (built without git) are unknown builds, not old ones.
 */
export function parseBuildNumber(buildInfo: string | undefined): number | undefined {
  return parseBuildInfo(buildInfo)?.build;
}

/** GET /props (`query`: a router's `?model=…`); undefined when the engine has none (404) or does not answer JSON. Never throws. */
export async function fetchProps(base: string, opts: ProbeOptions = {}, query = ''): Promise<EngineProps | undefined> {
  const o = await probe(base, `/props${query}`, opts);
  if (o.kind !== 'ok' || typeof o.body !== 'object' || o.body === null || Array.isArray(o.body)) return undefined;
  const raw = o.body as Record<string, unknown>;
  const buildInfo = typeof raw.build_info === 'string' ? raw.build_info : undefined;
  return {
    buildInfo,
    buildNumber: parseBuildNumber(buildInfo),
    totalSlots: typeof raw.total_slots === 'number' ? raw.total_slots : undefined,
    raw,
  };
}

/**
 * Runs `fn` every `intervalMs`, never two at once: the next run is timed
 * from the end of the previous one, so a slow probe never piles up. Timers
 * are unref'd: a ticker alone never keeps the process alive.
 */
export class Ticker {
  #timer: NodeJS.Timeout | undefined;
  #running = false;
  #stopped = true;

  constructor(
    private readonly fn: () => unknown,
    public intervalMs: number,
  ) {}

  /** Start; the first run comes after `firstDelayMs` (default: one interval). */
  start(firstDelayMs = this.intervalMs): void {
    this.#stopped = false;
    this.#schedule(firstDelayMs);
  }

  /** Change the interval; the change applies from the next scheduling. */
  setInterval(ms: number): void {
    this.intervalMs = ms;
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  get running(): boolean {
    return !this.#stopped;
  }

  #schedule(ms: number): void {
    if (this.#stopped || this.#running) return;
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => void this.#run(), ms);
    this.#timer.unref();
  }

  async #run(): Promise<void> {
    this.#timer = undefined;
    if (this.#stopped) return;
    this.#running = true;
    try {
      await this.fn();
    } catch {
      // the callback handles its own errors; a ticker never dies of one
    } finally {
      this.#running = false;
    }
    this.#schedule(this.intervalMs);
  }
}

/** "600000" → "10m", "1500" → "1.5s", for log lines. */
export function formatMs(ms: number): string {
  if (ms % 60_000 === 0 && ms >= 60_000) return `${ms / 60_000}m`;
  if (ms >= 1000) return `${Math.round(ms / 100) / 10}s`;
  return `${ms}ms`;
}
