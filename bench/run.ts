/**
 * `npm run bench -- NAME…`: run the named benchmarks (all when none is
 * named), print their tables and write bench/results/NAME.json.
 *
 *   overhead    the hop's cost: engine, bare pass-through, nginx, one node, entry+executor (wrk)
 *   routing     TTFT under Poisson load on three nodes vs nginx least_conn, an oracle and round robin; queue drain through a gateway
 *   membership  our memberlist vs Serf (needs serf)
 */
import fs from 'node:fs';
import path from 'node:path';

const ALL = ['overhead', 'routing', 'membership'];
const args = process.argv.slice(2);
const unknown = args.filter((a) => !ALL.includes(a));
if (unknown.length) {
  console.error(`unknown benchmark ${unknown.join(', ')}; one of: ${ALL.join(', ')}`);
  process.exit(2);
}
const which = args.length ? args : ALL;
const outDir = path.resolve('bench/results');
fs.mkdirSync(outDir, { recursive: true });
const write = (name: string, doc: unknown) => fs.writeFileSync(path.join(outDir, `${name}.json`), JSON.stringify(doc, null, 2) + '\n');

let failed = false;
for (const name of which) {
  try {
    if (name === 'overhead') {
      const { benchOverhead, printOverhead } = await import('./overhead.ts');
      const doc = await benchOverhead();
      write(name, doc);
      printOverhead(doc);
    } else if (name === 'routing') {
      const { benchRouting, printRouting } = await import('./routing.ts');
      const doc = await benchRouting();
      write(name, doc);
      printRouting(doc);
    } else if (name === 'membership') {
      const { benchMembership } = await import('./membership.ts');
      const results = await benchMembership();
      write(name, { at: new Date().toISOString(), results });
      console.table(results);
    }
  } catch (err) {
    failed = true;
    console.error(`benchmark ${name} failed: ${(err as Error).stack ?? err}`);
  }
}
process.exit(failed ? 1 : 0);
