/**
 * llama-server running a model split across members (SPEC section 11, "A
 * model bigger than one host"): an ordinary llama-server backend whose stop
 * also takes down what its parts need (the tunnels to its lenders, the
 * lends themselves, the runner's own rpc-server), once its engine is gone.
 */
import type { Descriptor } from '../../workloads/workloads.ts';
import type { BackendInfo, Logger } from '../backend.ts';
import { LlamacppBackend, type LlamacppConfig, type LlamacppOptions } from './llamacpp.ts';

export class SplitLlamacppBackend extends LlamacppBackend {
  #down: Promise<void> | undefined;

  constructor(
    info: BackendInfo,
    descriptor: Descriptor,
    cfg: LlamacppConfig,
    log: Logger,
    opts: LlamacppOptions,
    private readonly teardown: () => Promise<void>,
  ) {
    super(info, descriptor, cfg, log, opts);
  }

  override stop(): Promise<void> {
    this.#down ??= super.stop().then(() => this.teardown());
    return this.#down;
  }
}
