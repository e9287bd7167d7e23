/**
 * This node's slots and the lines in front of them, assembled: its queues,
 * the gate every lease passes, the room kept for interactive work, the
 * capacity polls held for a slot to free, and the record of what its engines'
 * caches hold. Wiring only: the rules live in queue/, route/ and engines/.
 */
import { ReleaseWaits } from '../capacity/release-waits.ts';
import type { Config } from '../config/schema.ts';
import type { Reservation } from '../dispatch/types.ts';
import { CacheBook } from '../engines/cache-book.ts';
import type { Lease, SlotTable } from '../engines/targets.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { PerfScores } from '../perf/scores.ts';
import { QueueSet } from '../queue/fifo.ts';
import { SlotGate } from '../queue/gate.ts';
import { ReserveBook, trackedLease } from '../queue/reserve.ts';
import { chooseSlot, TurnGaps } from '../route/slots.ts';
import type { Workload } from '../workloads/workloads.ts';

export interface SlotSide {
  queues: QueueSet<Reservation>;
  perf: PerfScores;
  reserve: ReserveBook;
  gate: SlotGate<Workload, Lease>;
  releaseWaits: ReleaseWaits;
  turnGaps: TurnGaps;
  cacheBook: CacheBook;
}

/** `n.config` is read when used: a reload replaces it (its routing section stays as it was). */
export function slotSide(n: { readonly config: Config; readonly now: () => number; readonly slots: SlotTable; readonly metrics: Metrics }): SlotSide {
  const { slots, now } = n;
  const turnGaps = new TurnGaps();
  // The node chooses its slot-kind engines' slots (SPEC 9.6, "Slot choice") and learns turn gaps from them.
  const cacheBook = new CacheBook({ now: () => n.now(), choose: (s, named) => chooseSlot(s, turnGaps.chance, named), onGap: (ms) => turnGaps.observe(ms), onPlaced: (turns) => turnGaps.placed(turns) });
  const queues = new QueueSet<Reservation>(n.config.routing.queue_max, n.config.routing.queue_timeout, now);
  const perf = new PerfScores(n.config.node.state_dir, now);
  const reserve = new ReserveBook(() => ({ slots: n.config.routing.interactive_reserve, forMs: n.config.routing.interactive_reserve_for }), now);
  const gate = new SlotGate({
    lease: (m: string, w: Workload, k?: string) => slots.tryLease(m, w, k),
    now,
    reserve: {
      book: reserve,
      room: (m: string, w: Workload) => slots.roomFor(m, w, (s) => reserve.held(m, s)),
      track: (m: string, lease: Lease) => trackedLease(reserve, m, lease),
    },
  });
  n.metrics.lineDepthOf = () => slots.models().map((model) => ({ model, depth: gate.depth(model) }));
  // This node's own queue first, then the line: either way a slot goes to whoever ranks first (the gate asks both).
  slots.onRelease(() => (queues.pumpAll(), gate.pump()));
  return { queues, perf, reserve, gate, releaseWaits: new ReleaseWaits(slots), turnGaps, cacheBook };
}
