/**
 * The dashboards show each host's memory budget, use and free memory, and
 * each model's lifecycle state there (SPEC section 11), live: a model loads
 * on a request and the page shows it loaded without a reload.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, postJson, startMeshNode, stopAll, waitConverged, type MeshNode } from '../helpers/mesh.ts';
import { startNode, tempDir, type TestNode } from '../helpers/node.ts';

const CHROMIUM = '/usr/bin/chromium';
const SEEN_MS = 10_000;

describe('dashboards: memory and model states', { skip: fs.existsSync(CHROMIUM) ? false : `${CHROMIUM} is missing (apt-get install chromium); skipping the browser tests` }, () => {
  let t: TestNode;
  let browser: Browser;
  let page: Page;
  const errors: string[] = [];
  before(async () => {
    t = await startNode({
      node: { name: 'odui', memory_budget: '2GiB' },
      models: [{ name: 'lazy', engine: 'sim', parallel: 1, load: 'on_demand', memory: '1GiB', idle_unload: '0', sim: { load_ms: 300, output_tokens: 2 } }],
    });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    page = await browser.newPage();
    page.on('pageerror', (err) => errors.push(err.message));
  });
  after(async () => {
    await browser?.close();
    await t?.stop();
  });

  it('mesh page: the host memory in its column, the model unloaded, then loaded after a request', async () => {
    await page.goto(`${t.url}/`);
    await page.locator('[data-memory="odui"]', { hasText: 'memory 0 KiB used / 2.0 GiB · 2.0 GiB free' }).waitFor({ timeout: SEEN_MS });
    await page.locator('tr[data-model="lazy"] [data-state="unloaded"]', { hasText: 'on demand · 1.0 GiB' }).waitFor({ timeout: SEEN_MS });
    const r = await fetch(`${t.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'lazy', messages: [{ role: 'user', content: 'x' }] }) });
    assert.equal(r.status, 200);
    await page.locator('tr[data-model="lazy"] [data-state="loaded"]').waitFor({ timeout: SEEN_MS });
    await page.locator('[data-memory="odui"]', { hasText: '1.0 GiB used / 2.0 GiB' }).waitFor({ timeout: SEEN_MS });
    await page.locator('#feed', { hasText: 'loaded (request)' }).waitFor({ timeout: SEEN_MS });
  });

  it('node page: budget, used and free tiles and the target state', async () => {
    await page.goto(`${t.url}/node`);
    await page.locator('#memory', { hasText: 'Memory budget' }).filter({ hasText: '2.0 GiB' }).waitFor({ timeout: SEEN_MS });
    await page.locator('#models tr.sub', { hasText: 'loaded on demand · 1.0 GiB' }).waitFor({ timeout: SEEN_MS });
    assert.deepEqual(errors, []);
  });
});

/**
 * A model whose file is being fetched from a member (SPEC section 11): both
 * pages show the `fetching` state and the bytes done of the file's size,
 * live, then the file is here. Two real nodes; the sender sends at 64 KiB/s.
 */
describe('dashboards: a model file being fetched', { skip: fs.existsSync(CHROMIUM) ? false : `${CHROMIUM} is missing (apt-get install chromium); skipping the browser tests` }, () => {
  const IP = (n: number) => `127.0.161.${n}`;
  const dir = tempDir('vw-ui-fetch-');
  fs.mkdirSync(path.join(dir, 'a'));
  const file = writeTinyGguf(path.join(dir, 'a', 'tiny.gguf'), { seed: 7 });
  const size = fs.statSync(file).size;
  // /bin/true stands in for llama-server: the fetch is what is watched, the load after it fails.
  const entry = (p: string) => ({ name: 'far', engine: 'llamacpp', path: p, parallel: 1, context: 256, load: 'on_demand', memory: '64MiB', idle_unload: '0', workloads: ['chat'], llamacpp: { binary: '/bin/true' } });
  const nodes: MeshNode[] = [];
  let browser: Browser;
  let page: Page;
  const errors: string[] = [];
  before(async () => {
    nodes.push(await startMeshNode({ name: 'uf-a', ip: IP(1), models: [entry(file)], node: { models_dir: path.join(dir, 'a', 'models'), transfer_rate: '64KiB' } }));
    nodes.push(await startMeshNode({ name: 'uf-b', ip: IP(2), seeds: [nodes[0].gossip], models: [entry(path.join(dir, 'b', 'absent', 'tiny.gguf'))], node: { models_dir: path.join(dir, 'b', 'models') } }));
    await waitConverged(nodes);
    await waitFor(async () => (await getJson(`${nodes[1].url}/v1/fleet/capacity`)).models.find((m: any) => m.name === 'far')?.hosts.some((h: any) => h.node === 'uf-a' && h.file?.size === size), {
      timeoutMs: 20_000,
      what: "uf-b sees uf-a's hashed file",
    });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    page = await browser.newPage();
    page.on('pageerror', (err) => errors.push(err.message));
  });
  after(async () => {
    await browser?.close();
    await stopAll(nodes);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('mesh page: file not here, then fetching with bytes of size, then the file is here; node page: the same fetch', async () => {
    await page.goto(`${nodes[1].url}/`);
    const cell = page.locator('tr[data-model="far"] td[data-host="uf-b"]');
    await cell.locator('[data-fetch="absent"]', { hasText: 'file not here' }).waitFor({ timeout: SEEN_MS });
    const node = await browser.newPage();
    node.on('pageerror', (err) => errors.push(err.message));
    await node.goto(`${nodes[1].url}/node`);
    const load = await postJson(`${nodes[1].url}/v1/models/far/load?host=uf-b`, {});
    assert.ok(load.status < 300, `load answered ${load.status}: ${load.text}`);
    // Part of the file, not none and not all: the page follows the fetch as it runs.
    const partial = new RegExp(`fetching file \\d+ KiB of ${Math.round(size / 1024)} KiB \\(([1-9]|[1-9]\\d)%\\)`);
    await cell.locator('[data-state="fetching"]').waitFor({ timeout: SEEN_MS });
    await cell.locator('[data-fetch="progress"]', { hasText: partial }).waitFor({ timeout: SEEN_MS });
    await node.locator('#models [data-fetch="progress"]', { hasText: partial }).waitFor({ timeout: SEEN_MS });
    // Fetched: no fetch line, and the file no longer "not here".
    await cell.locator('[data-fetch]').waitFor({ state: 'detached', timeout: 30_000 });
    await node.locator('#models [data-fetch]').waitFor({ state: 'detached', timeout: SEEN_MS });
    assert.deepEqual(errors, []);
  });
});
