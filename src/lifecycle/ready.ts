/**
 * When a starting node is ready (SPEC section 4): its first join attempt
 * (seeds and discovery) has finished, one capacity round from every member
 * alive after it has come back or failed (at most three poll intervals),
 * and every engine is healthy, dead or past its first health check. Each
 * step is bounded: a member or an engine that never answers delays a start,
 * it does not hold it for ever.
 */
import type { Backend } from '../engines/backend.ts';

/** The longest a start waits for its first join attempt, and for its engines' first health check. */
const WARM_JOIN_MS = 30_000;
const WARM_ENGINE_MS = 30_000;
/** The first capacity round is waited for at most this many poll intervals. */
const FIRST_ROUND_POLLS = 3;

export interface WarmSteps {
  /** The first join attempt; undefined without a mesh. */
  firstJoin(): Promise<void> | undefined;
  /** The join has been tried: the members known now are the ones polled. */
  joined(): void;
  /** mesh.capacity_poll, ms. */
  readonly pollMs: number;
  /** One capacity round from every member, bounded by `withinMs`; undefined without a mesh. */
  firstRound(withinMs: number): Promise<unknown> | undefined;
  /** The engines started with the node. */
  readonly backends: readonly Backend[];
}

export async function warmUp(w: WarmSteps): Promise<void> {
  await bounded(w.firstJoin() ?? Promise.resolve(), WARM_JOIN_MS);
  w.joined();
  await w.firstRound(FIRST_ROUND_POLLS * w.pollMs);
  const unchecked = w.backends.filter((b) => !b.checked).map((b) => new Promise<void>((r) => b.once('checked', () => r())));
  await bounded(Promise.all(unchecked), WARM_ENGINE_MS);
}

/** Resolves when `p` settles or after `ms`, whichever comes first. */
function bounded(p: Promise<unknown>, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    t.unref();
    void p.then(
      () => (clearTimeout(t), resolve()),
      () => (clearTimeout(t), resolve()),
    );
  });
}
