/**
 * SPEC 13, "A cut stream goes on", on the real llama-server: the entry runs
 * a stream on its own engine, the engine is SIGKILLed mid-answer, and the
 * answer goes on from the other member's llama-server, which continues the
 * final assistant message (`--prefill-assistant`, on by default) and, as
 * today's build does, streams that message back before what it adds. The
 * client's text is the answer so far, then exactly what that engine
 * continues with (its echo dropped, nothing repeated); its usage, once, is
 * the continuation's with the answer so far counted as output.
 *
 * The model is the project's GGUF writer at a size that generates a few
 * dozen tokens a second on one thread, so the kill lands mid-answer. Skips
 * with a message when the engine is absent (test/helpers/engine.ts).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { waitFor } from '../fakes/wait.ts';
import { writeTinyGguf } from '../fakes/tiny-gguf.ts';
import { realLlamaServer } from '../helpers/engine.ts';
import { getJson, startMeshNode, stopAll, waitConverged, waitModelOn, type MeshNode } from '../helpers/mesh.ts';
import { tempDir } from '../helpers/node.ts';
import { chatContentEvents, jsonEvents, openStream, type ClientEvent } from './stream-reader.ts';

const { binary: BINARY, skip: absent } = realLlamaServer();
const IP = (n: number) => `127.0.191.${n}`;
const MAX = 300;

/** The llama-server a node process started (its child). */
function engineOf(node: MeshNode): number {
  const pid = node.proc.pid!;
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    for (const child of fs.readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean)) {
      if (fs.readFileSync(`/proc/${child}/cmdline`, 'utf8').includes('llama-server')) return Number(child);
    }
  }
  throw new Error(`no llama-server under ${node.name}`);
}

const contentOf = (events: ClientEvent[]) => jsonEvents(events).map((e) => e.json.choices?.[0]?.delta?.content ?? '');

