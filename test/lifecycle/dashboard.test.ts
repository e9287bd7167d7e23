/**
 * The dashboards show each host's memory budget, use and free memory, and
 * each model's lifecycle state there (SPEC section 11), live: a model loads
 * on a request and the page shows it loaded without a reload.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { startNode, type TestNode } from '../helpers/node.ts';

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
