/**
 * Prompt-cache hygiene, tool order (SPEC section 4): an agent client that
 * loads a tool mid-session inserts it into the middle of its list, and chat
 * templates render tools at the start of the prompt, so the engine's cached
 * prefix would end where the new tool went in. Within one session the engine
 * sees the tools in a stable order instead: those already sent first, in the
 * order first sent, then new ones in the client's order.
 *
 * The memory lives on the executing node (the one that translates and talks
 * to the engine, which is also where the session's cache is): one entry per
 * session key, at most `maxSessions` (the least recently used is dropped) and
 * each forgotten after `ttlMs` without a request. Time is injected.
 */

import type { ChatRequest } from '../../chat/index.ts';

/** Bounds of the per-session memory (docs/api.md). */
export const TOOL_ORDER_SESSIONS = 4096;
export const TOOL_ORDER_TTL_MS = 60 * 60_000;
/** Names remembered per session; a longer list is ordered as sent. */
export const TOOL_ORDER_MAX_NAMES = 1024;

/**
 * The stable order: `known` (names in the order this session first sent
 * them) first, skipping tools not sent this time, then the new ones as sent.
 * Pure. Returns the ordered list and the session's new memory.
 */
export function stableOrder<T>(known: readonly string[] | undefined, tools: readonly T[], nameOf: (t: T) => string): { ordered: T[]; known: string[] } {
  if (!known || known.length === 0) return { ordered: [...tools], known: tools.map(nameOf) };
  const byName = new Map<string, T>();
  for (const t of tools) if (!byName.has(nameOf(t))) byName.set(nameOf(t), t);
  const ordered: T[] = [];
  const seen = new Set<string>();
  for (const n of known) {
    const t = byName.get(n);
    if (t !== undefined && !seen.has(n)) {
      ordered.push(t);
      seen.add(n);
    }
  }
  const fresh: string[] = [];
  for (const t of tools) {
    const n = nameOf(t);
    if (seen.has(n)) continue;
    seen.add(n);
    ordered.push(t);
    fresh.push(n);
  }
  // Tools dropped this turn stay remembered: a client that offers them again gets them back in place.
  return { ordered, known: [...known, ...fresh] };
}

export class ToolOrderMemory {
  readonly #sessions = new Map<string, { names: string[]; at: number }>();

  constructor(
    private readonly now: () => number,
    private readonly maxSessions = TOOL_ORDER_SESSIONS,
    private readonly ttlMs = TOOL_ORDER_TTL_MS,
  ) {}

  get size(): number {
    return this.#sessions.size;
  }

  /** The tools of one request of `session`, in the session's stable order (remembered for its next request). */
  order<T>(session: string, tools: readonly T[], nameOf: (t: T) => string): T[] {
    if (tools.length > TOOL_ORDER_MAX_NAMES) return [...tools];
    const now = this.now();
    const entry = this.#sessions.get(session);
    const known = entry && now - entry.at <= this.ttlMs ? entry.names : undefined;
    const r = stableOrder(known, tools, nameOf);
    // Re-inserted, so the Map's order is least recently used first.
    this.#sessions.delete(session);
    this.#sessions.set(session, { names: r.known.slice(-TOOL_ORDER_MAX_NAMES), at: now });
    this.#trim(now);
    return r.ordered;
  }

  #trim(now: number): void {
    for (const [k, v] of this.#sessions) {
      if (this.#sessions.size <= this.maxSessions && now - v.at <= this.ttlMs) break;
      this.#sessions.delete(k);
    }
  }
}

export interface Hygiene {
  /** api.agent_hygiene */
  on: boolean;
  /** The executor's per-session tool order. */
  toolOrder: ToolOrderMemory;
}

/** The tools of a session's request in its stable order (hygiene on, a session key, tools). */
export function orderTools(chat: ChatRequest, sessionKey: string | undefined, hygiene: Hygiene | undefined): void {
  if (!hygiene?.on || sessionKey === undefined || !chat.tools || chat.tools.length < 2) return;
  chat.tools = hygiene.toolOrder.order(sessionKey, chat.tools, (t) => t.function.name);
}

