/**
 * Issue 27, item 7: what the dashboards say is true. A new user's node
 * (examples/single-node.yaml, sim engines: no model file at all) in a real
 * browser; every line of the summary, the members, the models × hosts grid
 * and the node page is checked against the node's own JSON at that moment.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { request } from 'undici';
import { parse } from 'yaml';
import { waitFor } from '../fakes/wait.ts';
import { startNode, type TestNode } from '../helpers/node.ts';

const CHROMIUM = '/usr/bin/chromium';
const HAVE_CHROMIUM = fs.existsSync(CHROMIUM);

async function json(url: string): Promise<any> {
  const r = await request(url);
  return r.body.json();
}

/** The page's numbers as it prints them (one decimal at most). */
const n1 = (v: number) => String(Math.round(v * 10) / 10);

/** Read the page and the node's JSON until they agree (the page polls every second), else fail showing both. */
async function agrees(what: string, read: () => Promise<string[]>, expect: () => Promise<string[]>): Promise<void> {
  let last: { seen: string[]; want: string[] } = { seen: [], want: [] };
  try {
    await waitFor(
      async () => {
        const want = await expect();
        const seen = await read();
        last = { seen, want };
        return JSON.stringify(seen) === JSON.stringify(want);
      },
      { timeoutMs: 15_000, what },
    );
  } catch {
    assert.deepEqual(last.seen, last.want, `${what}: the page says what the node's state does not`);
  }
}

const lines = async (page: Page, selector: string) =>
  (await page.locator(selector).innerText())
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);

