/**
 * Issue 18: what the real Claude Code and Codex send, captured by a
 * recording server that answers like the APIs they expect (one short text
 * answer), so the field list the translation is built for is checked
 * against the CLIs themselves, version by version.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { tempDir } from '../helpers/node.ts';
import { claudeEnv, codexHome, ensureClaudeCode, ensureCodex, isolatedEnv, runCli } from './clis.ts';

const IP = '127.0.100.20';

interface Captured {
  url: string;
  headers: http.IncomingHttpHeaders;
  body: any;
}

function sse(res: http.ServerResponse, events: [string, Record<string, unknown>][]): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  for (const [type, data] of events) res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
  res.end();
}

/** Answers /v1/messages (streamed) and /v1/responses (streamed) with "RECORDED", keeping each request. */
function recorder(): { server: http.Server; seen: Captured[] } {
  const seen: Captured[] = [];
  const server = http.createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c) => parts.push(c));
    req.on('end', () => {
      let body: any;
      try {
        body = JSON.parse(Buffer.concat(parts).toString('utf8'));
      } catch {
        body = undefined;
      }
      seen.push({ url: req.url ?? '', headers: req.headers, body });
      if (req.url?.startsWith('/v1/messages')) {
        const message = { id: 'msg_1', type: 'message', role: 'assistant', model: body?.model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 1, output_tokens: 0 } };
        return sse(res, [
          ['message_start', { message }],
          ['content_block_start', { index: 0, content_block: { type: 'text', text: '' } }],
          ['content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'RECORDED' } }],
          ['content_block_stop', { index: 0 }],
          ['message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 1 } }],
          ['message_stop', {}],
        ]);
      }
      if (req.url?.startsWith('/v1/responses')) {
        const item = { type: 'message', id: 'msg_1', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'RECORDED', annotations: [] }] };
        const response = { id: 'resp_1', object: 'response', status: 'in_progress', output: [] };
        let n = 0;
        return sse(res, [
          ['response.created', { sequence_number: n++, response }],
          ['response.output_item.added', { sequence_number: n++, output_index: 0, item: { ...item, status: 'in_progress', content: [] } }],
          ['response.output_text.delta', { sequence_number: n++, item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'RECORDED' }],
          ['response.output_item.done', { sequence_number: n++, output_index: 0, item }],
          ['response.completed', { sequence_number: n++, response: { ...response, status: 'completed', output: [item], usage: { input_tokens: 1, output_tokens: 1, total_tokens: 2, input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } } } }],
        ]);
      }
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":{"message":"not recorded","type":"invalid_request_error","code":"not_found"}}');
    });
  });
  return { server, seen };
}

describe('what the agent CLIs send (a recording server)', () => {
  const { server, seen } = recorder();
  let url = '';
  before(async () => {
    await new Promise<void>((r) => server.listen(0, IP, r));
    url = `http://${IP}:${(server.address() as AddressInfo).port}`;
  });
  after(() => new Promise<void>((r) => server.close(() => r())));

  it('Claude Code: POST /v1/messages?beta=true, streamed, with the fields the translation is built for', async (t) => {
    const cli = ensureClaudeCode();
    if (!cli.ok) return t.skip(cli.skip);
    seen.length = 0;
    const home = tempDir('viiwork-claude-capture-');
    const r = await runCli(cli.command, ['-p', 'say hi', '--model', 'local-model'], claudeEnv(home, url, IP, 'sk-capture'), home);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /RECORDED/);
    assert.deepEqual(
      seen.map((s) => s.url),
      ['/v1/messages?beta=true'],
    );
    const { headers, body } = seen[0];
    assert.equal(headers['x-api-key'], 'sk-capture');
    assert.equal(headers['anthropic-version'], '2023-06-01');
    assert.match(String(headers['anthropic-beta']), /claude-code-/);
    const session = String(headers['x-claude-code-session-id']);
    assert.equal(JSON.parse(body.metadata.user_id).session_id, session);
    assert.equal(body.stream, true);
    assert.equal(body.max_tokens, 32000);
    for (const k of ['thinking', 'context_management', 'output_config']) assert.ok(k in body, k);
    assert.equal(body.system.length, 3);
    assert.match(body.system[0].text, /^x-anthropic-billing-header: cc_version=/);
    assert.ok(body.system.some((b: any) => b.cache_control));
    assert.equal(body.messages[1].role, 'system');
    assert.ok(body.tools.length >= 10);
    assert.ok(body.tools.every((x: any) => x.type === undefined && x.input_schema));
    assert.ok(body.tools.some((x: any) => x.defer_loading === true));
    assert.ok(body.tools.some((x: any) => x.name === 'Bash'));
  });

  it('Codex: POST /v1/responses, streamed, with prompt_cache_key, session-id, developer messages, a namespace and a built-in tool', async (t) => {
    const cli = ensureCodex();
    if (!cli.ok) return t.skip(cli.skip);
    seen.length = 0;
    const home = tempDir('viiwork-codex-capture-');
    const env = isolatedEnv(home, IP, { CODEX_HOME: codexHome(home, url, 'local-model'), VIIWORK_API_KEY: 'sk-capture' });
    const r = await runCli(cli.command, [...cli.args, 'exec', '--skip-git-repo-check', 'say hi'], env, home);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /RECORDED/);
    const turns = seen.filter((s) => s.url === '/v1/responses');
    assert.ok(turns.length >= 1, JSON.stringify(seen.map((s) => s.url)));
    const { headers, body } = turns[0];
    assert.equal(headers.authorization, 'Bearer sk-capture');
    assert.equal(headers['session-id'], body.prompt_cache_key);
    assert.equal(body.stream, true);
    assert.equal(body.store, false);
    for (const k of ['include', 'reasoning', 'parallel_tool_calls', 'client_metadata', 'tool_choice']) assert.ok(k in body, k);
    assert.equal(body.instructions, undefined);
    assert.ok(body.input.some((i: any) => i.role === 'developer'));
    const ns = body.tools.find((x: any) => x.type === 'namespace');
    assert.equal(ns?.name, 'multi_agent_v1');
    assert.ok(ns.tools.length >= 5);
    assert.ok(body.tools.some((x: any) => x.type === 'web_search'));
    assert.ok(body.tools.some((x: any) => x.type === 'function' && x.name === 'exec_command'));
  });
});
