/**
 * Where a model bigger than one host runs (SPEC section 11, "A model bigger
 * than one host"). Pure: the members' free memory in, the choice out.
 *
 * The runner is the member with the most free memory among those that have
 * the entry in their config (ties: the lower name, so every node picks the
 * same). The lenders are the fewest members that lend (`node.lend_memory`,
 * and in the entry's `split` list when it names members) whose free memory
 * together with the runner's holds the model: the largest first, which is
 * the fewest. Each part is in proportion to its member's free memory, so
 * every member keeps the same share of its room and no part exceeds it.
 */

/** What the plan knows of one member. */
export interface SplitMember {
  name: string;
  /** Free bytes of its budget. */
  free: number;
  /** It has the entry in its config (it may run the model). */
  runs: boolean;
  /** Its operator lets it lend memory (`node.lend_memory`). */
  lends: boolean;
}

export interface SplitPart {
  member: string;
  /** Bytes of the model this member holds (reserved in its budget). */
  bytes: number;
}

export type SplitPlan =
  | { kind: 'whole'; runner: string }
  | { kind: 'split'; runner: string; /** The runner's own part first, then each lender's. */ parts: SplitPart[] }
  | { kind: 'none'; why: string };

export interface SplitAsk {
  /** Bytes one copy of the model needs (weights + KV + margin). */
  need: number;
  members: readonly SplitMember[];
  /** The entry's `split`: auto, or the members that may lend. */
  split: 'auto' | readonly string[];
  /** The runner when it is already chosen (a host asked to load plans with itself). */
  runner?: string;
}

const byFree = (a: SplitMember, b: SplitMember) => b.free - a.free || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

export function planSplit(ask: SplitAsk): SplitPlan {
  const runners = ask.members.filter((m) => m.runs && (ask.runner === undefined || m.name === ask.runner)).sort(byFree);
  const runner = runners[0];
  if (!runner) return { kind: 'none', why: ask.runner ? `${ask.runner} does not have the model in its config` : 'no member has the model in its config' };
  if (ask.need <= runner.free) return { kind: 'whole', runner: runner.name };
  const allowed = ask.split === 'auto' ? undefined : new Set(ask.split);
  const lenders = ask.members.filter((m) => m.name !== runner.name && m.lends && m.free > 0 && (!allowed || allowed.has(m.name))).sort(byFree);
  const chosen: SplitMember[] = [];
  let held = Math.max(0, runner.free);
  for (const l of lenders) {
    if (held >= ask.need) break;
    chosen.push(l);
    held += l.free;
  }
  if (held < ask.need) {
    const offered = lenders.length ? lenders.map((l) => `${l.name} ${mib(l.free)}`).join(', ') : 'no member lends memory (node.lend_memory: true)';
    return { kind: 'none', why: `needs ${mib(ask.need)}; ${runner.name} has ${mib(runner.free)} free and the lenders ${offered}: ${mib(held)} together` };
  }
  return { kind: 'split', runner: runner.name, parts: proportionalParts(ask.need, [runner, ...chosen]) };
}

/** `need` over the members in proportion to their free memory; the rounding goes to the first (the runner). */
export function proportionalParts(need: number, members: readonly Pick<SplitMember, 'name' | 'free'>[]): SplitPart[] {
  const total = members.reduce((n, m) => n + Math.max(0, m.free), 0);
  const parts = members.map((m) => ({ member: m.name, bytes: total > 0 ? Math.floor((need * Math.max(0, m.free)) / total) : 0 }));
  parts[0].bytes += need - parts.reduce((n, p) => n + p.bytes, 0);
  return parts;
}

/** `--tensor-split` for the parts, in the order the devices are given (whole MiB; at least 1 each). */
export function tensorSplit(parts: readonly SplitPart[]): string {
  return parts.map((p) => String(Math.max(1, Math.round(p.bytes / (1024 * 1024))))).join(',');
}

function mib(n: number): string {
  return n >= 1024 ** 3 ? `${(n / 1024 ** 3).toFixed(1)} GiB` : `${(n / 1024 ** 2).toFixed(1)} MiB`;
}
