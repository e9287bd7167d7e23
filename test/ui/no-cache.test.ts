/**
 * Issue 44 item 3: no empty panels on the dashboards in a fleet whose
 * engines report no cached tokens (`sim.report_cache: false`). Two nodes of
 * real processes under load; the mesh page (`/`) and the node page
 * (`/node`) in headless Chromium: every chart draws data or says why it has
 * none. The cached-share chart says no engine here reports its cache (not
 * "no data", not a share of 0), and the decision feed says the engine's
 * count was not reported.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { waitFor } from '../fakes/wait.ts';
import { startLoad, type Load } from '../helpers/load.ts';
import { startSeeded, stopAll, waitModelOn, type MeshNode } from '../helpers/mesh.ts';

const CHROMIUM = '/usr/bin/chromium';
const HAVE_CHROMIUM = fs.existsSync(CHROMIUM);
const IP = (i: number) => `127.0.178.${i}`;
const HOSTS = ['ui-nc-a', 'ui-nc-b'];
const CHARTS = ['ttft', 'throughput', 'queue', 'cache'];
const WHY = /No engine here reports its cached prompt tokens/;

/** What a chart shows: its points, and the text shown in place of lines (empty when hidden). */
async function shown(page: Page, id: string): Promise<{ points: number; text: string }> {
  const box = page.locator(`#chart-${id}`);
  const none = box.locator('.none');
  return { points: Number(await box.getAttribute('data-points')), text: (await none.isVisible()) ? ((await none.textContent()) ?? '') : '' };
}

describe('dashboards over engines that report no cached tokens', { skip: HAVE_CHROMIUM ? false : `${CHROMIUM} is missing (apt-get install chromium)` }, () => {
  const nodes: MeshNode[] = [];
  let load: Load | undefined;
  let browser: Browser;
  let page: Page;
  const problems: string[] = [];

  before(async () => {
    await startSeeded(
      nodes,
      HOSTS.map((name, i) => ({
        name,
        ip: IP(i + 1),
        models: [{ name: 'nc-sim', engine: 'sim', parallel: 2, workloads: ['chat'], sim: { ttft_ms: 20 + 10 * i, prefill_ms_per_1k: 5, tokens_per_s: 400, output_tokens: 8, report_cache: false } }],
      })),
    );
    await waitModelOn(nodes[0], 'nc-sim', HOSTS);
    load = startLoad(nodes[0].url, 'nc-sim', 6);
    await waitFor(() => (load!.answered.get(200) ?? 0) > 20, { timeoutMs: 60_000, what: '20 requests answered' });
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

  for (const [page_, at] of [['mesh page', '/'], ['node page', '/node']] as const) {
    it(`${page_}: every chart draws data or says why; the cached share says no engine reports its cache`, async () => {
      await page.goto(`${nodes[0].url}${at}`);
      for (const id of ['ttft', 'throughput', 'queue']) await waitFor(async () => (await shown(page, id)).points > 0, { timeoutMs: 30_000, what: `chart ${id} has data` });
      const cache = await waitFor(async () => {
        const s = await shown(page, 'cache');
        return WHY.test(s.text) ? s : undefined;
      }, { timeoutMs: 30_000, what: 'the cached-share chart saying why it is empty' });
      assert.equal(cache.points, 0, 'no share drawn: a share of 0 would say the engines cached nothing');
      for (const id of CHARTS) {
        const s = await shown(page, id);
        assert.ok(s.points > 0 || s.text.length > 0, `chart ${id} is empty and silent`);
      }
      assert.deepEqual(problems, []);
    });
  }

  it('the decision feed says the engine’s cached count was not reported', async () => {
    await page.goto(`${nodes[0].url}/`);
    await waitFor(async () => (await page.locator('#feed').textContent())?.includes('not reported'), { timeoutMs: 30_000, what: 'a feed row with no engine count' });
    assert.deepEqual(problems, []);
  });
});
