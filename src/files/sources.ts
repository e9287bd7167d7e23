/**
 * Which members can send a model's file, from their capacity reports
 * (SPEC section 11). Pure: reports in, sources out.
 */
export interface PeerFiles {
  name: string;
  /** Its API base URL; absent: not reachable, skipped. */
  api?: string;
  /** The `file` each of its models publishes. */
  models: readonly { name: string; file?: { size: number; sha256: string } }[];
}

export interface FileOffer {
  sha256: string;
  size: number;
  sources: { name: string; api: string }[];
}

/**
 * The file to fetch for `model`: the entry's `sha256` when given, else the
 * hash most members publish (ties: the smallest hash, so every node picks
 * the same); its sources in name order rotated by `rotate` so fetches spread.
 */
export function offerFor(model: string, peers: readonly PeerFiles[], expect = '', rotate = 0): FileOffer | undefined {
  const by = new Map<string, { size: number; sources: { name: string; api: string }[] }>();
  for (const p of peers) {
    if (!p.api) continue;
    const f = p.models.find((m) => m.name === model && m.file)?.file;
    if (!f) continue;
    const e = by.get(f.sha256) ?? { size: f.size, sources: [] };
    e.sources.push({ name: p.name, api: p.api });
    by.set(f.sha256, e);
  }
  const pick = expect
    ? by.has(expect)
      ? expect
      : undefined
    : [...by.entries()].sort((a, b) => b[1].sources.length - a[1].sources.length || (a[0] < b[0] ? -1 : 1))[0]?.[0];
  if (!pick) return undefined;
  const e = by.get(pick)!;
  const sorted = e.sources.sort((a, b) => (a.name < b.name ? -1 : 1));
  const r = sorted.length ? rotate % sorted.length : 0;
  return { sha256: pick, size: e.size, sources: [...sorted.slice(r), ...sorted.slice(0, r)] };
}
