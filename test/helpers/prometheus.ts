/**
 * Debian's real Prometheus for a test: scraping the given nodes' /metrics
 * every second, listening on `listen` (host:port), resolved once every
 * target is up. The caller kills it (`SIGTERM`) when done.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { request } from 'undici';
import { waitFor } from '../fakes/wait.ts';

export async function startPrometheus(dir: string, targets: readonly string[], listen: string): Promise<ChildProcess> {
  fs.writeFileSync(
    path.join(dir, 'prometheus.yml'),
    ['global:', '  scrape_interval: 1s', '  evaluation_interval: 1s', 'scrape_configs:', '  - job_name: viiwork', '    static_configs:', `      - targets: [${targets.map((t) => `'${t}'`).join(', ')}]`, ''].join('\n'),
  );
  const prom = spawn('prometheus', [`--config.file=${path.join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${path.join(dir, 'data')}`, `--web.listen-address=${listen}`], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  prom.stderr!.on('data', (d) => (log = (log + d).slice(-4000)));
  await waitFor(
    async () => {
      if (prom.exitCode !== null) throw new Error(`prometheus exited with ${prom.exitCode}: ${log}`);
      const r = await request(`http://${listen}/api/v1/targets`).catch(() => undefined);
      if (!r || r.statusCode !== 200) return false;
      const doc = (await r.body.json()) as { data: { activeTargets: { health: string }[] } };
      return doc.data.activeTargets.length === targets.length && doc.data.activeTargets.every((t) => t.health === 'up');
    },
    { timeoutMs: 30_000, what: `Prometheus scraping all ${targets.length} nodes` },
  );
  return prom;
}
