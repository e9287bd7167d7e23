/**
 * SPEC 13, "A cut stream goes on" (issue 43, item 4), with real processes:
 * an entry node and four executors running the sim engine slowly enough
 * that a SIGKILL of the executor lands mid-answer. The client's stream goes
 * on from another host: one stream, the sim's whole answer once (no word
 * repeated, none lost), one end, usage once; in chat completions, Anthropic
 * Messages and the Responses API. A whole (non-streamed) answer cut the same
 * way is retried whole elsewhere: nothing had reached the client.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { request } from 'undici';
import { waitFor } from '../fakes/wait.ts';
import { getJson, postJson, startMeshNode, stopAll, waitConverged, waitModelOn, type MeshNode } from '../helpers/mesh.ts';
import { chatContentEvents, chatText, jsonEvents, openStream, type ClientEvent } from './stream-reader.ts';

const IP = (n: number) => `127.0.190.${n}`;
const WORDS = ['simulated', 'tokens', 'from', 'the', 'viiwork', 'sim', 'engine', 'no', 'model', 'ran'];
const OUTPUT = 60;
/** The sim's whole answer of OUTPUT words: what the client must read, once, however many hosts wrote it. */
const FULL = Array.from({ length: OUTPUT }, (_, i) => (i === 0 ? '[simulated] ' : '') + WORDS[i % WORDS.length] + (i < OUTPUT - 1 ? ' ' : '')).join('');
// 20 tokens a second: the answer takes 3 s, so a kill sent after its fifth word lands mid-answer even when the test
// process is kept waiting for seconds on a loaded machine (a kill after the answer's last text event finds nothing to continue).
const sim = { ttft_ms: 5, prefill_ms_per_1k: 1, tokens_per_s: 20, output_tokens: OUTPUT };
const EXECUTORS = ['x2', 'x3', 'x4'];
const specOf = (name: string) => ({ name, ip: IP(EXECUTORS.indexOf(name) + 2), models: [{ name: 'm', engine: 'sim', parallel: 2, sim }] });

