/** The /v1/aliases endpoints on a bare node:http server, and the "writes only from this machine" check. */
import assert from 'node:assert/strict';
import type os from 'node:os';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { isLocalAddress } from '../../src/api/aliases.ts';
import { AliasTable } from '../../src/aliases/table.ts';
import type { AliasEntry } from '../../src/aliases/types.ts';
import { serveAliases, type AliasServer } from './serve.ts';

async function call(base: string, method: string, path: string, body?: string) {
  const res = await request(`${base}${path}`, { method: method as 'GET', body, headers: body === undefined ? {} : { 'content-type': 'application/json' } });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, text, json: text.startsWith('{') ? JSON.parse(text) : undefined };
}

describe('alias endpoints', () => {
  const table = new AliasTable({ now: () => 1_764_441_600_000 });
  const written: AliasEntry[] = [];
  const reachedAsked: number[] = [];
  let server: AliasServer;
  before(async () => {
    server = await serveAliases({
      table,
      onChange: (e) => written.push(e),
      reached: (version) => (reachedAsked.push(version), { reached: 2, members: 3 }),
    });
  });
  after(() => server.close());

  it('PUT sets an alias and answers with its version and how many members reached it', async () => {
    const r = await call(server.url, 'PUT', '/v1/aliases/chat', JSON.stringify({ target: 'big', fallbacks: ['small'] }));
    assert.equal(r.status, 200);
    assert.equal(r.headers['content-type'], 'application/json');
    assert.deepEqual(r.json, { alias: 'chat', target: 'big', fallbacks: ['small'], version: 1, reached: 2, members: 3 });
    assert.deepEqual(reachedAsked, [1]);
    assert.deepEqual(written.map((e) => [e.name, e.version, e.writer]), [['chat', 1, 'n1']]);
    assert.equal(table.get('chat')?.target, 'big');
  });

  it('PUT without fallbacks, and a name with a slash sent URL-encoded', async () => {
    const r = await call(server.url, 'PUT', `/v1/aliases/${encodeURIComponent('team/coder')}`, JSON.stringify({ target: 'coder-7b' }));
    assert.equal(r.status, 200);
    assert.deepEqual([r.json.alias, r.json.fallbacks], ['team/coder', []]);
  });

  it('GET lists live aliases sorted, with the table version', async () => {
    const r = await call(server.url, 'GET', '/v1/aliases');
    assert.equal(r.status, 200);
    assert.equal(r.json.object, 'list');
    assert.equal(r.json.version, 2);
    assert.deepEqual(
      r.json.data.map((a: { alias: string; target: string; writer: string }) => [a.alias, a.target, a.writer]),
      [
        ['chat', 'big', 'n1'],
        ['team/coder', 'coder-7b', 'n1'],
      ],
    );
  });

  it('DELETE removes, then revert restores, and history shows every step', async () => {
    const rm = await call(server.url, 'DELETE', '/v1/aliases/chat');
    assert.equal(rm.status, 200);
    assert.deepEqual(rm.json, { alias: 'chat', deleted: true, version: 3, reached: 2, members: 3 });
    assert.equal((await call(server.url, 'GET', '/v1/aliases')).json.data.length, 1);

    const rv = await call(server.url, 'POST', '/v1/aliases/chat/revert');
    assert.equal(rv.status, 200);
    assert.deepEqual(rv.json, { alias: 'chat', target: 'big', fallbacks: ['small'], version: 4, reached: 2, members: 3, reverted: true });

    const h = await call(server.url, 'GET', '/v1/aliases/history?alias=chat');
    assert.equal(h.status, 200);
    assert.deepEqual(
      h.json.data.map((x: { action: string; target: string | null; version: number }) => [x.version, x.action, x.target]),
      [
        [1, 'set', 'big'],
        [3, 'rm', null],
        [4, 'set', 'big'],
      ],
    );
    assert.equal((await call(server.url, 'GET', '/v1/aliases/history')).json.data.length, 4);
  });

  it('answers bad bodies with 400 in the OpenAI error shape', async () => {
    const cases: [string, string][] = [
      ['{not json', 'invalid_json'],
      ['[1]', 'invalid_json'],
      ['{}', 'invalid_alias'],
      ['{"target": 5}', 'invalid_alias'],
      ['{"target": "m", "fallbacks": "x"}', 'invalid_alias'],
      ['{"target": "m", "fallback": ["x"]}', 'invalid_alias'],
      ['{"target": "has space"}', 'invalid_alias'],
    ];
    for (const [body, code] of cases) {
      const r = await call(server.url, 'PUT', '/v1/aliases/x', body);
      assert.equal(r.status, 400, body);
      assert.equal(r.headers['content-type'], 'application/json');
      assert.equal(r.json.error.type, 'invalid_request_error');
      assert.equal(r.json.error.code, code, body);
      assert.equal(typeof r.json.error.message, 'string');
    }
    const badName = await call(server.url, 'PUT', '/v1/aliases/bad%20name', '{"target":"m"}');
    assert.deepEqual([badName.status, badName.json.error.code], [400, 'invalid_alias']);
    assert.equal(table.get('x'), undefined);
  });

  it('404 for an unknown alias or path, 409 with nothing to revert, 405 with Allow for a wrong method', async () => {
    const rm = await call(server.url, 'DELETE', '/v1/aliases/never');
    assert.deepEqual([rm.status, rm.json.error.code], [404, 'alias_not_found']);
    await call(server.url, 'PUT', '/v1/aliases/once', '{"target":"m"}');
    const rv = await call(server.url, 'POST', '/v1/aliases/once/revert');
    assert.deepEqual([rv.status, rv.json.error.code], [409, 'nothing_to_revert']);
    const deep = await call(server.url, 'GET', '/v1/aliases/a/b/c');
    assert.deepEqual([deep.status, deep.json.error.code], [404, 'not_found']);
    const wrong = await call(server.url, 'POST', '/v1/aliases');
    assert.deepEqual([wrong.status, wrong.headers.allow], [405, 'GET']);
    const wrong2 = await call(server.url, 'GET', '/v1/aliases/chat/revert');
    assert.deepEqual([wrong2.status, wrong2.headers.allow], [405, 'POST']);
    const wrong3 = await call(server.url, 'POST', '/v1/aliases/chat');
    assert.deepEqual([wrong3.status, wrong3.headers.allow], [405, 'PUT, DELETE']);
  });

  it('leaves paths that are not alias paths to the rest of the API', async () => {
    for (const path of ['/v1/models', '/v1/aliasesx', '/']) {
      const r = await call(server.url, 'GET', path);
      assert.deepEqual([r.status, r.text], [404, 'not an alias path'], path);
    }
  });
});

