/** `npm run bench`: every benchmark, results written to bench/results/ and printed. */
import fs from 'node:fs';
import path from 'node:path';
import { benchProxy } from './proxy.ts';

const which = process.argv.slice(2);
const want = (name: string) => which.length === 0 || which.includes(name);
const outDir = path.resolve('bench/results');
fs.mkdirSync(outDir, { recursive: true });

if (want('proxy')) {
  const results = await benchProxy();
  const doc = { at: new Date().toISOString(), node: process.version, cpus: (await import('node:os')).cpus().length, results };
  fs.writeFileSync(path.join(outDir, 'proxy.json'), JSON.stringify(doc, null, 2) + '\n');
  console.table(results);
  const d = (n: string) => results.find((r) => r.name === n)!;
  console.log(`through viiwork: ${(d('viiwork json').rps / d('direct json').rps).toFixed(2)}× direct (json), ${(d('viiwork stream').rps / d('direct stream').rps).toFixed(2)}× direct (stream)`);
}

if (want('membership')) {
  const { benchMembership } = await import('./membership.ts');
  const results = await benchMembership();
  fs.writeFileSync(path.join(outDir, 'membership.json'), JSON.stringify({ at: new Date().toISOString(), results }, null, 2) + '\n');
  console.table(results);
}
process.exit(0);