describe('a stream whose local llama-server is killed mid-answer goes on from another member', { skip: absent }, () => {
  const nodes: MeshNode[] = [];
  let a: MeshNode;
  let b: MeshNode;

  before(async () => {
    const file = writeTinyGguf(path.join(tempDir('viiwork-cut-llama-'), 'mid.gguf'), { nEmbd: 512, nLayers: 8, nHeads: 8, nFf: 2048, contextLength: 2048 });
    const model = { name: 'mid', engine: 'llamacpp', path: file, parallel: 1, context: 2048, llamacpp: { binary: BINARY, args: ['--threads', '1'] } };
    a = await startMeshNode({ name: 'a', ip: IP(1), models: [model] });
    nodes.push(a);
    b = await startMeshNode({ name: 'b', ip: IP(2), models: [model], seeds: [a.gossip] });
    nodes.push(b);
    await waitConverged(nodes, 60_000);
    await waitModelOn(a, 'mid', ['a', 'b'], 120_000);
  });
  after(() => stopAll(nodes));

  // A prompt the model answers at length, greedily (temperature 0), without stopping early.
  it('the client reads one stream: the answer so far, then what the other engine continues with, usage once', async () => {
    const messages = [{ role: 'user', content: 'Tell me a long story about the mesh.' }];
    // Run on the entry's own engine (preferred while it has a free slot).
    const s = await openStream(`${a.url}/v1/chat/completions`, { model: 'mid', stream: true, stream_options: { include_usage: true }, temperature: 0, max_tokens: MAX, messages }, { 'x-viiwork-prefer': 'a' });
    assert.equal(s.status, 200);
    await s.until((ev) => chatContentEvents(ev) >= 3, 'the answer under way', 120_000);
    assert.equal(s.headers['x-viiwork-node'], 'a', 'it ran on the entry');
    process.kill(engineOf(a), 'SIGKILL');
    await s.ended;
    assert.equal(s.error, undefined);

    const events = s.events;
    assert.ok(!events.some((e) => e.type === 'error'), `no error event: ${events.find((e) => e.type === 'error')?.data}`);
    assert.equal(events.filter((e) => e.data === '[DONE]').length, 1, 'one [DONE]');
    assert.equal(events.at(-1)!.data, '[DONE]');
    const chunks = jsonEvents(events).map((e) => e.json);
    assert.equal(new Set(chunks.map((c) => c.id)).size, 1, 'one completion id');
    assert.equal(chunks.filter((c) => c.choices?.[0]?.delta?.role !== undefined).length, 1, 'the role once');
    assert.equal(chunks.filter((c) => c.choices?.[0]?.finish_reason).length, 1, 'one finish');
    const usages = chunks.filter((c) => c.usage);
    assert.equal(usages.length, 1, 'one usage chunk');

    // Where it went on, and with how much of the answer.
    const feed = await getJson<{ data: { executor: string; continued_from?: string; continued_tokens?: number }[] }>(`${a.url}/v1/decisions?since=0`);
    const d = feed.data.findLast((x) => x.continued_from !== undefined);
    assert.ok(d, 'the feed shows the continuation');
    assert.equal(d.continued_from, 'a');
    assert.equal(d.executor, 'b');
    const k = d.continued_tokens!;
    assert.ok(k >= 3);

    // The same continuation asked of b's engine directly (greedy, evaluated cold as the continuation was): the client
    // got the answer so far, then exactly that, once.
    const contents = contentOf(events).filter((c) => c !== '');
    const sofar = contents.slice(0, k).join('');
    const direct = await openStream(`${b.url}/v1/chat/completions?host=b`, { model: 'mid', stream: true, stream_options: { include_usage: true }, temperature: 0, cache_prompt: false, max_tokens: MAX - k, messages: [...messages, { role: 'assistant', content: sofar }] });
    await direct.ended;
    assert.equal(direct.status, 200, `${direct.error}: ${JSON.stringify(sofar)}; b's log ends: ${b.logs().split('\n').slice(-40).join('\n')}`);
    const directText = contentOf(direct.events).join('');
    const went = directText.startsWith(sofar) ? directText.slice(sofar.length) : directText;
    assert.equal(contents.join(''), sofar + went, `the answer so far, then the continuation: nothing repeated, nothing lost (k ${k}; asked directly: ${JSON.stringify(direct.events.slice(0, 4))})`);
    assert.ok(went.length > 0, 'the answer went on');
    const directUsage = jsonEvents(direct.events).find((e) => e.json.usage)!.json.usage;
    assert.equal(usages[0].usage.completion_tokens, directUsage.completion_tokens + k, 'output: what was streamed before the cut and after it');
    assert.equal(usages[0].usage.prompt_tokens, directUsage.prompt_tokens - k, 'the prompt without the answer it carried');
  });

  it("Messages, forwarded: the executor's engine killed mid-answer, the entry's own engine continues it (one message, one block)", async () => {
    // a's engine was killed above; its node starts it again.
    await waitFor(async () => (await getJson(`${a.url}/v1/capacity`)).models.find((m: { name: string }) => m.name === 'mid')?.healthy_backends === 1, { timeoutMs: 120_000, what: "a's engine back" });
    await waitModelOn(a, 'mid', ['a', 'b'], 60_000);
    // b's slot seen free from a, so the preference for b places it there.
    await waitFor(
      async () => (await getJson(`${a.url}/v1/fleet/capacity`)).models.find((m: { name: string }) => m.name === 'mid')?.hosts.find((h: { node: string }) => h.node === 'b')?.free === 1,
      { timeoutMs: 30_000, what: "b's slot free as a sees it" },
    );
    const texts = (ev: ClientEvent[]) =>
      jsonEvents(ev)
        .filter((e) => e.type === 'content_block_delta')
        .map((e) => e.json.delta.text as string);
    const s = await openStream(`${a.url}/v1/messages`, { model: 'mid', stream: true, temperature: 0, max_tokens: MAX, messages: [{ role: 'user', content: 'Tell me a long story about the mesh.' }] }, { 'x-viiwork-prefer': 'b' });
    assert.equal(s.status, 200);
    await s.until((ev) => texts(ev).length >= 3, 'the answer under way', 120_000);
    assert.equal(s.headers['x-viiwork-node'], 'b', 'it ran on the member');
    process.kill(engineOf(b), 'SIGKILL');
    await s.ended;
    assert.equal(s.error, undefined);
    const types = s.events.map((e) => e.type).filter((t) => t !== 'ping');
    assert.ok(!types.includes('error'), `no error event: ${s.events.find((e) => e.type === 'error')?.data}`);
    assert.equal(types.filter((t) => t === 'message_start').length, 1);
    assert.equal(types.filter((t) => t === 'content_block_start').length, 1, 'one text block');
    assert.equal(types.filter((t) => t === 'message_stop').length, 1);
    assert.equal(types.at(-1), 'message_stop');
    const feed = await getJson<{ data: { executor: string; continued_from?: string; continued_tokens?: number }[] }>(`${a.url}/v1/decisions?since=0`);
    const d = feed.data.findLast((x) => x.continued_from !== undefined)!;
    assert.equal(d.continued_from, 'b');
    assert.equal(d.executor, 'a', 'continued on the entry’s own engine');
    const k = d.continued_tokens!;
    const all = texts(s.events).filter((t) => t !== '');
    const sofar = all.slice(0, k).join('');
    const rest = all.slice(k).join('');
    assert.ok(rest.length > 0, 'the answer went on');
    // llama-server's echo of the answer so far is not passed on: what follows it is new text.
    assert.ok(!rest.startsWith(sofar), 'the answer so far is not repeated');
    const usage = jsonEvents(s.events).find((e) => e.type === 'message_delta')!.json.usage;
    assert.ok(usage.output_tokens >= all.length, 'output counts every event of text the client got, once');
  });
});
