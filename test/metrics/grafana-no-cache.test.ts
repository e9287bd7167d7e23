/**
 * Issue 44 item 3: no empty panels in a fleet whose engines report no
 * cached tokens. The real Prometheus (Debian's package) scrapes a
 * three-node mesh of sim engines told not to report their cache
 * (`sim.report_cache: false`) under load. Every panel of
 * docs/grafana-dashboard.json shows data; "Cache prediction error", which
 * has no error to show there, shows why: the share of requests whose engine
 * reports no cached tokens, at 1.
 */
import assert from 'node:assert/strict';
import { spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { waitFor } from '../fakes/wait.ts';
import { startLoad, type Load } from '../helpers/load.ts';
import { startSeeded, stopAll, waitModelOn, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';
import { startPrometheus } from '../helpers/prometheus.ts';

const HAVE_PROMETHEUS = spawnSync('prometheus', ['--version']).status === 0;
const IP = (i: number) => `127.0.177.${i}`;
const PROM = `http://${IP(20)}:9090`;
const HOSTS = ['nc-a', 'nc-b', 'nc-c'];

interface Panel {
  type: string;
  title: string;
  targets?: { refId: string; expr: string }[];
}

function concrete(expr: string): string {
  return expr.replaceAll('$__rate_interval', '30s').replaceAll('$model', '.*').replaceAll('$instance', '.*');
}

async function query(expr: string): Promise<{ metric: Record<string, string>; value: [number, string] }[]> {
  const r = await request(`${PROM}/api/v1/query?query=${encodeURIComponent(expr)}`);
  const doc = (await r.body.json()) as { status: string; error?: string; data?: { result: { metric: Record<string, string>; value: [number, string] }[] } };
  if (doc.status !== 'success') throw new Error(`Prometheus refused ${expr}: ${doc.error}`);
  return doc.data!.result.filter((s) => Number.isFinite(Number(s.value[1])));
}

describe('the Grafana dashboard over engines that report no cached tokens', { skip: HAVE_PROMETHEUS ? false : 'prometheus is not installed (apt-get install prometheus)' }, () => {
  const nodes: MeshNode[] = [];
  let prom: ChildProcess | undefined;
  let load: Load | undefined;
  const dir = tempDir('viiwork-prom-nc-');
  const doc = JSON.parse(fs.readFileSync('docs/grafana-dashboard.json', 'utf8')) as { panels: Panel[] };
  const panels = doc.panels.filter((p) => p.type !== 'row');

  before(async () => {
    await startSeeded(
      nodes,
      HOSTS.map((name, i) => ({
        name,
        ip: IP(11 + i),
        models: [{ name: 'nocache-sim', engine: 'sim', parallel: 2, workloads: ['chat'], sim: { ttft_ms: 20 + 10 * i, prefill_ms_per_1k: 5, tokens_per_s: 400, output_tokens: 8, report_cache: false } }],
      })),
    );
    await waitModelOn(nodes[0], 'nocache-sim', HOSTS);
    prom = await startPrometheus(dir, nodes.map((n) => `${n.ip}:8086`), `${IP(20)}:9090`);
    load = startLoad(nodes[0].url, 'nocache-sim', 8);
  });
  after(async () => {
    await load?.stop();
    prom?.kill('SIGTERM');
    await stopAll(nodes);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('the engines answer with no cached-token count', async () => {
    const r = await request(`${nodes[0].url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'nocache-sim', messages: [{ role: 'user', content: 'hi' }] }) });
    const body = (await r.body.json()) as { usage: Record<string, unknown>; timings?: Record<string, unknown> };
    assert.equal(r.statusCode, 200);
    assert.equal(body.usage.prompt_tokens_details, undefined);
    assert.equal(body.timings?.cache_n, undefined);
  });

  it('every panel shows data', async () => {
    const empty = new Set(panels.map((p) => p.title));
    try {
      await waitFor(
        async () => {
          for (const p of panels.filter((x) => empty.has(x.title))) {
            for (const t of p.targets ?? []) if ((await query(concrete(t.expr))).length > 0) empty.delete(p.title);
          }
          return empty.size === 0;
        },
        { timeoutMs: 90_000, intervalMs: 1000, what: 'data for every panel' },
      );
    } catch {
      assert.fail(`panels without data: ${[...empty].join('; ')}`);
    }
  });

  it('"Cache prediction error" says why it has no error to show: every request unmeasured, the engine reports no cached tokens', async () => {
    const panel = panels.find((p) => p.title.startsWith('Cache prediction error'))!;
    const why = panel.targets!.find((t) => t.refId === 'B')!;
    const shares = await waitFor(async () => {
      const r = await query(concrete(why.expr));
      return r.length > 0 ? r : undefined;
    }, { timeoutMs: 30_000, what: 'the unmeasured share' });
    assert.deepEqual(
      shares.map((s) => [s.metric.model, Number(s.value[1])]),
      [['nocache-sim', 1]],
    );
    assert.equal((await query(concrete(panel.targets!.find((t) => t.refId === 'A')!.expr))).length, 0, 'no error series where nothing was measured');
  });
});
