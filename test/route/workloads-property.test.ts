/**
 * Issue 5, acceptance 6: for random meshes and every permutation of member
 * order, report order and descriptor order, the eligible set for each
 * (model, workload) and the /v1/models listing are identical.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { seeded, shuffle } from '../helpers/random.ts';
import { modelsListing } from '../../src/api/fleet.ts';
import { candidates, forwardsIn } from '../../src/route/eligibility.ts';
import type { HostModelView, HostView, TargetView } from '../../src/route/types.ts';
import { KNOWN_WORKLOADS } from '../../src/workloads/workloads.ts';



const WORKLOAD_POOL = [...KNOWN_WORKLOADS, 'vision', 'tts-v2'];

function randomMesh(rnd: () => number): HostView[] {
  const hosts: HostView[] = [];
  const n = 1 + Math.floor(rnd() * 5);
  for (let h = 0; h < n; h++) {
    const models = new Map<string, HostModelView>();
    for (const model of ['m1', 'm2', 'm3']) {
      if (rnd() < 0.4) continue;
      const legacy = rnd() < 0.15;
      const targets: TargetView[] = [];
      const nt = 1 + Math.floor(rnd() * 3);
      for (let t = 0; t < nt; t++) {
        const workloads = WORKLOAD_POOL.filter(() => rnd() < 0.3);
        targets.push({ descriptor: { workloads: workloads.length ? workloads : ['chat'], audio: rnd() < 0.3 }, slots: Math.floor(rnd() * 4), busy: Math.floor(rnd() * 3) });
      }
      models.set(model, { targets: legacy ? undefined : targets, slots: 4, busy: 1, ctx: 4096 * (1 + Math.floor(rnd() * 2)) });
    }
    hosts.push({ name: `h${h}`, local: h === 0, rttMs: 1, fresh: rnd() < 0.8, polledAt: 1000, models });
  }
  return hosts;
}

/** The same mesh with members, models (report order) and targets (descriptor order) shuffled. */
function permute(hosts: HostView[], rnd: () => number): HostView[] {
  return shuffle(hosts, rnd).map((h) => ({
    ...h,
    models: new Map(
      shuffle([...h.models], rnd).map(([name, m]) => [name, { ...m, targets: m.targets ? shuffle(m.targets, rnd).map((t) => ({ ...t, descriptor: { ...t.descriptor, workloads: shuffle(t.descriptor.workloads, rnd) } })) : undefined }]),
    ),
  }));
}

function eligibleSets(hosts: HostView[]): string {
  const out: Record<string, unknown> = {};
  for (const model of ['m1', 'm2', 'm3']) for (const w of WORKLOAD_POOL) out[`${model}/${w}`] = candidates({ hosts, forwards: forwardsIn([]), marks: [] }, model, w);
  return JSON.stringify(out);
}

describe('eligibility and /v1/models do not depend on arrival order', () => {
  it('holds for 300 random meshes, each under 10 permutations', () => {
    const rnd = seeded(42);
    for (let i = 0; i < 300; i++) {
      const mesh = randomMesh(rnd);
      const eligible = eligibleSets(mesh);
      const listing = JSON.stringify(modelsListing(mesh, [{ name: 'alias1', target: 'm2', fallbacks: ['m1'] }]));
      for (let p = 0; p < 10; p++) {
        const other = permute(mesh, rnd);
        assert.equal(eligibleSets(other), eligible, `mesh ${i} permutation ${p}`);
        assert.equal(JSON.stringify(modelsListing(other, [{ name: 'alias1', target: 'm2', fallbacks: ['m1'] }])), listing, `mesh ${i} permutation ${p}`);
      }
    }
  });

  it('never makes a target eligible for a workload we do not know, and gives older nodes chat and completion only', () => {
    const hosts: HostView[] = [
      { name: 'future', local: false, rttMs: 0, fresh: true, polledAt: 0, models: new Map([['m', { targets: [{ descriptor: { workloads: ['vision'], audio: false }, slots: 2, busy: 0 }], slots: 2, busy: 0 }]]) },
      { name: 'old', local: false, rttMs: 0, fresh: true, polledAt: 0, models: new Map([['m', { targets: undefined, slots: 2, busy: 0 }]]) },
    ];
    assert.deepEqual(candidates({ hosts, forwards: forwardsIn([]), marks: [] }, 'm', 'vision'), []);
    for (const w of ['chat', 'completion']) assert.deepEqual(candidates({ hosts, forwards: forwardsIn([]), marks: [] }, 'm', w).map((c) => c.host), ['old']);
    for (const w of ['embeddings', 'rerank', 'speech', 'transcription']) assert.deepEqual(candidates({ hosts, forwards: forwardsIn([]), marks: [] }, 'm', w), []);
  });

  it('an audio flag from one descriptor never combines with a workload of another', () => {
    const hosts: HostView[] = [
      {
        name: 'x',
        local: false,
        rttMs: 0,
        fresh: true,
        polledAt: 0,
        models: new Map([
          [
            'v',
            {
              targets: [
                { descriptor: { workloads: ['chat'], audio: false }, slots: 1, busy: 0 },
                { descriptor: { workloads: ['embeddings'], audio: true }, slots: 1, busy: 0 },
              ],
              slots: 2,
              busy: 0,
            },
          ],
        ]),
      },
    ];
    assert.deepEqual(candidates({ hosts, forwards: forwardsIn([]), marks: [] }, 'v', 'transcription'), []);
  });
});
