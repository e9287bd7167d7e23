/**
 * Issue 27, item 2: the dashboards chart the fleet over time. A three-node
 * mesh of real processes with sim engines under load; the mesh page of the
 * entry node in headless Chromium draws every chart with data, per host
 * (each of the three) and per model, over 15 min, 1 h and 6 h, live; the
 * node page draws its own. Screenshots go to the test output directory;
 * the pages log no errors.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { request } from 'undici';
import { waitFor } from '../fakes/wait.ts';
import { startLoad, type Load } from '../helpers/load.ts';
import { startSeeded, stopAll, waitModelOn, type MeshNode } from '../helpers/mesh.ts';

const CHROMIUM = '/usr/bin/chromium';
const HAVE_CHROMIUM = fs.existsSync(CHROMIUM);
const SHOTS = path.join(process.env.TEST_OUTPUT_DIR ?? os.tmpdir(), 'viiwork-ui');
const IP = (i: number) => `127.0.27.${i}`;
const CHARTS = ['ttft', 'throughput', 'queue', 'cache'];
const HOSTS = ['ch-a', 'ch-b', 'ch-c'];
const SECRET = crypto.randomBytes(32).toString('base64');

const sim = (ttft: number) => ({ name: 'chat-sim', engine: 'sim', parallel: 2, workloads: ['chat'], sim: { ttft_ms: ttft, prefill_ms_per_1k: 5, tokens_per_s: 400, output_tokens: 8 } });

async function chartState(page: Page, id: string): Promise<{ lines: string[]; points: number; canvas: boolean }> {
  const box = page.locator(`#chart-${id}`);
  const lines = ((await box.getAttribute('data-lines')) ?? '').split('|').filter(Boolean);
  const points = Number(await box.getAttribute('data-points'));
  const canvas = (await box.locator('canvas').count()) > 0;
  return { lines, points, canvas };
}

describe('charts over time on a three-node mesh under load', { skip: HAVE_CHROMIUM ? false : `${CHROMIUM} is missing (apt-get install chromium); skipping the browser tests` }, () => {
  const nodes: MeshNode[] = [];
  let load: Load | undefined;
  let browser: Browser;
  let page: Page;
  const problems: string[] = [];

  before(async () => {
    await startSeeded(
      nodes,
      // A secured mesh: the timeline's executor part is fetched from the member signed like a forward.
      HOSTS.map((name, i) => ({ name, ip: IP(i + 1), env: { VIIWORK_MESH_SECRET: SECRET }, models: [sim(30 + 20 * i), { ...sim(20), name: 'chat-two' }] })),
    );
    await waitModelOn(nodes[0], 'chat-sim', HOSTS);
    load = startLoad(nodes[0].url, 'chat-sim', 8);
    // A second model, so "per model" has two lines to tell apart.
    const second = startLoad(nodes[0].url, 'chat-two', 1);
    await waitFor(() => (load!.answered.get(200) ?? 0) > 40, { timeoutMs: 60_000, what: '40 requests answered' });
    await second.stop();
    fs.mkdirSync(SHOTS, { recursive: true });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
    page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    page.on('pageerror', (err) => problems.push(`uncaught: ${err.message}`));
    page.on('console', (msg) => msg.type() === 'error' && problems.push(`console: ${msg.text()}`));
  });
  after(async () => {
    await load?.stop();
    await browser?.close();
    await stopAll(nodes);
  });

  it('per host: every chart draws data, and the slots chart has a line for each of the three hosts', async () => {
    await page.goto(`${nodes[0].url}/`);
    for (const id of CHARTS) {
      await waitFor(async () => (await chartState(page, id)).points > 0, { timeoutMs: 30_000, what: `chart ${id} has data` });
      assert.ok((await chartState(page, id)).canvas, `${id} is drawn on a canvas`);
    }
    await waitFor(async () => HOSTS.every((h) => chartState(page, 'queue').then((s) => s.lines.includes(`busy ${h}`))), { timeoutMs: 30_000, what: 'a busy-slots line per host' });
    const throughput = await chartState(page, 'throughput');
    for (const h of HOSTS) assert.ok(throughput.lines.includes(`req/s ${h}`), `the entry's requests that ${h} ran: ${throughput.lines}`);
    await page.locator('#charts').screenshot({ path: path.join(SHOTS, 'charts-per-host-15m.png') });
  });

  it('live: the charts redraw from new history without a reload', async () => {
    await page.evaluate('window.__sameDocument = true');
    const before = Number(await page.locator('#charts').getAttribute('data-updated'));
    await waitFor(async () => Number(await page.locator('#charts').getAttribute('data-updated')) > before, { timeoutMs: 20_000, what: 'a refresh of the charts' });
    assert.equal(await page.evaluate('window.__sameDocument'), true);
  });

  it('per model, over 1 h and 6 h: lines per model, still with data', async () => {
    await page.locator('#charts button[data-value="model"]').click();
    await waitFor(async () => (await chartState(page, 'throughput')).lines.some((l) => l.endsWith(' chat-two')), { timeoutMs: 20_000, what: 'a line for chat-two' });
    const t = await chartState(page, 'throughput');
    assert.ok(t.lines.includes('req/s chat-sim') && t.lines.includes('req/s chat-two'), String(t.lines));
    assert.ok(t.lines.every((l) => !HOSTS.some((h) => l.endsWith(h))), 'no host lines per model');
    await page.locator('#charts').screenshot({ path: path.join(SHOTS, 'charts-per-model-15m.png') });
    for (const range of ['1h', '6h']) {
      await page.locator(`#charts button[data-value="${range}"]`).click();
      await waitFor(async () => (await page.locator(`#charts button[data-value="${range}"]`).getAttribute('aria-pressed')) === 'true', { timeoutMs: 5000, what: `${range} chosen` });
      for (const id of CHARTS) await waitFor(async () => (await chartState(page, id)).points > 0, { timeoutMs: 20_000, what: `chart ${id} over ${range}` });
      await page.locator('#charts').screenshot({ path: path.join(SHOTS, `charts-per-model-${range}.png`) });
    }
  });

  it('node page: this node’s own charts, per model', async () => {
    await page.goto(`${nodes[1].url}/node`);
    for (const id of ['ttft', 'throughput', 'queue']) await waitFor(async () => (await chartState(page, id)).points > 0, { timeoutMs: 30_000, what: `node chart ${id}` });
    assert.ok((await chartState(page, 'queue')).lines.includes('busy chat-sim'));
    await page.screenshot({ path: path.join(SHOTS, 'node-page-charts.png'), fullPage: true });
  });

  it('a decision-feed entry opens its timeline, the executor’s part joined across the hop', async () => {
    await page.goto(`${nodes[0].url}/`);
    await page.locator('#feed tbody tr').first().waitFor({ timeout: 20_000 });
    // At this load a hundred decisions arrive a second and a row falls off the end before a hand reaches it: while the
    // pointer is on the feed its rows hold still. Point at it, then look for a request that entered ch-a and ran on a
    // member; none shown yet: leave, let the feed move on, point again.
    const forwarded = `(() => {
      for (const tr of document.querySelectorAll('#feed tbody tr[data-timeline]')) {
        const cells = [...tr.querySelectorAll('td')].map((td) => td.textContent);
        if (cells[1] === 'ch-a' && cells[2] !== 'ch-a' && cells[9] === '200') return tr.getAttribute('data-timeline');
      }
      return null;
    })()`;
    const id = await waitFor(
      async () => {
        await page.locator('#feed tbody').hover();
        // A string, so the browser's own types stay out of the test's (no DOM lib here).
        const found = await page.evaluate<string | null>(forwarded);
        if (!found) {
          await page.mouse.move(0, 0);
          return null;
        }
        // The pointer onto the row itself, scrolled into view now rather than by the click later.
        await page.locator(`#feed tr[data-timeline="${found}"]`).hover({ timeout: 5000 });
        return found;
      },
      { timeoutMs: 20_000, what: 'a forwarded request in the feed' },
    );
    await page.evaluate(`document.querySelector('#feed tr[data-timeline="${id}"]').setAttribute('data-pointed', '1')`);
    const held = page.locator('#feed-held');
    await waitFor(async () => Number(await held.getAttribute('data-waiting')) > 0, { timeoutMs: 20_000, what: 'newer decisions held back' });
    assert.match((await held.textContent()) ?? '', /^held while pointing: \d+ newer$/);
    assert.equal(await page.locator(`#feed tr[data-timeline="${id}"][data-pointed]`).count(), 1, 'the row held still under the pointer');
    await page.locator(`#feed tr[data-timeline="${id}"]`).first().click();
    const box = page.locator(`#timeline[data-id="${id}"]`);
    await box.waitFor({ timeout: 10_000 });
    const doc = await (await request(`${nodes[0].url}/v1/timeline/${encodeURIComponent(id)}`)).body.json() as any;
    const executor = doc.executor;
    assert.notEqual(executor, 'ch-a');
    assert.deepEqual(doc.executor_part, { node: executor, joined: true, offset_ms: doc.phases.find((p: any) => p.name === 'forward').from_ms });
    for (const [phase, node] of [['forward', 'ch-a'], ['slot', executor], ['prefill', executor], ['decode', executor]]) {
      assert.equal(await box.locator(`.tl-row[data-phase="${phase}"][data-node="${node}"]`).count(), 1, `${phase} on ${node}`);
    }
    const forward = doc.phases.find((p: any) => p.name === 'forward');
    const decode = doc.phases.find((p: any) => p.name === 'decode');
    // The executor's clock is placed from the forward's start; its decode ends when it has written the last byte, which on
    // a loaded machine can be a little after the entry read it. Inside the forward, then, within a small margin.
    const margin = Math.max(25, 0.1 * (forward.to_ms - forward.from_ms));
    assert.ok(decode.to_ms <= forward.to_ms + margin, `the executor’s part sits inside the forward (decode ends ${decode.to_ms} ms, the forward ${forward.to_ms} ms)`);
    assert.ok(doc.decision.candidates.some((c: any) => c.host === executor && c.chosen), 'the chosen candidate is the executor');
    assert.equal(await box.locator(`.tl-cands tr.chosen[data-host="${executor}"]`).count(), 1);
    await box.screenshot({ path: path.join(SHOTS, 'timeline.png') });
    // The pointer leaves: what was held back is shown.
    const newestShown = async () => Number(await page.locator('#feed tbody tr').first().getAttribute('data-seq'));
    const pointedAt = await newestShown();
    await page.mouse.move(0, 0);
    await waitFor(async () => (await held.isHidden()) && (await newestShown()) > pointedAt, { timeoutMs: 20_000, what: 'the held decisions shown' });
  });

  it('GET /v1/timeline: bad and unknown ids get a 400 and a 404 that say what to ask', async () => {
    const bad = await request(`${nodes[0].url}/v1/timeline/not%20an%20id`);
    assert.equal(bad.statusCode, 400);
    assert.match(((await bad.body.json()) as any).error.message, /ids are <entry node>:<number>/);
    const gone = await request(`${nodes[0].url}/v1/timeline/ch-a:999999999`);
    assert.equal(gone.statusCode, 404);
    assert.match(((await gone.body.json()) as any).error.message, /last 200 requests/);
  });

  it('the pages logged no errors', () => {
    assert.deepEqual(problems, []);
  });
});
