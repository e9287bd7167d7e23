/**
 * Summary of a V8 .cpuprofile (node --cpu-prof): self time per function and
 * per file, the top entries, so a benchmark can say where a process spends
 * its CPU without opening a profiler.
 */
import fs from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}

export interface ProfileSummary {
  file: string;
  /** time the profile spans, all threads idle or not */
  span_ms: number;
  idle_pct: number;
  top_functions: { fn: string; self_pct: number }[];
  top_files: { file: string; self_pct: number }[];
}

export function summariseProfile(file: string, top = 15): ProfileSummary {
  const prof = JSON.parse(fs.readFileSync(file, 'utf8')) as { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[] };
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const selfUs = new Map<number, number>();
  for (let i = 0; i < prof.samples.length; i++) selfUs.set(prof.samples[i], (selfUs.get(prof.samples[i]) ?? 0) + (prof.timeDeltas[i] ?? 0));
  let total = 0;
  let idle = 0;
  const fns = new Map<string, number>();
  const files = new Map<string, number>();
  for (const [id, us] of selfUs) {
    const n = byId.get(id)!;
    total += us;
    const name = n.callFrame.functionName || '(anonymous)';
    if (name === '(idle)') {
      idle += us;
      continue;
    }
    const url = n.callFrame.url.replace(/^file:\/\//, '').replace(/^.*\/node_modules\//, 'node_modules/').replace(/^.*\/(src|bench|test)\//, '$1/');
    const key = `${name} ${url ? `${url}:${n.callFrame.lineNumber + 1}` : ''}`.trim();
    fns.set(key, (fns.get(key) ?? 0) + us);
    const f = url ? url.replace(/^(node_modules\/(@[^/]+\/)?[^/]+).*$/, '$1') : name.startsWith('(') ? name : '(native/builtin)';
    files.set(f, (files.get(f) ?? 0) + us);
  }
  const busy = total - idle;
  const pctOf = (us: number) => Math.round((us / busy) * 1000) / 10;
  const sorted = (m: Map<string, number>) => [...m.entries()].sort((a, b) => b[1] - a[1]).slice(0, top);
  return {
    file,
    span_ms: Math.round(total / 1000),
    idle_pct: Math.round((idle / total) * 1000) / 10,
    top_functions: sorted(fns).map(([fn, us]) => ({ fn, self_pct: pctOf(us) })),
    top_files: sorted(files).map(([f, us]) => ({ file: f, self_pct: pctOf(us) })),
  };
}
