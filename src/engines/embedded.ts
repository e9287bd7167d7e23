/**
 * The embedded engine (llama.cpp inside the node through node-llama-cpp).
 * Not built yet: node-llama-cpp adds ~730 MB to every install, so it will
 * come as an optional dependency. Until then a model entry with
 * `engine: embedded` starts as a dead backend with a message that says so.
 */
import type { Descriptor } from '../workloads/workloads.ts';
import { Backend, type BackendInfo, type Logger } from './backend.ts';

export class EmbeddedBackend extends Backend {
  constructor(
    info: BackendInfo,
    descriptor: Descriptor,
    readonly cfg: { path: string; threads: number; gpu: boolean },
    log: Logger,
  ) {
    super(info, descriptor, log);
  }
  get url(): string | undefined {
    return undefined;
  }
  async start(): Promise<void> {
    this.setState('dead', 'the embedded engine is not available in this build; use engine: llamacpp or openai');
  }
  async stop(): Promise<void> {
    this.setState('stopped', 'stopped');
  }
}
