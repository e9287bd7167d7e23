/**
 * Issue 45: the lend book's rules with a fake process and clock (the real
 * ggml-rpc-server is in lend.test.ts): bytes reserved from the ask, so two
 * asks at once never oversell the budget; a lend released while its
 * process starts never leaves one running; a process that ends frees its
 * lend; a lease not renewed ends it; only its member renews or releases it.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LendBook, type LendProcess } from '../../src/split/lends.ts';

const MIB = 1024 * 1024;

function fakes(budget: number) {
  let now = 0;
  const started: { id: string; stopped: boolean; exit(why: string): void; go(): void }[] = [];
  const book: LendBook = new LendBook({
    enabled: true,
    free: () => budget - book.lentBytes(),
    now: () => now,
    log: () => {},
    leaseMs: 10_000,
    start: (id) =>
      new Promise<LendProcess>((resolve) => {
        const exits: ((why: string) => void)[] = [];
        const rec = { id, stopped: false, exit: (why: string) => exits.forEach((f) => f(why)), go: () => resolve(proc) };
        const proc: LendProcess = { port: 40000 + started.length, onExit: (f) => exits.push(f), stop: async () => void (rec.stopped = true) };
        started.push(rec);
      }),
  });
  return { book, started, tick: (ms: number) => (now += ms) };
}

describe('the lend book', () => {
  it('reserves from the ask: two asks at once never take the same room', async () => {
    const { book, started } = fakes(100 * MIB);
    const a = book.lend('r1', 'big', 60 * MIB);
    const b = book.lend('r2', 'big', 60 * MIB);
    assert.deepEqual(await b, { kind: 'no-room', need: 60 * MIB, free: 40 * MIB });
    started[0].go();
    const got = await a;
    assert.equal(got.kind, 'lent');
    assert.equal(book.lentBytes(), 60 * MIB);
    assert.equal(started.length, 1, 'the refused ask started nothing');
  });

  it('a lend released while its process starts stops that process and frees its bytes', async () => {
    const { book, started } = fakes(100 * MIB);
    const asked = book.lend('r1', 'big', 10 * MIB);
    const id = book.list()[0].id;
    assert.equal(book.list()[0].state, 'starting');
    assert.equal(await book.release(id, 'r1'), true);
    started[0].go();
    assert.equal((await asked).kind, 'failed');
    assert.equal(started[0].stopped, true);
    assert.equal(book.lentBytes(), 0);
  });

  it('a process that ends frees its lend; the port is gone with it', async () => {
    const { book, started } = fakes(100 * MIB);
    const asked = book.lend('r1', 'big', 10 * MIB);
    started[0].go();
    const got = await asked;
    assert.equal(got.kind, 'lent');
    const id = got.kind === 'lent' ? got.id : '';
    assert.equal(book.lendPort(id, 'r1'), 40000);
    assert.equal(book.lendPort(id, 'r2'), undefined, "another member knowing the id reaches nothing");
    started[0].exit('exited with code 1');
    await new Promise((r) => setImmediate(r));
    assert.equal(book.lendPort(id, 'r1'), undefined);
    assert.equal(book.lentBytes(), 0);
  });

  it('a lease not renewed ends; a renewed one lives; only its member renews or releases it', async () => {
    const { book, started, tick } = fakes(100 * MIB);
    const asked = book.lend('r1', 'big', 10 * MIB);
    started[0].go();
    const got = await asked;
    const id = got.kind === 'lent' ? got.id : '';
    assert.equal(book.renew(id, 'r2'), false, 'another member cannot renew it');
    assert.equal(await book.release(id, 'r2'), false, 'nor release it');
    tick(9000);
    assert.equal(book.renew(id, 'r1'), true);
    tick(9000);
    book.sweep();
    assert.equal(book.lentBytes(), 10 * MIB, 'renewed in time');
    tick(1001);
    book.sweep();
    await new Promise((r) => setImmediate(r));
    assert.equal(book.lentBytes(), 0, 'not renewed for a lease');
    assert.equal(started[0].stopped, true);
    assert.equal(book.renew(id, 'r1'), false);
  });

  it('everything lent to a member that left comes back; a book that is off lends nothing', async () => {
    const { book, started } = fakes(100 * MIB);
    const a = book.lend('r1', 'big', 10 * MIB);
    const b = book.lend('r2', 'big', 10 * MIB);
    started.forEach((s) => s.go());
    await Promise.all([a, b]);
    book.memberGone('r1', 'left the mesh');
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(book.list().map((l) => l.to), ['r2']);
    const off = new LendBook({ enabled: false, free: () => 1e12, now: () => 0, log: () => {}, start: () => Promise.reject(new Error('never')) });
    assert.deepEqual(await off.lend('r1', 'big', MIB), { kind: 'off' });
  });
});
