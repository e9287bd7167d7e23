/**
 * Pure pieces of the lifecycle benchmark (bench/lifecycle.ts): the demand
 * mix, a seeded draw from it, and the best static layout a careful operator
 * would pin by hand for that mix.
 */

/** The seeded generator of the tests (mulberry32): the same trace for both arms of one seed. */
export { seeded } from '../../test/helpers/random.ts';

/** The model for a uniform draw `u` from shares that sum to 1 (the last takes any rounding left over). */
export function pick(shares: readonly { model: string; share: number }[], u: number): string {
  let acc = 0;
  for (const s of shares) {
    acc += s.share;
    if (u < acc) return s.model;
  }
  return shares[shares.length - 1].model;
}

/**
 * The best static layout by hand: every model one copy, the spare room by
 * largest remainder of demand per copy (D'Hondt: the next copy goes to the
 * model whose demand per copy is highest), then copies placed, most popular
 * first, on the node with the most room left and the least demand so far,
 * never two copies of one model on one node. Throws when the models do not
 * fit at least once each.
 */
export function staticLayout(shares: readonly { model: string; share: number }[], nodes: readonly string[], perNode: number): Record<string, string[]> {
  const room = nodes.length * perNode;
  if (shares.length > room) throw new Error(`${shares.length} models do not fit once each in ${nodes.length} nodes × ${perNode}`);
  const copies = new Map(shares.map((s) => [s.model, 1]));
  for (let spare = room - shares.length; spare > 0; spare--) {
    // At most one copy per node per model.
    const open = shares.filter((s) => copies.get(s.model)! < nodes.length);
    if (!open.length) break;
    const best = open.reduce((a, b) => (b.share / (copies.get(b.model)! + 1) > a.share / (copies.get(a.model)! + 1) ? b : a));
    copies.set(best.model, copies.get(best.model)! + 1);
  }
  const layout: Record<string, string[]> = Object.fromEntries(nodes.map((n) => [n, []]));
  const demand: Record<string, number> = Object.fromEntries(nodes.map((n) => [n, 0]));
  const order = [...shares].sort((a, b) => b.share - a.share);
  for (const s of order) {
    const per = s.share / copies.get(s.model)!;
    for (let k = 0; k < copies.get(s.model)!; k++) {
      const host = nodes
        .filter((n) => layout[n].length < perNode && !layout[n].includes(s.model))
        .sort((a, b) => layout[a].length - layout[b].length || demand[a] - demand[b] || a.localeCompare(b))[0];
      if (!host) throw new Error(`no room left for copy ${k + 1} of ${s.model}`);
      layout[host].push(s.model);
      demand[host] += per;
    }
  }
  return layout;
}

/** Mean of a list, or null when empty; rounded to 0.1. */
export function mean(xs: readonly number[]): number | null {
  return xs.length ? Math.round((xs.reduce((a, b) => a + b, 0) / xs.length) * 10) / 10 : null;
}

/** The p-th percentile (0-100) by nearest rank, or null when empty. */
export function percentile(xs: readonly number[], p: number): number | null {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))] * 10) / 10;
}
