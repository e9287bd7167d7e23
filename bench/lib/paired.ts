/**
 * The paired header-less ratio of the agents trace (issue 25): two runs of
 * the same seed and loads, one with the session headers as drawn and one
 * with them swapped (ROUTING_HEADERS=swapped), so every conversation is
 * measured once with X-Session-Id and once without. Per load and arm: the
 * mean TTFT of both runs' header-less turns over that of both runs' headed
 * turns, each mean weighted by its answered requests. Pure; `bench/paired.ts`
 * reads the two files.
 */

interface ClassDoc {
  ok?: number;
  ttft_mean_ms?: number | null;
}
interface ArmDoc {
  arm: string;
  classes?: Partial<Record<'conv_header' | 'conv_noheader', ClassDoc>>;
}
export interface RoutingRunDoc {
  settings?: { seed?: number; session_headers?: string; loads?: { load: number }[] };
  results?: { load: number; arms: ArmDoc[] }[];
}

export interface PairedRow {
  load: number;
  arm: string;
  /** Request-weighted mean TTFT of the header-less turns of both runs. */
  headerless_ms: number;
  headed_ms: number;
  /** headerless_ms ÷ headed_ms: within 10% of 1 is issue 25's target at 80%. */
  ratio: number;
  /** Answered turns on each side (the same conversations, so the same count when nothing was lost). */
  turns: { headerless: number; headed: number };
}

/** Why two runs cannot be paired, or undefined when they can. */
function pairingProblem(a: RoutingRunDoc, b: RoutingRunDoc): string | undefined {
  const headers = [a.settings?.session_headers, b.settings?.session_headers];
  if (!headers.includes('as drawn') || !headers.includes('swapped')) {
    return `one run must have session_headers "as drawn" and the other "swapped" (ROUTING_TRACE=agents, then ROUTING_HEADERS=swapped); these have ${JSON.stringify(headers)}`;
  }
  if (a.settings?.seed !== b.settings?.seed) return `the runs have different seeds (${a.settings?.seed}, ${b.settings?.seed}): they are different conversations`;
  const loads = (d: RoutingRunDoc) => JSON.stringify((d.results ?? []).map((r) => r.load));
  if (loads(a) !== loads(b)) return `the runs measured different loads (${loads(a)}, ${loads(b)})`;
  return undefined;
}

const weighted = (parts: (ClassDoc | undefined)[]) => {
  let n = 0;
  let sum = 0;
  for (const c of parts) {
    if (!c || typeof c.ok !== 'number' || typeof c.ttft_mean_ms !== 'number' || c.ok <= 0) continue;
    n += c.ok;
    sum += c.ok * c.ttft_mean_ms;
  }
  return { n, mean: n > 0 ? sum / n : NaN };
};

/** The paired ratio per load and per arm both runs measured; throws with the reason when the runs are not a pair. */
export function pairedHeaderless(a: RoutingRunDoc, b: RoutingRunDoc): PairedRow[] {
  const problem = pairingProblem(a, b);
  if (problem) throw new Error(problem);
  const rows: PairedRow[] = [];
  for (const [i, ra] of (a.results ?? []).entries()) {
    const rb = b.results![i];
    for (const armA of ra.arms) {
      const armB = rb.arms.find((x) => x.arm === armA.arm);
      if (!armB) continue;
      const without = weighted([armA.classes?.conv_noheader, armB.classes?.conv_noheader]);
      const withH = weighted([armA.classes?.conv_header, armB.classes?.conv_header]);
      if (without.n === 0 || withH.n === 0) continue;
      rows.push({
        load: ra.load,
        arm: armA.arm,
        headerless_ms: Math.round(without.mean * 10) / 10,
        headed_ms: Math.round(withH.mean * 10) / 10,
        ratio: Math.round((without.mean / withH.mean) * 100) / 100,
        turns: { headerless: without.n, headed: withH.n },
      });
    }
  }
  return rows;
}
