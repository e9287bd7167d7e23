/**
 * Issue 18, acceptance 4: agent clients' session keys (SPEC sections 4 and
 * 9.6) keep a session on one host from every entry node of a three-node
 * mesh: Claude Code's `x-claude-code-session-id` through the Anthropic SDK
 * on /v1/messages, Codex's body `prompt_cache_key` and `session-id` header
 * on /v1/responses; the session headers still come first.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { startFakeEngine, type FakeEngine } from '../fakes/fake-engine.ts';
import { startMeshNode, stopAll, waitConverged, waitModelOn, postJson as post, type MeshNode } from '../helpers/mesh.ts';

const IP = (n: number) => `127.0.101.${n}`;
const KEYS = 16;

describe("agent clients' session keys across a three-node mesh", () => {
  const engines: FakeEngine[] = [];
  const nodes: MeshNode[] = [];
  before(async () => {
    for (const name of ['A', 'B', 'C']) engines.push(await startFakeEngine({ name: `eng${name}`, outputTokens: 2 }));
    const a = await startMeshNode({ name: 'A', ip: IP(1), models: [{ name: 'm', engine: 'openai', url: engines[0].url, parallel: 4 }] });
    nodes.push(a);
    for (const [i, name] of ['B', 'C'].entries()) nodes.push(await startMeshNode({ name, ip: IP(i + 2), seeds: [a.gossip], models: [{ name: 'm', engine: 'openai', url: engines[i + 1].url, parallel: 4 }] }));
    await waitConverged(nodes);
    for (const n of nodes) await waitModelOn(n, 'm', ['A', 'B', 'C']);
  });
  after(async () => {
    await stopAll(nodes);
    for (const e of engines) await e.close();
  });

  /** Run `turn` for each key from every entry node; each key must run on one host, and the keys on several. */
  async function onOneHost(turn: (entry: MeshNode, key: string) => Promise<{ node: string | null; route: string | null }>): Promise<void> {
    const home = new Map<string, string>();
    for (let k = 0; k < KEYS; k++) {
      const key = `agent-session-${k}-${Math.random().toString(36).slice(2, 8)}`;
      const hosts = new Set<string>();
      for (const entry of nodes) {
        const r = await turn(entry, key);
        assert.equal(r.route, 'session', `${key} from ${entry.name}`);
        hosts.add(String(r.node));
      }
      assert.equal(hosts.size, 1, `${key} ran on ${[...hosts]}`);
      home.set(key, [...hosts][0]);
    }
    assert.ok(new Set(home.values()).size >= 2, `every key on ${[...new Set(home.values())]}`);
  }

  it("Claude Code's x-claude-code-session-id through the Anthropic SDK (/v1/messages)", async () => {
    await onOneHost(async (entry, key) => {
      const client = new Anthropic({ baseURL: entry.url, apiKey: 'none', maxRetries: 0, defaultHeaders: { 'x-claude-code-session-id': key } });
      const { response } = await client.messages.create({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }).withResponse();
      return { node: response.headers.get('x-viiwork-node'), route: response.headers.get('x-viiwork-route') };
    });
  });

  it("Codex's prompt_cache_key in the body, with and without its session-id header (/v1/responses)", async () => {
    await onOneHost(async (entry, key) => {
      const client = new OpenAI({ baseURL: `${entry.url}/v1`, apiKey: 'none', maxRetries: 0 });
      const { response } = await client.responses.create({ model: 'm', input: 'hi', store: false, prompt_cache_key: key }).withResponse();
      return { node: response.headers.get('x-viiwork-node'), route: response.headers.get('x-viiwork-route') };
    });
    await onOneHost(async (entry, key) => {
      const r = await post(`${entry.url}/v1/responses`, { model: 'm', input: 'hi', stream: false }, { 'session-id': key });
      assert.equal(r.status, 200, r.text);
      return { node: String(r.headers['x-viiwork-node']), route: String(r.headers['x-viiwork-route']) };
    });
  });

  it('the session headers come before the body key, and the body key before the agent headers (SPEC 9.6 order)', async () => {
    const hostOf = async (headers: Record<string, string>, body: Record<string, unknown> = {}) => {
      const r = await post(`${nodes[0].url}/v1/chat/completions`, { model: 'm', messages: [{ role: 'user', content: 'hi' }], ...body }, headers);
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers['x-viiwork-route'], 'session');
      return String(r.headers['x-viiwork-node']);
    };
    // Find two keys that live on different hosts, so the order is visible.
    const keys = Array.from({ length: 40 }, (_, i) => `order-${i}`);
    // One at a time: a burst would fill the hosts and queue some turns (route `queued`), which is not what this tests.
    const homes: string[] = [];
    for (const k of keys) homes.push(await hostOf({ 'x-session-affinity': k }));
    const i = homes.findIndex((h) => h !== homes[0]);
    assert.ok(i > 0, 'two keys on different hosts');
    const [k0, k1] = [keys[0], keys[i]];
    assert.equal(await hostOf({ 'x-session-affinity': k0 }, { prompt_cache_key: k1 }), homes[0]);
    assert.equal(await hostOf({ 'x-session-id': k0 }, { prompt_cache_key: k1 }), homes[0]);
    assert.equal(await hostOf({ 'x-claude-code-session-id': k1, 'session-id': k1 }, { prompt_cache_key: k0 }), homes[0]);
    assert.equal(await hostOf({ 'x-claude-code-session-id': k0, 'session-id': k1 }), homes[0]);
    assert.equal(await hostOf({ 'session-id': k1 }), homes[i]);
  });
});
