/**
 * The life of one request on this node (SPEC section 9), in two rooms: the
 * entry (entry/: a client's request — resolve, walk the prompt, place, wait,
 * run here or forward, record) and the executor (execute/: a request that
 * runs on a local slot — the slot's cache, the engine's body, the relay, the
 * measurement), which serves verified forwards from members too.
 */
import type http from 'node:http';
import type { Gone } from '../http/gone.ts';
import { Entry } from './entry/entry.ts';
import { Executor, type ForwardSender } from './execute/execute.ts';
import { ToolOrderMemory, type Hygiene } from './execute/tool-order.ts';
import type { DispatchPorts } from './ports.ts';
import type { DispatchRequest } from './types.ts';

export { UNKNOWN_MODEL } from './trace.ts';

export class Dispatcher {
  readonly #entry: Entry;
  readonly #executor: Executor;

  constructor(p: DispatchPorts) {
    // Prompt-cache hygiene of the requests this node executes (api.agent_hygiene; the tool order is per session).
    const hygiene: Hygiene = { on: p.rules.agentHygiene ?? true, toolOrder: new ToolOrderMemory(() => p.now()) };
    this.#executor = new Executor(p, hygiene);
    this.#entry = new Entry(p, hygiene, this.#executor);
  }

  /** A client's request entering at this node. */
  serveClient(req: DispatchRequest, res: http.ServerResponse, signal: Gone): Promise<void> {
    return this.#entry.serveClient(req, res, signal);
  }

  /** A verified forward from a member (with its claims): a free local slot of a capable target now, or a marked refusal. */
  serveForward(req: DispatchRequest, sender: ForwardSender, res: http.ServerResponse, signal: Gone): Promise<void> {
    return this.#executor.serveForward(req, sender, res, signal);
  }
}