describe('a stream whose executor is killed mid-answer goes on from another host', () => {
  const nodes: MeshNode[] = [];
  let entry: MeshNode;
  const killed = new Set<string>();

  before(async () => {
    entry = await startMeshNode({ name: 'entry', ip: IP(1) });
    nodes.push(entry);
    for (const name of EXECUTORS) nodes.push(await startMeshNode({ ...specOf(name), seeds: [entry.gossip] }));
    await waitConverged(nodes, 60_000);
    await waitModelOn(entry, 'm', EXECUTORS, 60_000);
  });
  after(() => stopAll(nodes));

  // Each test kills an executor: it comes back (a new process) before the next one.
  beforeEach(async () => {
    for (const name of [...killed]) {
      const i = nodes.findIndex((x) => x.name === name);
      nodes[i] = await startMeshNode({ ...specOf(name), seeds: [entry.gossip] });
      killed.delete(name);
    }
    await waitModelOn(entry, 'm', EXECUTORS, 60_000);
  });

  /** SIGKILL the node named `name` (the executor of a stream under way) and wait until it is gone. */
  async function kill(name: string): Promise<void> {
    const n = nodes.find((x) => x.name === name);
    assert.ok(n, `executor ${name} is one of the mesh's nodes`);
    killed.add(name);
    n.proc.kill('SIGKILL');
    await n.exited;
  }

  /** Nodes still alive that serve m, from the entry's fresh view: a continuation has somewhere to go. */
  async function liveExecutors(): Promise<string[]> {
    const fleet = await getJson<{ models: { name: string; hosts: { node: string; fresh: boolean }[] }[] }>(`${entry.url}/v1/fleet/capacity`);
    return (fleet.models.find((m) => m.name === 'm')?.hosts ?? []).filter((h) => h.fresh && !killed.has(h.node)).map((h) => h.node);
  }

  async function continuations(): Promise<number> {
    const text = await (await request(`${entry.url}/metrics`)).body.text();
    const m = /viiwork_stream_continuations_total\{model="m",outcome="continued"\} (\d+)/.exec(text);
    return m ? Number(m[1]) : 0;
  }

  /** Opens a stream at the entry, waits for its fifth word, kills its executor; the stream's whole events once it ends. */
  async function cutMidAnswer(path: string, body: unknown, words: (events: ClientEvent[]) => number): Promise<{ events: ClientEvent[]; cutFrom: string; headers: Record<string, unknown> }> {
    assert.ok((await liveExecutors()).length >= 2, 'two executors are left: one to cut, one to continue');
    const s = await openStream(`${entry.url}${path}`, body);
    assert.equal(s.status, 200);
    await s.until((ev) => words(ev) >= 5, 'the answer under way (five words)');
    const executor = String(s.headers['x-viiwork-node']);
    await kill(executor);
    await s.ended;
    assert.equal(s.error, undefined, 'the client read the stream to its end without an error');
    const failed = s.events.find((e) => e.type === 'error' || e.type === 'response.failed');
    // On failure, what the client got and what the entry said of the cut.
    const said = () => entry.logs().split('\n').filter((l) => l.includes('cut stream')).slice(-2).join('\n');
    assert.equal(failed, undefined, `the stream went on without an error: ${failed?.data}\n${said()}`);
    return { events: s.events, cutFrom: executor, headers: s.headers };
  }

  it('chat completions: one [DONE], the whole answer once, usage once and counted as if uncut', async () => {
    const ask = { model: 'm', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'tell me everything, chat' }] };
    // The same request uncut: its usage is what the client must see after a cut too.
    const uncut = await openStream(`${entry.url}/v1/chat/completions`, ask);
    await uncut.ended;
    const uncutUsage = jsonEvents(uncut.events).find((e) => e.json.usage)!.json.usage;
    assert.equal(chatText(uncut.events), FULL);

    const before = await continuations();
    const { events, cutFrom } = await cutMidAnswer('/v1/chat/completions', ask, chatContentEvents);
    assert.equal(chatText(events), FULL, 'no word repeated, none lost');
    assert.equal(events.filter((e) => e.data === '[DONE]').length, 1, 'one [DONE]');
    assert.equal(events.at(-1)!.data, '[DONE]', '[DONE] ends it');
    assert.ok(!events.some((e) => e.type === 'error'), 'no error event');
    const chunks = jsonEvents(events).map((e) => e.json);
    assert.equal(new Set(chunks.map((c) => c.id)).size, 1, 'one completion id throughout');
    assert.equal(chunks.filter((c) => c.choices?.[0]?.delta?.role !== undefined).length, 1, 'the role is said once');
    assert.equal(chunks.filter((c) => c.choices?.[0]?.finish_reason).length, 1, 'one finish');
    const usages = chunks.filter((c) => c.usage);
    assert.equal(usages.length, 1, 'one usage chunk');
    assert.equal(usages[0].usage.completion_tokens, OUTPUT, 'every word the client got counted as output, once');
    assert.equal(usages[0].usage.prompt_tokens, uncutUsage.prompt_tokens, 'the prompt counted as the uncut request counts it');
    assert.equal(await continuations(), before + 1);
    // The decision feed names the host the stream was cut from and the one that finished it.
    const feed = await getJson<{ data: { executor: string; continued_from?: string; continued_tokens?: number }[] }>(`${entry.url}/v1/decisions?since=0`);
    const d = feed.data.findLast((x) => x.continued_from !== undefined);
    assert.ok(d, 'the feed shows the continuation');
    assert.equal(d.continued_from, cutFrom);
    assert.notEqual(d.executor, cutFrom);
    assert.ok(d.continued_tokens! >= 5);
  });

  it('chat completions without usage asked: none appears after the cut either', async () => {
    const { events } = await cutMidAnswer('/v1/chat/completions', { model: 'm', stream: true, messages: [{ role: 'user', content: 'no usage please' }] }, chatContentEvents);
    assert.equal(chatText(events), FULL);
    assert.equal(events.filter((e) => e.data === '[DONE]').length, 1);
    assert.ok(!jsonEvents(events).some((e) => e.json.usage), 'no usage chunk: the client did not ask for one');
  });

  it('Anthropic Messages: one message, one text block with the whole answer, one message_stop', async () => {
    const textOf = (ev: ClientEvent[]) =>
      jsonEvents(ev)
        .filter((e) => e.type === 'content_block_delta')
        .map((e) => e.json.delta.text)
        .join('');
    const { events } = await cutMidAnswer('/v1/messages', { model: 'm', max_tokens: 1000, stream: true, messages: [{ role: 'user', content: 'tell me everything, messages' }] }, (ev) => jsonEvents(ev).filter((e) => e.type === 'content_block_delta').length);
    const types = events.map((e) => e.type).filter((t) => t !== 'ping');
    assert.equal(textOf(events), FULL);
    assert.equal(types.filter((t) => t === 'message_start').length, 1, 'one message_start');
    assert.equal(types.filter((t) => t === 'content_block_start').length, 1, 'one content block');
    assert.equal(types.filter((t) => t === 'content_block_stop').length, 1);
    assert.equal(types.filter((t) => t === 'message_stop').length, 1, 'one message_stop');
    assert.equal(types.at(-1), 'message_stop');
    assert.ok(!types.includes('error'));
    const evs = jsonEvents(events);
    assert.ok(evs.filter((e) => e.type?.startsWith('content_block')).every((e) => e.json.index === 0), 'every block event names block 0');
    const deltas = evs.filter((e) => e.type === 'message_delta');
    assert.equal(deltas.length, 1);
    assert.equal(deltas[0].json.usage.output_tokens, OUTPUT, 'output counted once');
    assert.equal(deltas[0].json.delta.stop_reason, 'end_turn');
  });

  it('Responses API: one response, its message item whole in response.completed, sequence numbers unbroken', async () => {
    const { events } = await cutMidAnswer('/v1/responses', { model: 'm', stream: true, input: 'tell me everything, responses' }, (ev) => jsonEvents(ev).filter((e) => e.type === 'response.output_text.delta').length);
    const evs = jsonEvents(events);
    assert.deepEqual(
      evs.map((e) => e.json.sequence_number),
      evs.map((_, i) => i),
      'sequence numbers from 0 up, none repeated or skipped',
    );
    const types = evs.map((e) => e.type);
    assert.equal(types.filter((t) => t === 'response.created').length, 1);
    assert.equal(types.filter((t) => t === 'response.output_item.added').length, 1, 'one output item');
    assert.equal(types.filter((t) => t === 'response.completed').length, 1);
    assert.equal(types.at(-1), 'response.completed');
    const created = evs.find((e) => e.type === 'response.created')!.json.response;
    const itemId = evs.find((e) => e.type === 'response.output_item.added')!.json.item.id;
    const deltas = evs.filter((e) => e.type === 'response.output_text.delta');
    assert.ok(deltas.every((e) => e.json.item_id === itemId && e.json.output_index === 0));
    assert.equal(deltas.map((e) => e.json.delta).join(''), FULL);
    assert.equal(evs.find((e) => e.type === 'response.output_text.done')!.json.text, FULL, 'the done event carries the whole text');
    const done = evs.find((e) => e.type === 'response.completed')!.json.response;
    assert.equal(done.id, created.id, 'the response the client was given at the start');
    assert.equal(done.output.length, 1);
    assert.equal(done.output[0].id, itemId);
    assert.equal(done.output[0].content[0].text, FULL);
    assert.equal(done.usage.output_tokens, OUTPUT);
  });

  it('a whole answer whose executor is killed before it answers is retried whole on another host', async () => {
    assert.ok((await liveExecutors()).length >= 2);
    const answer = postJson(`${entry.url}/v1/chat/completions`, { model: 'm', messages: [{ role: 'user', content: 'whole, please' }] });
    // The executor is the member whose slot is busy with it.
    const busy = await waitFor(
      async () => {
        for (const name of await liveExecutors()) {
          const n = nodes.find((x) => x.name === name)!;
          const report = await getJson(`${n.url}/v1/capacity`).catch(() => undefined);
          if (report?.models?.find((m: { name: string }) => m.name === 'm')?.busy >= 1) return name;
        }
        return undefined;
      },
      { timeoutMs: 10_000, what: 'the executor of the whole answer' },
    );
    await kill(busy);
    const r = await answer;
    assert.equal(r.status, 200, r.text);
    const doc = JSON.parse(r.text);
    assert.equal(doc.choices[0].message.content, FULL);
    assert.equal(doc.usage.completion_tokens, OUTPUT);
    assert.notEqual(r.headers['x-viiwork-node'], busy);
  });
});
