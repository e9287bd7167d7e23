/**
 * Issue 42, item 3, over a real mesh (SPEC section 9, step 6, "Session
 * home"): a session's turns run on one host whichever node they enter by,
 * for every session key the node reads (X-Session-Affinity, X-Session-Id,
 * the body's prompt_cache_key, Claude Code's x-claude-code-session-id,
 * Codex's session-id and session_id), through every dialect that carries a
 * conversation (chat completions, Responses, Messages), on engines of 30 ms
 * (where the hop to the home is more than the seed's band) and of 300 ms
 * (where the hop is nothing, but a slow turn is still running or only just
 * over when the next one's entry last heard from its host).
 *
 * Short prompts, so no host's cache makes it much cheaper than another: the
 * home rule alone keeps the turns together. Every host has room (more slots
 * than sessions), so no turn ever needs to move.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { weightedRendezvousRank } from '../../src/hashing/rendezvous.ts';
import { waitFor } from '../fakes/wait.ts';
import { getJson, postJson as post, startSeeded, stopAll, waitModelOn, type MeshNode } from '../helpers/mesh.ts';

const HOSTS = ['sa', 'sb', 'sc'];
const TURNS = 6;
const SLOTS = 16;
const ENTRY_ORDER = [0, 1, 2, 1, 0, 2];
type Fleet = { models: { name: string; hosts: { node: string; fresh: boolean; ttft_overhead_ms?: number; prefill_ms_per_1k?: number }[] }[] };

/** One turn of a conversation entering `entry`: where it ran and how it was routed. */
type Turn = (entry: MeshNode, key: string, turn: number) => Promise<{ node: string; route: string }>;

/** A chat-completions conversation that carries its key in `headers(key)` and `body(key)`. */
function chatTurns(headers: (key: string) => Record<string, string>, body: (key: string) => Record<string, unknown> = () => ({})): Turn {
  const convs = new Map<string, { role: string; content: string }[]>();
  return async (entry, key, turn) => {
    let messages = convs.get(key);
    if (!messages) convs.set(key, (messages = [{ role: 'system', content: `You are agent ${key}.` }]));
    messages.push({ role: 'user', content: `turn ${turn}: ${'u'.repeat(200)}` });
    const r = await post(`${entry.url}/v1/chat/completions`, { model: 'm', max_tokens: 2, messages, ...body(key) }, headers(key));
    assert.equal(r.status, 200, r.text);
    messages.push({ role: 'assistant', content: JSON.parse(r.text).choices[0].message.content });
    return { node: String(r.headers['x-viiwork-node']), route: String(r.headers['x-viiwork-route']) };
  };
}

/** A Responses conversation (Codex's shape: the whole input each turn, store off) through the OpenAI SDK. */
function responsesTurns(headers: (key: string) => Record<string, string>, cacheKey: boolean): Turn {
  const convs = new Map<string, OpenAI.Responses.ResponseInputItem[]>();
  return async (entry, key, turn) => {
    let input = convs.get(key);
    if (!input) convs.set(key, (input = [{ role: 'developer', content: `You are agent ${key}.` }]));
    input.push({ role: 'user', content: `turn ${turn}: ${'u'.repeat(200)}` });
    const client = new OpenAI({ baseURL: `${entry.url}/v1`, apiKey: 'none', maxRetries: 0, defaultHeaders: headers(key) });
    const { data, response } = await client.responses
      .create({ model: 'm', input, store: false, max_output_tokens: 16, ...(cacheKey ? { prompt_cache_key: key } : {}) })
      .withResponse();
    input.push({ role: 'assistant', content: data.output_text });
    return { node: String(response.headers.get('x-viiwork-node')), route: String(response.headers.get('x-viiwork-route')) };
  };
}

/** A Messages conversation (Claude Code's shape: a system prompt, the whole history each turn) through the Anthropic SDK. */
function messagesTurns(headers: (key: string) => Record<string, string>): Turn {
  const convs = new Map<string, Anthropic.MessageParam[]>();
  return async (entry, key, turn) => {
    let messages = convs.get(key);
    if (!messages) convs.set(key, (messages = []));
    messages.push({ role: 'user', content: `turn ${turn}: ${'u'.repeat(200)}` });
    const client = new Anthropic({ baseURL: entry.url, apiKey: 'none', maxRetries: 0, defaultHeaders: headers(key) });
    const { data, response } = await client.messages.create({ model: 'm', max_tokens: 8, system: `You are agent ${key}.`, messages }).withResponse();
    const text = data.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
    messages.push({ role: 'assistant', content: text === '' ? '.' : text });
    return { node: String(response.headers.get('x-viiwork-node')), route: String(response.headers.get('x-viiwork-route')) };
  };
}

