/**
 * Usage on the dashboards (SPEC section 12, "Usage"), in Chromium: the
 * usage table of `/node` and `/`, fed by GET /v1/usage, sums a key's rows
 * per model (requests, prompt tokens cached and uncached, completion,
 * errors, limit refusals). A user key sees only its own; an admin key sees
 * every key's.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { request } from 'undici';
import { startNode, tempDir, type TestNode } from '../helpers/node.ts';

const CHROMIUM = '/usr/bin/chromium';
const HAVE_CHROMIUM = fs.existsSync(CHROMIUM);
/** Usage is polled every 5 s; the machine is small and busy. */
const SEEN_MS = 20_000;
const sha = (s: string) => crypto.createHash('sha256').update(s).digest('hex');
const SECRET = { alice: 'vk-alice-secret', bob: 'vk-bob-secret', ops: 'vk-ops-secret' };

async function chat(url: string, key: string, content: string) {
  const r = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model: 'demo', max_tokens: 2, messages: [{ role: 'user', content }] }),
  });
  return { status: r.statusCode, text: await r.body.text() };
}

/** The usage table's cells for a (key, model) row, by field; undefined while the row is not shown. (Strings: the test is not typed against the DOM.) */
async function row(page: Page, key: string, model: string): Promise<Record<string, string> | undefined> {
  return page.evaluate(`(() => {
    const tr = [...document.querySelectorAll('#usage tbody tr')].find((r) => r.dataset.key === ${JSON.stringify(key)} && r.dataset.model === ${JSON.stringify(model)});
    return tr ? Object.fromEntries([...tr.querySelectorAll('td[data-field]')].map((td) => [td.dataset.field, td.textContent])) : undefined;
  })()`);
}

async function keysShown(page: Page): Promise<string[]> {
  return page.evaluate(`[...document.querySelectorAll('#usage tbody tr')].map((r) => r.dataset.key)`);
}

describe('usage on the dashboards', { skip: HAVE_CHROMIUM ? false : `${CHROMIUM} is missing (apt-get install chromium); skipping the browser tests` }, () => {
  let t: TestNode;
  let browser: Browser;
  const pageErrors: string[] = [];

  before(async () => {
    const dir = tempDir('viiwork-usage-ui-');
    const keysFile = path.join(dir, 'keys.yaml');
    const entry = (name: keyof typeof SECRET, role: string, limits = '') => `  - name: ${name}\n    sha256: ${sha(SECRET[name])}\n    role: ${role}\n${limits}`;
    fs.writeFileSync(keysFile, `keys:\n${entry('alice', 'user', '    limits: {rpm: 3}\n')}${entry('bob', 'user')}${entry('ops', 'admin')}`, { mode: 0o600 });
    t = await startNode({
      node: { name: 'u1' },
      api: { keys_file: keysFile },
      models: [{ name: 'demo', engine: 'sim', parallel: 2, sim: { ttft_ms: 5, prefill_ms_per_1k: 1, tokens_per_s: 1000, output_tokens: 2 } }],
    });
    // Alice: three served, then her rpm limit refuses the fourth. Bob: one.
    for (let i = 0; i < 3; i++) assert.equal((await chat(t.url, SECRET.alice, `alice ${i}`)).status, 200);
    assert.equal((await chat(t.url, SECRET.alice, 'alice over')).status, 429);
    assert.equal((await chat(t.url, SECRET.bob, 'bob')).status, 200);
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
  });

  after(async () => {
    await browser?.close();
    await t?.stop();
  });

  async function open(path: string, key: string): Promise<Page> {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on('pageerror', (err) => pageErrors.push(`uncaught: ${err.message}`));
    await page.addInitScript(`sessionStorage.setItem('viiwork.apiKey', ${JSON.stringify(key)})`);
    await page.goto(`${t.url}${path}`);
    return page;
  }

  it("a user key sees its own usage per model, and nobody else's", async () => {
    const page = await open('/node', SECRET.alice);
    try {
      // A locator's wait, not waitForFunction with a string: the page's CSP forbids eval, which a string predicate's polling needs.
      await page.locator('#usage tbody tr[data-key="alice"]').waitFor({ timeout: SEEN_MS });
      const r = (await row(page, 'alice', 'demo'))!;
      assert.equal(r.requests, '3');
      assert.equal(r.limited, '1');
      assert.equal(r.errors, '0');
      assert.ok(Number(r.completion) > 0, `completion ${r.completion}`);
      assert.ok(Number(r.prompt_cached.replace(/,/g, '')) + Number(r.prompt_uncached.replace(/,/g, '')) > 0, JSON.stringify(r));
      assert.deepEqual(await keysShown(page), ['alice']);
    } finally {
      await page.close();
    }
  });

  it("an admin key sees every key's usage, with a total, on the mesh page too", async () => {
    const page = await open('/', SECRET.ops);
    try {
      await page.locator('#usage tbody tr').nth(1).waitFor({ timeout: SEEN_MS });
      assert.deepEqual(await keysShown(page), ['alice', 'bob']);
      assert.equal((await row(page, 'bob', 'demo'))!.requests, '1');
      const total = await page.evaluate(`document.querySelector('#usage tfoot td[data-field="requests"]')?.textContent`);
      assert.equal(total, '4');
      // Another period asks again at once.
      await page.selectOption('#usage-since', '1h');
      await page.locator('#usage tbody tr').nth(1).waitFor({ timeout: SEEN_MS });
    } finally {
      await page.close();
    }
    assert.deepEqual(pageErrors, []);
  });
});
