/**
 * A fake mesh member: a real memberlist member (our implementation, over
 * real sockets) with viiwork metadata, and an HTTP server that answers
 * /v1/capacity with whatever report the test gives it (an older node
 * without `targets`, a newer one with workloads we do not know) and counts
 * the inference requests it receives. The node under test is real; only
 * this peer is made up.
 */
import http from 'node:http';
import { Memberlist } from '../../src/mesh/memberlist/memberlist.ts';

export interface FakePeer {
  name: string;
  received: Record<string, number>;
  setReport(models: unknown[]): void;
  close(): Promise<void>;
}

export async function startFakePeer(opts: { name: string; ip: string; seed: string; models: unknown[]; ver?: string }): Promise<FakePeer> {
  let models = opts.models;
  const received: Record<string, number> = {};
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/v1/capacity') {
      res.writeHead(200, { 'content-type': 'application/json' });
      return void res.end(JSON.stringify({ node: opts.name, ver: opts.ver ?? '0.3.0', at: Date.now(), models }));
    }
    received[path] = (received[path] ?? 0) + 1;
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: `from ${opts.name}` } }] }));
    });
  });
  await new Promise<void>((r) => server.listen(8086, opts.ip, () => r()));
  const ml = await Memberlist.create(
    { name: opts.name, bindAddr: opts.ip, port: 7946, label: 'viiwork-v2' },
    { nodeMeta: () => Buffer.from(JSON.stringify({ v: 2, api: 8086, ver: opts.ver ?? '0.3.0', role: 'node' })) },
  );
  await ml.join([opts.seed]);
  return {
    name: opts.name,
    received,
    setReport: (m) => (models = m),
    async close() {
      await ml.leave(1000).catch(() => {});
      await ml.shutdown();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