const KEYS: [string, Turn][] = [
  ['chat completions, X-Session-Affinity', chatTurns((k) => ({ 'x-session-affinity': k }))],
  ['chat completions, X-Session-Id', chatTurns((k) => ({ 'x-session-id': k }))],
  ["chat completions, the body's prompt_cache_key", chatTurns(() => ({}), (k) => ({ prompt_cache_key: k }))],
  ['chat completions, x-claude-code-session-id', chatTurns((k) => ({ 'x-claude-code-session-id': k }))],
  ['chat completions, session-id', chatTurns((k) => ({ 'session-id': k }))],
  ["Responses, Codex's prompt_cache_key with its session-id header", responsesTurns((k) => ({ 'session-id': k }), true)],
  ["Responses, the body's prompt_cache_key alone", responsesTurns(() => ({}), true)],
  ['Responses, session_id (older Codex releases)', responsesTurns((k) => ({ session_id: k }), false)],
  ['Responses, X-Session-Id', responsesTurns((k) => ({ 'x-session-id': k }), false)],
  ["Messages, Claude Code's x-claude-code-session-id", messagesTurns((k) => ({ 'x-claude-code-session-id': k }))],
  ['Messages, X-Session-Affinity', messagesTurns((k) => ({ 'x-session-affinity': k }))],
];

for (const [label, net, ttft] of [
  ['engines of 30 ms', 231, 30],
  ['engines of 300 ms', 232, 300],
] as const) {
  describe(`a session's turns run on one host from every entry node, for every session key and dialect (${label})`, () => {
    const nodes: MeshNode[] = [];
    before(async () => {
      const sim = { ttft_ms: ttft, prefill_ms_per_1k: 40, tokens_per_s: 2000, output_tokens: 2, cache: true };
      await startSeeded(
        nodes,
        HOSTS.map((name, k) => ({ name, ip: `127.0.${net}.${k + 1}`, models: [{ name: 'm', engine: 'sim', parallel: SLOTS, sim }] })),
      );
      for (const n of nodes) await waitModelOn(n, 'm', HOSTS);
      // Measured scores on every host, seen from every entry node: the priced path (step 6), not the unscored one.
      for (const h of HOSTS) {
        for (let i = 0; i < 3; i++) {
          for (const chars of [100, 6000]) {
            const r = await post(`${nodes[0].url}/v1/chat/completions?host=${h}`, { model: 'm', max_tokens: 2, messages: [{ role: 'user', content: `${h} ${i} warm-up ${'w'.repeat(chars)}` }] });
            assert.equal(r.status, 200, r.text);
          }
        }
      }
      for (const n of nodes) {
        await waitFor(
          async () => {
            const m = (await getJson<Fleet>(`${n.url}/v1/fleet/capacity`)).models.find((x) => x.name === 'm');
            return !!m && HOSTS.every((h) => m.hosts.some((x) => x.node === h && x.fresh && x.ttft_overhead_ms !== undefined && x.prefill_ms_per_1k !== undefined));
          },
          { timeoutMs: 30_000, what: `scores of every host seen from ${n.name}` },
        );
      }
    });
    after(() => stopAll(nodes));

    for (const [what, turn] of KEYS) {
      it(`${what}: every turn runs on the key's home, entering through each node in turn`, async () => {
        // Two sessions side by side (each host has room for both): a turn of one runs while the other's is priced.
        await Promise.all([0, 1].map(async (s) => {
          const key = `${what} ${label} ${s}`.replace(/[^A-Za-z0-9]+/g, '-');
          const home = weightedRendezvousRank(key, HOSTS.map((name) => ({ name, weight: SLOTS })))[0];
          const ran: string[] = [];
          const seen: { entry: MeshNode; since: number }[] = [];
          for (let t = 0; t < TURNS; t++) {
            // Every entry in turn, then in another order: each node enters right after each of the others.
            const entry = nodes[ENTRY_ORDER[t % ENTRY_ORDER.length]];
            seen.push({ entry, since: (await getJson<{ last: number }>(`${entry.url}/v1/decisions?since=${Number.MAX_SAFE_INTEGER}`)).last });
            const r = await turn(entry, key, t);
            assert.equal(r.route, 'session', `${key}, turn ${t} from ${entry.name}: route ${r.route}`);
            ran.push(r.node);
          }
          if (ran.some((h) => h !== home)) assert.fail(`${key} ran on ${ran.join(', ')}; its home is ${home}\n${await explain(key, seen)}`);
        }));
      });
    }
  });
}

/**
 * Each turn's decision as its entry saw it (the timeline's candidates), for the failure message. The other session
 * ran beside it, so each entry's decisions since the turn began are shown (the first two: this turn's and perhaps the
 * other session's).
 */
async function explain(key: string, seen: { entry: MeshNode; since: number }[]): Promise<string> {
  const out: string[] = [`decisions around each turn of ${key}:`];
  for (const { entry, since } of seen) {
    for (const d of (await getJson<{ data: { timeline?: string; executor: string | null; route: string }[] }>(`${entry.url}/v1/decisions?since=${since}`)).data.slice(0, 2)) {
      const doc = d.timeline ? await getJson(`${entry.url}/v1/timeline/${encodeURIComponent(d.timeline)}`).catch((e: Error) => ({ error: e.message })) : undefined;
      out.push(`${entry.name} → ${d.executor} (${d.route}): ${JSON.stringify(doc?.decision ?? doc ?? null)}`);
    }
  }
  return out.join('\n');
}
