import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { chooseLoadHost, loadHosts, onDemandWorkload, placementKey, rankLoadHosts, type LoadHost } from '../../src/route/placement.ts';
import { rendezvousRank } from '../../src/hashing/rendezvous.ts';
import { planRoom } from '../../src/lifecycle/lifecycle.ts';
import type { HostModelView, HostView, TargetView } from '../../src/route/types.ts';

const G = 1024 ** 3;
const host = (name: string, free: number, idle = 0, need = 4 * G): LoadHost => ({ host: name, need, free, idle });

describe('placement: which host loads a model (SPEC section 11)', () => {
  const table: { name: string; hosts: LoadHost[]; refused?: string[]; want: string | undefined; fits?: 'free' | 'unload' }[] = [
    { name: 'the only host that fits in free memory', hosts: [host('a', 2 * G), host('b', 8 * G), host('c', 1 * G, 2 * G)], want: 'b', fits: 'free' },
    { name: 'fits in free memory beats fits after unloading, whatever the ranking', hosts: [host('a', 0, 16 * G), host('b', 5 * G), host('c', 0, 16 * G)], want: 'b', fits: 'free' },
    { name: 'none fits free: the host where it fits after unloading idle models', hosts: [host('a', 1 * G, 1 * G), host('b', 2 * G, 3 * G)], want: 'b', fits: 'unload' },
    { name: 'none fits even after unloading every idle model: none', hosts: [host('a', 1 * G, 1 * G), host('b', 2 * G, 1 * G)], want: undefined },
    { name: 'a refusal moves to the next host', hosts: [host('b', 8 * G)], refused: ['b'], want: undefined },
    { name: 'exactly the need fits', hosts: [host('a', 4 * G)], want: 'a', fits: 'free' },
    // SPEC section 11, model files travel: a host that has the file before one that must fetch it, within each group.
    ...['a', 'b', 'c'].map((owner) => ({
      name: `a host with the file (${owner}) before hosts that must fetch it, whatever the rendezvous`,
      hosts: ['a', 'b', 'c'].map((n) => ({ ...host(n, 8 * G), hasFile: n === owner })),
      want: owner,
      fits: 'free' as const,
    })),
    { name: 'fitting in free memory still beats having the file', hosts: [{ ...host('a', 0, 16 * G), hasFile: true }, { ...host('b', 8 * G), hasFile: false }], want: 'b', fits: 'free' },
  ];
  for (const t of table)
    it(t.name, () => {
      const c = chooseLoadHost('m', t.hosts, t.refused);
      assert.equal(c?.host, t.want);
      if (t.fits) assert.equal(c?.fits, t.fits);
    });

  it('each group is ranked by rendezvous of (model, host): every entry node picks the same, whatever order it lists hosts in', () => {
    const hosts = ['n1', 'n2', 'n3', 'n4', 'n5'].map((n) => host(n, 8 * G));
    for (const model of ['qwen', 'llama', 'phi', 'mistral']) {
      const expected = rendezvousRank(placementKey(model), hosts.map((h) => h.host));
      assert.deepEqual(rankLoadHosts(model, hosts).map((c) => c.host), expected);
      assert.deepEqual(rankLoadHosts(model, [...hosts].reverse()).map((c) => c.host), expected);
      // The first choice refusing moves every entry node to the same second one.
      assert.equal(chooseLoadHost(model, hosts, [expected[0]])?.host, expected[1]);
    }
    // Different models spread over the hosts.
    const firsts = new Set(['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'].map((m) => chooseLoadHost(m, hosts)!.host));
    assert.ok(firsts.size >= 3, [...firsts].join(','));
  });
});

function target(t: Partial<TargetView>): TargetView {
  return { descriptor: { workloads: ['chat', 'completion'], audio: false }, slots: 0, busy: 0, ...t };
}
function view(name: string, models: Record<string, { targets: TargetView[]; queued?: number }>, memory?: HostView['memory'], fresh = true): HostView {
  const m = new Map<string, HostModelView>();
  for (const [k, v] of Object.entries(models)) m.set(k, { targets: v.targets, slots: 0, busy: 0, queued: v.queued });
  return { name, local: false, rttMs: 1, fresh, polledAt: 0, models: m, memory };
}

