/**
 * One viiwork node: the assembly of config, engines, slots, queues, scores
 * and the HTTP API. Everything that decides lives in the rooms it imports;
 * this file only wires them and owns their lifetimes.
 */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createApiHandler } from '../api/server.ts';
import type { Config } from '../config/schema.ts';
import type { Backend } from '../engines/backend.ts';
import { createBackends } from '../engines/factory.ts';
import { SlotTable, type Lease } from '../engines/targets.ts';
import { createLog, type Log } from '../log.ts';
import { Metrics } from '../metrics/metrics.ts';
import { PerfScores } from '../perf/scores.ts';
import { QueueSet } from '../queue/fifo.ts';
import { VERSION } from '../version.ts';

export type NodePhase = 'starting' | 'running' | 'stopping' | 'stopped';

export interface NodeOptions {
  log?: Log;
  now?: () => number;
}

/** What the queue hands a request once it can run. */
export type Placement = { kind: 'local'; lease: Lease };

export class ViiworkNode {
  readonly name: string;
  readonly log: Log;
  readonly metrics = new Metrics();
  readonly slots = new SlotTable();
  readonly queues: QueueSet<Placement>;
  readonly perf: PerfScores;
  readonly now: () => number;
  readonly version = VERSION;
  phase: NodePhase = 'starting';
  backends: Backend[] = [];
  #server: http.Server | undefined;
  #tick: NodeJS.Timeout | undefined;
  #saveTimer: NodeJS.Timeout | undefined;

  constructor(
    readonly config: Config,
    opts: NodeOptions = {},
  ) {
    this.name = config.node.name;
    this.log = opts.log ?? createLog(this.name);
    this.now = opts.now ?? Date.now;
    this.queues = new QueueSet(config.routing.queue_max, config.routing.queue_timeout, this.now);
    this.perf = new PerfScores(config.node.state_dir, this.now);
    this.slots.onRelease(() => this.queues.pumpAll());
  }

  /** The API address actually bound (port 0 in config picks a free one). */
  get apiAddress(): { host: string; port: number } {
    const a = this.#server?.address() as AddressInfo | undefined;
    return { host: this.config.api.host, port: a?.port ?? this.config.api.port };
  }

  get apiUrl(): string {
    const { host, port } = this.apiAddress;
    const h = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
    return `http://${h.includes(':') ? `[${h}]` : h}:${port}`;
  }

  async start(): Promise<void> {
    fs.mkdirSync(this.config.node.state_dir, { recursive: true });
    const server = http.createServer(createApiHandler(this));
    server.keepAliveTimeout = 65_000;
    server.headersTimeout = 66_000;
    server.requestTimeout = 0;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.config.api.port, this.config.api.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.#server = server;
    this.log.info(`api listening on ${this.apiUrl}`);

    this.backends = await createBackends(this.config, (msg) => this.log.info(msg));
    this.slots.setBackends(this.backends);
    for (const b of this.backends) {
      b.on('state', () => this.queues.pumpAll());
      b.on('descriptor', () => this.slots.setBackends(this.backends));
      b.on('restart', () => this.metrics.engineRestarts.inc({ model: b.info.model }));
    }
    this.phase = 'running';
    this.#tick = setInterval(() => this.queues.pumpAll(), 250);
    this.#tick.unref();
    this.#saveTimer = setInterval(() => this.#savePerf(), 30_000);
    this.#saveTimer.unref();
    // Engines load in the background: the API answers (with 503 for their models) meanwhile.
    const models = this.slots.models();
    this.log.info(models.length ? `loading ${this.backends.length} backend(s) for ${models.join(', ')}` : 'serving no models (gateway)');
    await Promise.all(this.backends.map((b) => b.start()));
  }

  async stop(): Promise<void> {
    if (this.phase === 'stopped') return;
    this.phase = 'stopping';
    clearInterval(this.#tick);
    clearInterval(this.#saveTimer);
    this.#savePerf();
    const server = this.#server;
    if (server) {
      server.closeIdleConnections();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      setTimeout(() => server.closeAllConnections(), 2000).unref();
      await Promise.all([closed, ...this.backends.map((b) => b.stop())]);
    } else {
      await Promise.all(this.backends.map((b) => b.stop()));
    }
    this.phase = 'stopped';
  }

  #savePerf(): void {
    try {
      this.perf.save();
    } catch (err) {
      this.log.warn(`cannot save performance baseline in ${this.config.node.state_dir}: ${(err as Error).message}`);
    }
  }
}
