/**
 * `node --import tsx bench/paired.ts AS_DRAWN.json SWAPPED.json`: the agents
 * trace's paired header-less ratio (bench/lib/paired.ts) from two routing
 * results files, one run with the session headers as drawn and one with
 * ROUTING_HEADERS=swapped, as a table per load and arm.
 */
import fs from 'node:fs';
import { pairedHeaderless, type RoutingRunDoc } from './lib/paired.ts';

const files = process.argv.slice(2);
if (files.length !== 2) {
  console.error('usage: node --import tsx bench/paired.ts AS_DRAWN.json SWAPPED.json (two ROUTING_TRACE=agents results, the second with ROUTING_HEADERS=swapped)');
  process.exit(2);
}
try {
  const [a, b] = files.map((f) => JSON.parse(fs.readFileSync(f, 'utf8')) as RoutingRunDoc);
  const rows = pairedHeaderless(a, b);
  console.table(rows.map((r) => ({ load: r.load, arm: r.arm, 'header-less ms': r.headerless_ms, 'headed ms': r.headed_ms, 'paired ratio': r.ratio, turns: `${r.turns.headerless} / ${r.turns.headed}` })));
} catch (err) {
  console.error(`bench/paired.ts: ${(err as Error).message}`);
  process.exit(2);
}
