import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  TailnetFeeder,
  onlinePeerAddresses,
  readTailnetStatus,
  tailnetSelfAddress,
  tailscaledAnswers,
  type TailnetStatus,
} from '../../src/mesh/discovery/tailnet.ts';

const status: TailnetStatus & Record<string, unknown> = {
  Version: '1.80.0',
  BackendState: 'Running',
  Self: { HostName: 'me', DNSName: 'me.tail0.ts.net.', TailscaleIPs: ['100.64.0.1', 'fd7a:115c:a1e0::1'], Online: true },
  Peer: {
    'nodekey:a': { HostName: 'gpu1', TailscaleIPs: ['100.64.0.2', 'fd7a:115c:a1e0::2'], Online: true },
    'nodekey:b': { HostName: 'gpu2', TailscaleIPs: ['fd7a:115c:a1e0::3', '100.64.0.3'], Online: true },
    'nodekey:c': { HostName: 'laptop', TailscaleIPs: ['100.64.0.4'], Online: false },
    'nodekey:d': { HostName: 'v6only', TailscaleIPs: ['fd7a:115c:a1e0::5'], Online: true },
    'nodekey:e': { HostName: 'noips', TailscaleIPs: null, Online: true },
    'nodekey:f': { HostName: 'noonline', TailscaleIPs: ['100.64.0.6'] },
  },
};

interface Seen {
  method?: string;
  url?: string;
  headers: http.IncomingHttpHeaders;
}

describe('tailnet discovery', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vw-tailnet-'));
  const socketPath = path.join(dir, 'tailscaled.sock');
  const seen: Seen[] = [];
  let answer: (res: http.ServerResponse) => void = (res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify(status));
  };
  const server = http.createServer((req, res) => {
    seen.push({ method: req.method, url: req.url, headers: req.headers });
    if (req.headers.origin || req.headers.referer) {
      res.statusCode = 403;
      res.end('origin not allowed');
      return;
    }
    if (req.url !== '/localapi/v0/status' || req.headers.host !== 'local-tailscaled.sock') {
      res.statusCode = 404;
      res.end();
      return;
    }
    answer(res);
  });

  before(async () => {
    await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('only online peers with an IPv4 address are proposed, at the mesh port', async () => {
    const logs: string[] = [];
    const feeder = new TailnetFeeder({ socketPath, port: 7946, log: (m) => logs.push(m) });
    try {
      assert.deepEqual(await feeder.candidates(), ['100.64.0.2:7946', '100.64.0.3:7946']);
    } finally {
      await feeder.close();
    }
    assert.deepEqual(logs, []);
  });

  test('the request carries Host local-tailscaled.sock, Sec-Tailscale and no Origin or Referer', async () => {
    seen.length = 0;
    assert.equal(await tailscaledAnswers(socketPath, 1000), true);
    assert.equal(seen.length, 1);
    const req = seen[0];
    assert.equal(req.method, 'GET');
    assert.equal(req.url, '/localapi/v0/status');
    assert.equal(req.headers.host, 'local-tailscaled.sock');
    assert.equal(req.headers['sec-tailscale'], 'localapi');
    assert.equal(req.headers.origin, undefined);
    assert.equal(req.headers.referer, undefined);
  });

  test("this node's advertise address is Self's first IPv4", async () => {
    assert.equal(await tailnetSelfAddress(socketPath, 1000), '100.64.0.1');
  });

  test('this node is never proposed, even when listed as a peer', () => {
    const withSelf: TailnetStatus = { ...status, Peer: { x: { TailscaleIPs: ['100.64.0.1'], Online: true } } };
    assert.deepEqual(onlinePeerAddresses(withSelf, 7946), []);
    assert.deepEqual(onlinePeerAddresses({ Peer: null }, 7946), []);
  });

  test('an error answer gives no candidates and is logged once per change', async () => {
    const logs: string[] = [];
    const feeder = new TailnetFeeder({ socketPath, port: 7946, log: (m) => logs.push(m) });
    try {
      answer = (res) => {
        res.statusCode = 500;
        res.end('boom');
      };
      assert.deepEqual(await feeder.candidates(), []);
      assert.deepEqual(await feeder.candidates(), []);
      answer = (res) => res.end('not json');
      assert.deepEqual(await feeder.candidates(), []);
      answer = (res) => res.end(JSON.stringify(status));
      assert.equal((await feeder.candidates()).length, 2);
      assert.equal((await feeder.candidates()).length, 2);
    } finally {
      await feeder.close();
    }
    assert.equal(logs.length, 3, logs.join('\n'));
    assert.match(logs[0], /answered 500/);
    assert.match(logs[1], /unreadable status/);
    assert.match(logs[2], /answers again/);
  });

  test('a tailscaled that hangs times out quickly', async () => {
    answer = () => {}; // never answers
    const t0 = Date.now();
    const feeder = new TailnetFeeder({ socketPath, port: 7946, timeoutMs: 300 });
    try {
      assert.deepEqual(await feeder.candidates(), []);
    } finally {
      await feeder.close();
      answer = (res) => res.end(JSON.stringify(status));
    }
    assert.ok(Date.now() - t0 < 2000);
  });

  test('an unreachable socket gives no candidates and tailscaledAnswers false', async () => {
    const missing = path.join(dir, 'missing.sock');
    const logs: string[] = [];
    const feeder = new TailnetFeeder({ socketPath: missing, port: 7946, log: (m) => logs.push(m) });
    try {
      assert.deepEqual(await feeder.candidates(), []);
      assert.deepEqual(await feeder.candidates(), []);
    } finally {
      await feeder.close();
    }
    assert.equal(logs.length, 1);
    assert.match(logs[0], /does not answer/);
    assert.equal(await tailscaledAnswers(missing, 500), false);
    assert.equal(await tailnetSelfAddress(missing, 500), undefined);
    assert.equal(await readTailnetStatus(missing, 500), undefined);
  });
});