describe('alias writes from another machine', () => {
  it('are refused with 403 before the table changes, while reads still work', async () => {
    const table = new AliasTable();
    table.set('keep', 'm', [], 'n1');
    const seen: (string | undefined)[] = [];
    const server = await serveAliases({ table, isLocal: (a) => (seen.push(a), false) });
    try {
      for (const [method, path, body] of [
        ['PUT', '/v1/aliases/x', '{"target":"m"}'],
        ['DELETE', '/v1/aliases/keep', undefined],
        ['POST', '/v1/aliases/keep/revert', undefined],
      ] as const) {
        const r = await call(server.url, method, path, body);
        assert.equal(r.status, 403, `${method} ${path}`);
        assert.deepEqual(r.json.error, {
          message: 'alias changes are accepted only from this machine; run the viiwork CLI on the node itself',
          type: 'permission_error',
          code: 'forbidden',
        });
      }
      assert.deepEqual(seen, ['127.0.0.1', '127.0.0.1', '127.0.0.1'], 'the check gets the socket’s remote address');
      assert.equal(table.version, 1);
      assert.equal((await call(server.url, 'GET', '/v1/aliases')).status, 200);
    } finally {
      await server.close();
    }
  });
});

describe('isLocalAddress', () => {
  const iface = (address: string, family: 'IPv4' | 'IPv6'): os.NetworkInterfaceInfo =>
    ({ address, family, netmask: '', mac: '00:00:00:00:00:00', internal: false, cidr: null, ...(family === 'IPv6' ? { scopeid: 0 } : {}) }) as os.NetworkInterfaceInfo;
  const interfaces = {
    lo: [iface('127.0.0.1', 'IPv4'), iface('::1', 'IPv6')],
    eth0: [iface('192.168.1.20', 'IPv4'), iface('fe80::1c2:3ff:fe04:506', 'IPv6'), iface('2001:db8::20', 'IPv6')],
    tailscale0: [iface('100.101.102.103', 'IPv4')],
  };

  it('accepts loopback in every spelling', () => {
    for (const a of ['127.0.0.1', '127.1.2.3', '127.255.255.254', '::1', '0:0:0:0:0:0:0:1', '::ffff:127.0.0.1', '::FFFF:127.9.9.9', '::ffff:7f00:1']) {
      assert.equal(isLocalAddress(a, {}), true, a);
    }
  });

  it('accepts this machine’s own interface addresses, also IPv4-mapped, zoned or unabbreviated', () => {
    for (const a of ['192.168.1.20', '::ffff:192.168.1.20', '100.101.102.103', 'fe80::1c2:3ff:fe04:506%eth0', '2001:DB8:0:0:0:0:0:20']) {
      assert.equal(isLocalAddress(a, interfaces), true, a);
    }
  });

  it('refuses every other address, and nonsense', () => {
    for (const a of [undefined, '', '192.168.1.21', '::ffff:192.168.1.21', '10.0.0.1', '100.101.102.104', '2001:db8::21', '::', '0.0.0.0', '128.0.0.1', 'localhost', '127.0.0.1.evil', 'fe80::1']) {
      assert.equal(isLocalAddress(a, interfaces), false, String(a));
    }
  });

  it('reads the real interfaces by default: loopback is local', () => {
    assert.equal(isLocalAddress('127.0.0.1'), true);
    assert.equal(isLocalAddress('203.0.113.7'), false);
  });
});
