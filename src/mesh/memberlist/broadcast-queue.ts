/**
 * Retransmit-limited broadcast queue (queue.go's TransmitLimitedQueue).
 * Each broadcast is sent at most retransmitMult * ceil(log10(n + 1)) times;
 * the least-transmitted (then newest) go first; a new broadcast about a node
 * replaces any queued one about the same node.
 */
export interface Broadcast {
  /** Node name this broadcast is about; a newer one with the same name invalidates it. */
  name?: string;
  msg: Buffer;
  /** Called once when the broadcast is done (sent enough times) or replaced. */
  finished?: () => void;
}

interface Item {
  b: Broadcast;
  transmits: number;
  id: number;
}

export function retransmitLimit(retransmitMult: number, n: number): number {
  return retransmitMult * Math.ceil(Math.log10(n + 1));
}

export class TransmitLimitedQueue {
  private items: Item[] = [];
  private idGen = 0;

  constructor(
    private readonly retransmitMult: number,
    private readonly numNodes: () => number,
  ) {}

  queueBroadcast(b: Broadcast): void {
    if (b.name !== undefined) {
      this.items = this.items.filter((it) => {
        if (it.b.name === b.name) {
          it.b.finished?.();
          return false;
        }
        return true;
      });
    }
    this.items.push({ b, transmits: 0, id: this.idGen++ });
  }

  /** Up to `limit` bytes of messages, counting `overhead` bytes per message. */
  getBroadcasts(overhead: number, limit: number): Buffer[] {
    if (!this.items.length) return [];
    const transmitLimit = retransmitLimit(this.retransmitMult, this.numNodes());
    this.items.sort((a, b) => a.transmits - b.transmits || b.id - a.id);
    const out: Buffer[] = [];
    let used = 0;
    const keep: Item[] = [];
    for (const it of this.items) {
      const size = overhead + it.b.msg.length;
      if (used + size > limit) {
        keep.push(it);
        continue;
      }
      used += size;
      out.push(it.b.msg);
      it.transmits++;
      if (it.transmits >= transmitLimit) it.b.finished?.();
      else keep.push(it);
    }
    this.items = keep;
    return out;
  }

  numQueued(): number {
    return this.items.length;
  }

  reset(): void {
    for (const it of this.items) it.b.finished?.();
    this.items = [];
  }
}