describe('placement inputs from the capacity reports', () => {
  const od = (state: TargetView['state'], memory: number, extra: Partial<TargetView> = {}) => target({ onDemand: true, state, memory, ...extra });
  it('idle = on-demand loaded with nothing running or queued; always and busy models never count', () => {
    const hosts = [
      view('a', { m: { targets: [od('unloaded', 4 * G)] }, idle1: { targets: [od('loaded', 3 * G, { slots: 2 })] }, busy: { targets: [od('loaded', 5 * G, { slots: 2, busy: 1 })] } }, { budget: 12 * G, used: 8 * G, free: 4 * G }),
      view('b', { m: { targets: [od('unloaded', 4 * G)] }, queued: { targets: [od('loaded', 3 * G, { slots: 2 })], queued: 2 }, pinned: { targets: [target({ state: 'loaded', memory: 6 * G, slots: 2 })] } }, { budget: 10 * G, used: 9 * G, free: 1 * G }),
      view('c', { m: { targets: [od('loaded', 4 * G, { slots: 2 })] } }, { budget: 10 * G, used: 4 * G, free: 6 * G }),
      view('d', { m: { targets: [od('unloaded', 4 * G)] } }, { budget: 10 * G, used: 0, free: 10 * G }, false),
      view('e', { m: { targets: [target({ slots: 2 })] } }, { budget: 10 * G, used: 0, free: 10 * G }),
    ];
    const lh = loadHosts(hosts, 'm', 'chat');
    assert.deepEqual(lh, [
      { host: 'a', need: 4 * G, free: 4 * G, idle: 3 * G },
      { host: 'b', need: 4 * G, free: 1 * G, idle: 0 },
    ]);
    // b cannot fit even after unloading (its idle-looking model has requests queued, the other is always).
    assert.equal(chooseLoadHost('m', lh)?.host, 'a');
    assert.equal(loadHosts(hosts, 'm', 'embeddings').length, 0, 'a target that does not do the workload is not loaded for it');
  });
});

describe('making room on a host: least recently used idle models first', () => {
  const idle = [
    { id: 1, bytes: 2 * G, idleSince: 300 },
    { id: 2, bytes: 2 * G, idleSince: 100 },
    { id: 3, bytes: 4 * G, idleSince: 200 },
  ];
  const table: { name: string; budget: number; reserved: number; need: number; want: number[] | undefined }[] = [
    { name: 'fits in free memory: nothing unloaded', budget: 10 * G, reserved: 4 * G, need: 6 * G, want: [] },
    { name: 'the oldest idle model goes first', budget: 10 * G, reserved: 8 * G, need: 4 * G, want: [2] },
    { name: 'then the next oldest, until it fits', budget: 10 * G, reserved: 8 * G, need: 5 * G, want: [2, 3] },
    { name: 'everything idle is not enough: refused', budget: 10 * G, reserved: 10 * G, need: 9 * G, want: undefined },
  ];
  for (const t of table) it(t.name, () => assert.deepEqual(planRoom(t.budget, t.reserved, t.need, idle), t.want));
});

describe('the workload an operator’s placement loads a model for', () => {
  const embed = { workloads: ['embeddings'], audio: false };
  it('the first on-demand target’s first workload, on any host', () => {
    const hosts = [view('a', { m: { targets: [target({})] } }), view('b', { m: { targets: [target({ onDemand: true, descriptor: embed })] } })];
    assert.equal(onDemandWorkload(hosts, 'm'), 'embeddings');
  });
  it('chat when no host has the model on demand', () => {
    assert.equal(onDemandWorkload([view('a', { m: { targets: [target({ descriptor: embed })] } })], 'm'), 'chat');
    assert.equal(onDemandWorkload([], 'm'), 'chat');
  });
});
