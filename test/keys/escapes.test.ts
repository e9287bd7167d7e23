/**
 * SPEC section 12 against a hostile client, on one real node over real
 * HTTP: a user key scoped to some models (and a caller with no key at all)
 * trying to escape its scope and role, and to overrun its limits.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { startNode, tempDir, type TestNode } from '../helpers/node.ts';
import { call } from '../helpers/http.ts';

const sha = (s: string) => crypto.createHash('sha256').update(s).digest('hex');
const ADMIN = `adm-${crypto.randomBytes(12).toString('hex')}`;
const USER = `usr-${crypto.randomBytes(12).toString('hex')}`;
const admin = { authorization: `Bearer ${ADMIN}` };
const user = { authorization: `Bearer ${USER}` };
const RPM2 = `rpm-${crypto.randomBytes(12).toString('hex')}`;
const TPM = `tpm-${crypto.randomBytes(12).toString('hex')}`;
const TPM2 = `tpm2-${crypto.randomBytes(12).toString('hex')}`;
const fast = { ttft_ms: 1, prefill_ms_per_1k: 1, tokens_per_s: 2000, output_tokens: 2 };

describe('a hostile client against keys, scopes and limits (one node)', () => {
  let n: TestNode;
  before(async () => {
    const keysFile = path.join(tempDir('viiwork-escapes-'), 'keys.yaml');
    fs.writeFileSync(keysFile, `keys:\n  - name: ops\n    sha256: ${sha(ADMIN)}\n    role: admin\n  - name: alice\n    sha256: ${sha(USER)}\n    role: user\n    models: ["qwen*"]\n  - name: twice\n    sha256: ${sha(RPM2)}\n    models: ["qwen*"]\n    limits: {rpm: 2}\n  - name: budget\n    sha256: ${sha(TPM)}\n    models: ["qwen*"]\n    limits: {tpm: 1000}\n  - name: bounded\n    sha256: ${sha(TPM2)}\n    models: ["qwen*"]\n    limits: {tpm: 1000}\n`, { mode: 0o600 });
    n = await startNode({
      api: { keys_file: keysFile },
      models: [
        { name: 'qwen-small', engine: 'sim', parallel: 4, sim: fast },
        { name: 'open-model', engine: 'sim', parallel: 2, sim: fast },
      ],
    });
  });
  after(() => n?.stop());

  it('an X-Viiwork-Node header is no credential on the key, alias, usage and admin endpoints', async () => {
    const forged = { 'x-viiwork-node': 'n1' };
    const cases: [string, string, unknown][] = [
      ['GET', '/v1/keys', undefined],
      ['POST', '/v1/keys', { name: 'eve', role: 'admin' }],
      ['PATCH', '/v1/keys/alice', { models: ['*'] }],
      ['DELETE', '/v1/keys/ops', undefined],
      ['GET', '/v1/usage?key=ops', undefined],
      ['GET', '/v1/decisions', undefined],
      ['GET', '/v1/mesh', undefined],
      ['GET', '/v1/fleet/capacity', undefined],
      ['PUT', '/v1/aliases/qwen-sneaky', { target: 'open-model' }],
      ['GET', '/v1/models', undefined],
    ];
    for (const [method, p, body] of cases) {
      const none = await call(`${n.url}${p}`, method, forged, body);
      assert.equal(none.status, 401, `no key, ${method} ${p}: ${none.text}`);
      assert.equal(none.json.error.code, 'invalid_api_key', `${method} ${p}`);
      if (p === '/v1/models') continue;
      const scoped = await call(`${n.url}${p}`, method, { ...forged, ...user }, body);
      assert.equal(scoped.status, 403, `user key, ${method} ${p}: ${scoped.text}`);
      assert.equal(scoped.json.error.code, 'insufficient_scope', `${method} ${p}`);
    }
    const keys = await call(`${n.url}/v1/keys`, 'GET', admin);
    assert.deepEqual(
      keys.json.keys.map((k: any) => [k.name, k.models]),
      [
        ['alice', ['qwen*']],
        ['bounded', ['qwen*']],
        ['budget', ['qwen*']],
        ['ops', ['*']],
        ['twice', ['qwen*']],
      ],
      'no key made, changed or revoked',
    );
    assert.equal((await call(`${n.url}/v1/aliases`, 'GET', admin)).json.data?.length ?? 0, 0, 'no alias made');
  });

  it('a request’s timeline and the fleet’s history, like the decision feed they come from, are for admin keys', async () => {
    assert.equal((await call(`${n.url}/v1/chat/completions`, 'POST', user, { model: 'qwen-small', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })).status, 200);
    const feed = await call(`${n.url}/v1/decisions`, 'GET', admin);
    const id = feed.json.data.at(-1)?.timeline;
    assert.ok(id, feed.text);
    assert.equal((await call(`${n.url}/v1/timeline/${encodeURIComponent(id)}`, 'GET', admin)).status, 200);
    for (const p of [`/v1/timeline/${encodeURIComponent(id)}`, '/v1/history']) {
      const r = await call(`${n.url}${p}`, 'GET', user);
      assert.equal(r.status, 403, `${p}: ${r.text}`);
      assert.equal(r.json.error.code, 'insufficient_scope', p);
    }
  });

  it('a request refused before any engine ran (404, 403 through an alias, a pin to no member) is not charged to the key', async () => {
    const set = await call(`${n.url}/v1/aliases/qwen-elsewhere`, 'PUT', admin, { target: 'open-model' });
    assert.equal(set.status, 200, set.text);
    const chat = (model: string, query = '') => call(`${n.url}/v1/chat/completions${query}`, 'POST', { authorization: `Bearer ${RPM2}` }, { model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    for (let i = 0; i < 3; i++) assert.equal((await chat('qwen-typo')).status, 404);
    assert.equal((await chat('qwen-elsewhere')).json.error.code, 'model_not_allowed');
    assert.equal((await chat('qwen-small', '?host=nobody')).status, 404);
    // Its two requests a minute are still whole.
    for (let i = 0; i < 2; i++) {
      const ok = await chat('qwen-small');
      assert.equal(ok.status, 200, `request ${i + 1} of 2 after the refusals: ${ok.text}`);
    }
    const over = await chat('qwen-small');
    assert.equal(over.status, 429);
    assert.equal(over.headers['x-viiwork-limit'], 'rpm');
  });

  it('a scoped key lists only the aliases /v1/models shows it: name and target within its models', async () => {
    for (const [alias, target] of [
      ['qwen-fast', 'qwen-small'],
      ['qwen-outside', 'open-model'],
      ['other-name', 'qwen-small'],
    ]) {
      const set = await call(`${n.url}/v1/aliases/${alias}`, 'PUT', admin, { target });
      assert.equal(set.status, 200, set.text);
    }
    const names = (r: { json: { data?: { alias: string }[] } }) => (r.json.data ?? []).map((a) => a.alias);
    const mine = await call(`${n.url}/v1/aliases`, 'GET', user);
    assert.equal(mine.status, 200, mine.text);
    assert.ok(names(mine).includes('qwen-fast'));
    assert.ok(!names(mine).includes('qwen-outside'), 'an alias whose target is outside the key');
    assert.ok(!names(mine).includes('other-name'), 'an alias whose own name is outside the key');
    const history = await call(`${n.url}/v1/aliases/history`, 'GET', user);
    assert.ok(names(history).includes('qwen-fast') && !names(history).includes('qwen-outside') && !names(history).includes('other-name'), history.text);
    const all = names(await call(`${n.url}/v1/aliases`, 'GET', admin));
    assert.ok(['qwen-fast', 'qwen-outside', 'other-name'].every((a) => all.includes(a)), 'an admin key sees every alias');
    const models = ((await call(`${n.url}/v1/models`, 'GET', user)).json.data as { id: string }[]).map((m) => m.id);
    assert.deepEqual(
      names(mine).filter((a) => !models.includes(a)),
      [],
      'every alias listed is one /v1/models shows the key',
    );
  });

  it('a request the executor refuses itself (a 400 about the request) holds back no tokens of its key', async () => {
    const responses = (extra: Record<string, unknown>) =>
      call(`${n.url}/v1/responses`, 'POST', { authorization: `Bearer ${TPM}` }, { model: 'qwen-small', input: 'hi', max_output_tokens: 900, ...extra });
    // Each would hold back 900 of the key's 1000 tokens a minute until the answer said what was used: nothing.
    for (let i = 0; i < 3; i++) {
      const refused = await responses({ tools: [{ type: 'web_search' }], tool_choice: { type: 'web_search' } });
      assert.equal(refused.status, 400, `refusal ${i + 1}: ${refused.text}`);
    }
    const ok = await responses({});
    assert.equal(ok.status, 200, ok.text);
  });

  it('tpm holds back the largest output bound a body sets, whatever field or form it takes', async () => {
    const chat = (bounds: Record<string, unknown> | string) =>
      request(`${n.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${TPM2}` },
        body: typeof bounds === 'string' ? `{"model":"qwen-small","messages":[{"role":"user","content":"hi"}],${bounds}}` : JSON.stringify({ model: 'qwen-small', messages: [{ role: 'user', content: 'hi' }], ...bounds }),
      }).then(async (r) => ({ status: r.statusCode, limit: r.headers['x-viiwork-limit'], text: await r.body.text() }));
    // Each of these lets an engine write far more than the key's 1000 tokens a minute.
    const over: (Record<string, unknown> | string)[] = [
      { max_completion_tokens: 1, max_tokens: 100_000 },
      { max_tokens: 1, n_predict: 5000 },
      '"max_tokens":1000000000000000',
      '"max_tokens":1e400',
      { max_tokens: '5000' },
      { max_tokens: 20, n: 100 },
    ];
    for (const bounds of over) {
      const r = await chat(bounds);
      assert.equal(r.status, 429, `${JSON.stringify(bounds)}: ${r.text}`);
      assert.equal(r.limit, 'tpm', JSON.stringify(bounds));
    }
    const fits = await chat({ max_tokens: 20 });
    assert.equal(fits.status, 200, fits.text);
  });

  it('an audio upload that names two models is refused: the one scoped must be the one an engine reads', async () => {
    const boundary = 'viiwork-escape';
    const field = (name: string, value: string) => `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`;
    const upload = (models: string[]) =>
      request(`${n.url}/v1/audio/transcriptions`, {
        method: 'POST',
        headers: { ...user, 'content-type': `multipart/form-data; boundary=${boundary}` },
        body:
          models.map((m) => field('model', m)).join('') +
          `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\nRIFF\r\n--${boundary}--\r\n`,
      }).then(async (r) => ({ status: r.statusCode, json: JSON.parse(await r.body.text()) }));
    const two = await upload(['qwen-small', 'open-model']);
    assert.equal(two.status, 400);
    assert.equal(two.json.error.code, 'repeated_model');
    const outside = await upload(['open-model']);
    assert.equal(outside.status, 403);
    assert.equal(outside.json.error.code, 'model_not_allowed');
  });

  it('bad bodies on POST /v1/keys are 400 invalid_key naming what is wrong, and make nothing', async () => {
    const before = (await call(`${n.url}/v1/keys`, 'GET', admin)).json.version;
    const cases: [unknown, RegExp][] = [
      [[], /^body: a key entry must be a mapping/],
      [{ name: 'm', colour: 'red' }, /^colour: unknown field/],
      [{ name: 'm', limits: { rpm: 0 } }, /^limits\.rpm: /],
      [{ name: 'm', limits: { tpm: -5 } }, /^limits\.tpm: /],
      [{ name: 'm', limits: { concurrent: '8' } }, /^limits\.concurrent: /],
      [{ name: 'm', limits: { rpm: 1e300 } }, /^limits\.rpm: /],
      [{ name: 'm', role: 'root' }, /^role: unknown role/],
      [{ name: 'm', sha256: 'abc' }, /^sha256: a malformed hash/],
    ];
    for (const [body, message] of cases) {
      const r = await call(`${n.url}/v1/keys`, 'POST', admin, body);
      assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
      assert.equal(r.json.error.code, 'invalid_key');
      assert.match(r.json.error.message, message, JSON.stringify(body));
    }
    assert.equal((await call(`${n.url}/v1/keys`, 'GET', admin)).json.version, before, 'the table did not change');
  });
});