describe('the dashboards tell the truth about a new user’s node', { skip: HAVE_CHROMIUM ? false : `${CHROMIUM} is missing (apt-get install chromium); skipping the browser tests` }, () => {
  let t: TestNode;
  let browser: Browser;
  let page: Page;
  const problems: string[] = [];

  before(async () => {
    const example = parse(fs.readFileSync('examples/single-node.yaml', 'utf8'));
    t = await startNode({ ...example, node: { name: example.node.name }, api: {}, mesh: {} });
    // A few requests, so scores, the feed and the slots have something to say.
    for (let i = 0; i < 3; i++) {
      const r = await request(`${t.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'demo-chat', max_tokens: 2, messages: [{ role: 'user', content: `hi ${i}` }] }) });
      assert.equal(r.statusCode, 200);
      await r.body.text();
    }
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on('pageerror', (err) => problems.push(`uncaught: ${err.message}`));
    page.on('console', (msg) => msg.type() === 'error' && problems.push(`console: ${msg.text()}`));
  });
  after(async () => {
    await browser?.close();
    await t?.stop();
  });

  it('models × hosts: every line of every cell matches the fleet document, and no sim model is said to lack a file', async () => {
    await page.goto(`${t.url}/`);
    const fleet = await json(`${t.url}/v1/fleet/capacity`);
    for (const m of fleet.models) {
      for (const host of m.hosts) {
        await agrees(
          `${m.name} on ${host.node}`,
          // A slot's idle time moves between the page's poll and ours: it is compared as present, not to the tenth of a second.
          async () => (await lines(page, `#grid tr[data-model="${m.name}"] td[data-host="${host.node}"]`)).map((l) => l.replace(/, idle .+$/, ', idle ~')),
          async () => {
            const x = (await json(`${t.url}/v1/fleet/capacity`)).models.find((y: any) => y.name === m.name).hosts.find((y: any) => y.node === host.node);
            const own = (await json(`${t.url}/v1/capacity`)).models.find((y: any) => y.name === m.name);
            assert.equal(x.has_file, undefined, 'a sim model has no file: the fleet says nothing of one');
            const scores = [own.ttft_overhead_ms !== undefined ? `${n1(own.ttft_overhead_ms)} ms overhead` : null, own.prefill_ms_per_1k !== undefined ? `${n1(own.prefill_ms_per_1k)} ms/1k` : null].filter(Boolean);
            // Issue 25's slot view: what each engine slot holds.
            const slots = (x.targets ?? []).flatMap((tg: any) => tg.slot_state ?? []);
            const slotLines = slots.map((st: any, i: number) => `slot ${i}: ${st.busy ? 'busy' : st.tokens > 0 ? `${n1(st.tokens)} tok, idle ~` : 'empty'}`);
            return [`${x.busy}/${x.slots} busy`, `${x.free} free · fresh · 0 ms`, `queue ${own.queued} · ${scores.length ? scores.join(' · ') : 'no score yet'}`, ...slotLines];
          },
        );
      }
      const head = await lines(page, `#grid tr[data-model="${m.name}"] th`);
      const listed = (await json(`${t.url}/v1/models`)).data.find((d: any) => d.id === m.name);
      assert.deepEqual(head, [m.name, listed.workloads.join(', '), `ctx ${listed.context_length}`]);
    }
    assert.doesNotMatch(await page.locator('#grid').innerText(), /file not here/);
  });

  it('summary and members: the counts and the member row match the node', async () => {
    await agrees(
      'summary',
      () => lines(page, '#summary'),
      async () => {
        const fleet = await json(`${t.url}/v1/fleet/capacity`);
        const hosts = fleet.models.flatMap((m: any) => m.hosts);
        const slots = hosts.reduce((n: number, x: any) => n + x.slots, 0);
        const busy = hosts.reduce((n: number, x: any) => n + x.busy, 0);
        // The tiles' labels are set in capitals by the style sheet, and innerText reads them so.
        return ['MEMBERS', '1 alive', 'MODELS', String(fleet.models.length), 'SLOTS BUSY', `${busy}/${slots}${slots - busy} free, fresh hosts`, 'QUEUED HERE', '0'];
      },
    );
    const mesh = await json(`${t.url}/v1/mesh`);
    const me = mesh.members.find((m: any) => m.self);
    const cells = await page.locator(`#members tr[data-member="${me.name}"]`).locator('th, td').allInnerTexts();
    assert.deepEqual(cells.slice(0, 6).map((c) => c.replace(/\s+/g, ' ').trim()), [`${me.name}this node`, me.state, me.role, me.gossip, me.api, me.version]);
  });

  it('node page: tiles, backends and models rows match /health and /v1/capacity', async () => {
    await page.goto(`${t.url}/node`);
    const health = await json(`${t.url}/health`);
    await agrees(
      'backends',
      async () => (await page.locator('#backends tbody tr').allInnerTexts()).map((r) => r.replace(/\s+/g, ' ').trim()),
      async () => health.backends.map((b: any) => `${b.id} ${b.model} ${b.engine} ${b.state} ${b.reason}`),
    );
    await agrees(
      'models',
      async () => (await page.locator('#models tbody tr').allInnerTexts()).map((r) => r.replace(/\s+/g, ' ').trim()),
      async () => {
        const cap = await json(`${t.url}/v1/capacity`);
        return cap.models.flatMap((m: any) => [
          [m.name, m.engine, `${m.busy}/${m.slots} busy`, m.queued, m.ctx, `${m.healthy_backends}/${m.backends}`, m.ttft_overhead_ms !== undefined ? `${n1(m.ttft_overhead_ms)} ms` : '—', m.prefill_ms_per_1k !== undefined ? `${n1(m.prefill_ms_per_1k)} ms` : '—', m.perf_samples].join(' '),
          // A sim target uses no memory: the page says what the report says, 0 KiB.
          ...m.targets.map((x: any) => `target: ${x.workloads.join(', ')} ${x.state} · ${Math.round(x.memory / 1024)} KiB ${x.busy}/${x.slots} busy`),
        ]);
      },
    );
    assert.doesNotMatch(await page.locator('main').innerText(), /file not here|fetching file/);
  });

  it('shows no console errors', () => {
    assert.deepEqual(problems, []);
  });
});
