/** Issue 5, acceptance 8: a llama-server too old for a workload has it withdrawn, with a log line, before any request can reach it. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { request } from 'undici';
import { FAKE_LLAMA_SERVER } from '../fakes/fake-engine.ts';
import { waitFor } from '../fakes/wait.ts';
import { startNode } from '../helpers/node.ts';
import { abilitiesFromProps, gateDescriptor, workloadsFromArgs } from '../../src/workloads/gate.ts';
import { parseBuildNumber } from '../../src/engines/health.ts';

describe('version gate', () => {
  it('withdraws rerank from a llama-server older than b3800 before it is served, and says so', async () => {
    process.env.FAKE_BUILD = 'b3000-old';
    const t = await startNode({
      models: [{ name: 'rr', engine: 'llamacpp', path: '/models/rr.gguf', parallel: 1, workloads: ['rerank', 'embeddings'], llamacpp: { binary: FAKE_LLAMA_SERVER, args: ['--reranking'] } }],
    });
    try {
      await waitFor(() => t.node.backends[0].state === 'healthy', { timeoutMs: 20_000, what: 'llama-server healthy' });
      assert.deepEqual(t.node.backends[0].descriptor.workloads, ['embeddings']);
      assert.ok(t.logs.some((l) => /rerank withdrawn: llama\.cpp build b3000 is older than b3800/.test(l)), t.logs.join(''));
      const r = await request(`${t.url}/v1/rerank`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'rr', query: 'q', documents: ['a'] }) });
      const body = (await r.body.json()) as { error: { code: string; type: string } };
      assert.equal(r.statusCode, 400);
      assert.deepEqual([body.error.type, body.error.code], ['invalid_request_error', 'unsupported_workload']);
      const cap = (await (await request(`${t.url}/v1/capacity`)).body.json()) as { models: { targets: { workloads: string[] }[] }[] };
      assert.deepEqual(cap.models[0].targets.map((x) => x.workloads), [['embeddings']]);
    } finally {
      delete process.env.FAKE_BUILD;
      await t.stop();
    }
  });

  it('keeps rerank on today\'s llama.cpp built from a squashed source (build_info b1-de3ff81), and says it was not version-checked', async () => {
    process.env.FAKE_BUILD = 'b1-de3ff81';
    const t = await startNode({
      models: [{ name: 'rr', engine: 'llamacpp', path: '/models/rr.gguf', parallel: 1, workloads: ['rerank', 'embeddings'], llamacpp: { binary: FAKE_LLAMA_SERVER, args: ['--reranking'] } }],
    });
    try {
      await waitFor(() => t.node.backends[0].state === 'healthy', { timeoutMs: 20_000, what: 'llama-server healthy' });
      await waitFor(() => t.logs.some((l) => /rerank kept without a version check/.test(l)), { timeoutMs: 10_000, what: 'the log line on the unchecked build' });
      assert.deepEqual(t.node.backends[0].descriptor.workloads, ['rerank', 'embeddings']);
      const cap = (await (await request(`${t.url}/v1/capacity`)).body.json()) as { models: { targets: { workloads: string[] }[] }[] };
      assert.deepEqual(cap.models[0].targets.map((x) => x.workloads), [['rerank', 'embeddings']]);
    } finally {
      delete process.env.FAKE_BUILD;
      await t.stop();
    }
  });

  it('gate rules: config lists are only narrowed; the engine fills a list the config left out; audio needs b5400', () => {
    const logs: string[] = [];
    const log = (m: string) => logs.push(m);
    assert.deepEqual(gateDescriptor({ workloads: ['chat', 'rerank'], audio: false, explicit: true }, { buildNumber: 6000, audio: true }, log, 'b'), { workloads: ['chat', 'rerank'], audio: false });
    assert.deepEqual(gateDescriptor({ workloads: ['chat'], audio: false, explicit: false }, { buildNumber: 6000, audio: true }, log, 'b'), { workloads: ['chat'], audio: true });
    // An engine that does not say whether it takes audio: its build number decides.
    assert.deepEqual(gateDescriptor({ workloads: ['chat'], audio: true, explicit: true }, { buildNumber: 5000 }, log, 'b'), { workloads: ['chat'], audio: false });
    // One that reports an audio modality shows the ability: no build number outweighs that.
    assert.deepEqual(gateDescriptor({ workloads: ['chat'], audio: true, explicit: true }, { buildNumber: 5000, audio: true }, log, 'b'), { workloads: ['chat'], audio: true });
    assert.deepEqual(gateDescriptor({ workloads: ['chat'], audio: true, explicit: true }, { buildNumber: 6000, audio: false }, log, 'b'), { workloads: ['chat'], audio: false });
    assert.ok(logs.some((l) => /transcription withdrawn/.test(l)));
    assert.ok(logs.some((l) => /audio input withdrawn/.test(l)));
    // A squashed or git-less source ("b1-de3ff81", "b0-…", "unknown") is an unknown build, not an old one: kept, and the log says it was not checked.
    logs.length = 0;
    for (const buildInfo of ['b1-de3ff81', 'b0-abc1234', 'unknown']) {
      assert.deepEqual(gateDescriptor({ workloads: ['rerank', 'transcription'], audio: false, explicit: true }, abilitiesFromProps({ build_info: buildInfo }, parseBuildNumber(buildInfo)), log, 'b'), { workloads: ['rerank', 'transcription'], audio: false });
    }
    assert.equal(logs.filter((l) => /rerank kept without a version check: build_info "b1-de3ff81"/.test(l)).length, 1, logs.join('\n'));
    assert.ok(!logs.some((l) => /withdrawn/.test(l)), logs.join('\n'));
    assert.deepEqual(workloadsFromArgs(['--embeddings']), ['embeddings']);
    assert.deepEqual(workloadsFromArgs(['--reranking']), ['rerank']);
    assert.deepEqual(workloadsFromArgs([]), ['chat', 'completion']);
  });
});
