/**
 * `npm run bench -- NAME…`: run the named benchmarks (all when none is
 * named), print their tables and write bench/results/NAME.json.
 *
 *   overhead    the hop's cost: engine, bare pass-through, nginx, haproxy, Portkey, one node, entry+executor (wrk)
 *   routing     TTFT under open-loop load with prompt caches on three sim nodes vs an oracle, prefix affinity off, round robin, nginx and haproxy; queue drain through a gateway
 *   membership  our memberlist vs Serf (needs serf)
 *   polling     what capacity polling and gossip cost one node at 10, 30, 100 members; 300+ simulated
 *   files       a 2 GiB model file between two nodes vs curl from nginx, with both nodes' event-loop delay
 *   bodies      a node's memory under hostile bodies: 30 MiB uploads, slow uploads from many sockets, gzip bombs
 *   fairness    a shared fleet (issue 26): interactive sessions beside a batch flood (FIFO vs fair), token shares by weight, a tpm limit from three entries, admission CPU
 *   lifecycle   models on demand: a cold start's first token vs load + TTFT; a five-model trace on a 3-node mesh with room for two each vs the best layout pinned by hand
 *   moves       a 2k-token conversation's cache moved between two members (real llama-server) vs a cold prefill on the same host
 *   restart     a rolling restart of a 3-node mesh (real llama-server) under an agent trace: requests lost, later turns that found their cache after their host restarted
 *   telemetry   history's and tracing's cost at 50 req/s on one node (on vs off), and history's memory over a simulated soak (TELEMETRY_SOAK_S=3600: a real node's memory over an hour)
 */
import fs from 'node:fs';
import path from 'node:path';

const ALL = ['overhead', 'routing', 'membership', 'polling', 'lifecycle', 'files', 'bodies', 'fairness', 'telemetry', 'moves', 'restart'];
const args = process.argv.slice(2);
const unknown = args.filter((a) => !ALL.includes(a));
if (unknown.length) {
  console.error(`unknown benchmark ${unknown.join(', ')}; one of: ${ALL.join(', ')}`);
  process.exit(2);
}
const which = args.length ? args : ALL;
const outDir = path.resolve(process.env.BENCH_OUT ?? 'bench/results');
fs.mkdirSync(outDir, { recursive: true });
const write = (name: string, doc: unknown) => fs.writeFileSync(path.join(outDir, `${name}.json`), JSON.stringify(doc, null, 2) + '\n');

let failed = false;
for (const name of which) {
  try {
    if (name === 'overhead') {
      const { benchOverhead, printOverhead, overheadChart } = await import('./overhead.ts');
      const doc = await benchOverhead();
      write(name, doc);
      fs.writeFileSync(path.join(outDir, 'overhead.svg'), overheadChart(doc));
      printOverhead(doc);
    } else if (name === 'routing') {
      const { benchRouting, printRouting, routingChart } = await import('./routing.ts');
      const doc = await benchRouting();
      // ROUTING_TRACE=agents (issue 25's long agent sessions) and the Mooncake traces write their own files beside the short trace's.
      const trace = process.env.ROUTING_TRACE;
      const file = trace === 'agents' || trace === 'mooncake' || trace === 'mooncake-synthetic' ? `routing-${trace}` : name;
      write(file, doc);
      fs.writeFileSync(path.join(outDir, `${file}.svg`), routingChart(doc));
      printRouting(doc);
    } else if (name === 'membership') {
      const { benchMembership } = await import('./membership.ts');
      const results = await benchMembership();
      write(name, { at: new Date().toISOString(), results });
      console.table(results);
    } else if (name === 'polling') {
      const { benchPolling, printPolling } = await import('./polling.ts');
      const doc = await benchPolling();
      write(name, doc);
      printPolling(doc);
    } else if (name === 'lifecycle') {
      const { benchLifecycle, printLifecycle } = await import('./lifecycle.ts');
      const doc = await benchLifecycle();
      write(name, doc);
      printLifecycle(doc);
    } else if (name === 'bodies') {
      const { benchBodies, printBodies } = await import('./bodies.ts');
      const doc = await benchBodies();
      write(name, doc);
      printBodies(doc);
    } else if (name === 'fairness') {
      const { benchFairness, printFairness } = await import('./fairness.ts');
      const doc = await benchFairness();
      write(name, doc);
      printFairness(doc);
    } else if (name === 'telemetry') {
      const { benchTelemetry, printTelemetry } = await import('./telemetry.ts');
      const doc = await benchTelemetry();
      // TELEMETRY_SOAK_S (the real-clock soak) writes its own file beside the cost run's.
      write('real_soak' in doc ? 'telemetry-soak' : name, doc);
      printTelemetry(doc);
    } else if (name === 'moves') {
      const { benchMoves, printMoves } = await import('./moves.ts');
      const doc = await benchMoves();
      write(name, doc);
      printMoves(doc);
    } else if (name === 'restart') {
      const { benchRestart, printRestart } = await import('./restart.ts');
      const doc = await benchRestart();
      write(name, doc);
      printRestart(doc);
    } else if (name === 'files') {
      const { benchFiles, printFiles } = await import('./files.ts');
      const doc = await benchFiles();
      write(name, doc);
      printFiles(doc);
    }
  } catch (err) {
    failed = true;
    console.error(`benchmark ${name} failed: ${(err as Error).stack ?? err}`);
  }
}
process.exit(failed ? 1 : 0);
