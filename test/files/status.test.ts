/**
 * `viiwork status` and `viiwork check` say where each model's file is (SPEC
 * section 11): here, fetchable from which members, being fetched (bytes of
 * size), or missing everywhere. Three real nodes, through the real CLI: the
 * tiny GGUF on st-a only, which sends at 64 KiB/s so a fetch can be watched.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { parse, stringify } from 'yaml';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, postJson, startSeeded, stopAll, waitSeesFile, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';

const run = promisify(execFile);
const BIN = path.resolve('bin/viiwork.js');
const IP = (n: number) => `127.0.160.${n}`;

/** The status table's rows as [model, host, ..., state, file] (columns split on two or more spaces). */
async function statusRows(url: string): Promise<string[][]> {
  const { stdout } = await run(process.execPath, [BIN, 'status', '--url', url]);
  const table = stdout.slice(stdout.indexOf('MODEL '));
  return table.trim().split('\n').slice(1).map((l) => l.split(/\s{2,}/));
}
const fileOf = (rows: string[][], model: string, host: string) => rows.find((r) => r[0] === model && r[1] === host)?.[7];

describe('status and check: where model files are', () => {
  const dir = tempDir('vw-files-status-');
  fs.mkdirSync(path.join(dir, 'a'));
  const file = writeTinyGguf(path.join(dir, 'a', 'tiny.gguf'), { seed: 5 });
  const size = fs.statSync(file).size;
  // A llamacpp entry that never has to run in this test (status and fetching only): /bin/true stands in for the binary.
  const entry = (name: string, p: string, extra: Record<string, unknown> = {}) => ({
    name,
    engine: 'llamacpp',
    path: p,
    parallel: 1,
    context: 256,
    load: 'on_demand',
    memory: '64MiB',
    idle_unload: '0',
    workloads: ['chat'],
    llamacpp: { binary: '/bin/true' },
    ...extra,
  });
  const nodes: MeshNode[] = [];
  const absent = (n: string, f: string) => path.join(dir, n, 'absent', f);

  before(async () => {
    await startSeeded(
      nodes,
      ['st-a', 'st-b', 'st-c'].map((n, i) => ({
        name: n,
        ip: IP(i + 1),
        models: [entry('tiny', i === 0 ? file : absent(n, 'tiny.gguf')), entry('gone', absent(n, 'gone.gguf'))],
        node: { models_dir: path.join(dir, n, 'models'), memory_budget: '1GiB', ...(i === 0 ? { transfer_rate: '64KiB' } : {}) },
      })),
    );
    for (const n of nodes.slice(1)) await waitSeesFile(n, 'tiny', 'st-a', size);
  });
  after(async () => {
    await stopAll(nodes);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('status: the file here on st-a, fetchable from st-a elsewhere, and a model whose file no member has: missing everywhere', async () => {
    const rows = await statusRows(nodes[1].url);
    assert.equal(fileOf(rows, 'tiny', 'st-a'), 'here', JSON.stringify(rows));
    assert.equal(fileOf(rows, 'tiny', 'st-b'), 'fetchable from st-a');
    assert.equal(fileOf(rows, 'tiny', 'st-c'), 'fetchable from st-a');
    for (const h of ['st-a', 'st-b', 'st-c']) assert.equal(fileOf(rows, 'gone', h), 'missing everywhere');
    // --json carries the node's fields as sent: the file's size and hash on the host that has it.
    const { stdout } = await run(process.execPath, [BIN, 'status', '--json', '--url', nodes[1].url]);
    const hosts = JSON.parse(stdout).models.find((m: any) => m.name === 'tiny').hosts;
    assert.equal(hosts.find((h: any) => h.node === 'st-a').file.size, size);
    assert.equal(hosts.find((h: any) => h.node === 'st-b').has_file, false);
  });

  it('check, with its node running: fetchable from st-a, or missing everywhere; offline: fetched from a member if one has it; fetch: never is an error', async () => {
    const r = await run(process.execPath, [BIN, 'check', '--config', nodes[1].config, '--no-ports', '--json']);
    const doc = JSON.parse(r.stdout);
    const find = (d: any, key: string) => d.findings.find((f: any) => f.key === key);
    assert.match(find(doc, 'models[0].path')?.message ?? '', /is not on this machine: fetchable from st-a/, JSON.stringify(doc.findings));
    assert.match(find(doc, 'models[1].path')?.message ?? '', /no member of the mesh publishes a file for gone \(missing everywhere/);
    assert.match(find(doc, 'models[1].path').fix, /download the model once to any member/);

    // The same config where no node listens (offline): what the preflight knows alone.
    const cfg = parse(fs.readFileSync(nodes[1].config, 'utf8'));
    cfg.api.host = IP(99);
    cfg.models[1].fetch = 'never';
    const offline = path.join(dir, 'offline.yaml');
    fs.writeFileSync(offline, stringify(cfg));
    const o = await run(process.execPath, [BIN, 'check', '--config', offline, '--no-ports', '--json']).catch((e) => e);
    const od = JSON.parse(o.stdout);
    assert.equal(od.ok, false, 'fetch: never with no file is an error');
    assert.match(find(od, 'models[0].path').message, /is not on this machine: it is fetched from a member that has it before it loads/);
    assert.equal(find(od, 'models[1].path').level, 'error');
    assert.match(find(od, 'models[1].path').message, /does not exist and models\[1\]\.fetch is never/);
  });

  it('status shows a fetch in progress on the host fetching: bytes of size', async () => {
    const load = await postJson(`${nodes[2].url}/v1/models/tiny/load?host=st-c`, {});
    assert.ok(load.status < 300, `load answered ${load.status}: ${load.text}`);
    let seen = '';
    await waitFor(
      async () => {
        seen = fileOf(await statusRows(nodes[2].url), 'tiny', 'st-c') ?? '';
        const m = /^fetching ([\d.]+) MiB of ([\d.]+) MiB \((\d+)%\)$/.exec(seen);
        return m !== null && Number(m[3]) > 0 && Number(m[3]) < 100;
      },
      { timeoutMs: 20_000, intervalMs: 200, what: 'a fetch in progress on st-c' },
    ).catch((err) => {
      throw new Error(`${(err as Error).message}; status said: ${seen}`);
    });
    // Once fetched, st-c publishes the copy: here.
    await waitFor(async () => fileOf(await statusRows(nodes[2].url), 'tiny', 'st-c') === 'here', { timeoutMs: 30_000, intervalMs: 300, what: 'st-c has the file' });
  });
});
