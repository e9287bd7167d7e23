/**
 * Issue 27, item 5: the Grafana dashboard in docs/ reads real data. The
 * real Prometheus server (Debian's package) scrapes a three-node mesh of
 * real processes under load; every query of every panel of
 * docs/grafana-dashboard.json returns data. The GenAI histograms are
 * checked on /metrics by name and label.
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
const IP = (i: number) => `127.0.27.${i}`;
const PROM = `http://${IP(20)}:9090`;
const HOSTS = ['gf-a', 'gf-b', 'gf-c'];

interface Panel {
  type: string;
  title: string;
  targets?: { expr: string }[];
}

/** A panel's query as Grafana would send it with every host and model chosen. */
function concrete(expr: string): string {
  return expr.replaceAll('$__rate_interval', '30s').replaceAll('$model', '.*').replaceAll('$instance', '.*');
}

async function query(expr: string): Promise<{ value: [number, string] }[]> {
  const r = await request(`${PROM}/api/v1/query?query=${encodeURIComponent(expr)}`);
  const doc = (await r.body.json()) as { status: string; error?: string; data?: { result: { value: [number, string] }[] } };
  if (doc.status !== 'success') throw new Error(`Prometheus refused ${expr}: ${doc.error}`);
  return doc.data!.result;
}

describe('the Grafana dashboard against the real Prometheus', { skip: HAVE_PROMETHEUS ? false : 'prometheus is not installed (apt-get install prometheus); skipping the Grafana dashboard test' }, () => {
  const nodes: MeshNode[] = [];
  let prom: ChildProcess | undefined;
  let load: Load | undefined;
  const dir = tempDir('viiwork-prom-');

  before(async () => {
    await startSeeded(
      nodes,
      HOSTS.map((name, i) => ({ name, ip: IP(11 + i), models: [{ name: 'chat-sim', engine: 'sim', parallel: 2, workloads: ['chat'], sim: { ttft_ms: 20 + 10 * i, prefill_ms_per_1k: 5, tokens_per_s: 400, output_tokens: 8 } }] })),
    );
    await waitModelOn(nodes[0], 'chat-sim', HOSTS);
    prom = await startPrometheus(dir, nodes.map((n) => `${n.ip}:8086`), `${IP(20)}:9090`);
    // More than the slots of the mesh, so requests queue and forwards happen.
    load = startLoad(nodes[0].url, 'chat-sim', 8);
  });
  after(async () => {
    await load?.stop();
    prom?.kill('SIGTERM');
    await stopAll(nodes);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('/metrics carries the GenAI histograms under their Prometheus names', async () => {
    await waitFor(() => (load!.answered.get(200) ?? 0) > 5, { timeoutMs: 30_000, what: 'requests answered' });
    const text = await (await request(`${nodes[0].url}/metrics`)).body.text();
    assert.match(text, /^gen_ai_server_time_to_first_token_seconds_bucket\{le="0\.1",gen_ai_operation_name="chat",gen_ai_request_model="chat-sim",gen_ai_provider_name="viiwork"\} \d+$/m);
    assert.match(text, /^gen_ai_server_request_duration_seconds_count\{gen_ai_operation_name="chat",gen_ai_request_model="chat-sim",gen_ai_provider_name="viiwork"\} \d+$/m);
  });

  it('every panel’s query returns data', async () => {
    const doc = JSON.parse(fs.readFileSync('docs/grafana-dashboard.json', 'utf8')) as { panels: Panel[] };
    const queries = doc.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, expr: concrete(t.expr) })));
    assert.ok(queries.length >= 16, `the dashboard has its panels (${queries.length} queries)`);
    const empty = new Map(queries.map((q) => [q.expr, q.panel]));
    try {
      await waitFor(
        async () => {
          for (const [expr] of empty) {
            const result = await query(expr);
            if (result.some((s) => Number.isFinite(Number(s.value[1])))) empty.delete(expr);
          }
          return empty.size === 0;
        },
        { timeoutMs: 90_000, intervalMs: 1000, what: 'data for every panel' },
      );
    } catch {
      assert.fail(`panels without data: ${[...empty].map(([e, p]) => `${p} (${e})`).join('; ')}`);
    }
  });
});
