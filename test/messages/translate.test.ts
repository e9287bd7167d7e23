/**
 * The Messages ⇄ Chat Completions translation, field by field and event by
 * event (src/messages/), with what Claude Code 2.1.328 really sends (fields
 * captured against a recording server: test/agents/).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { chatToMessage, messagesToChat, MessagesStreamTranslator, type MessageMeta } from '../../src/messages/index.ts';
import type { ChatRequest } from '../../src/chat/index.ts';

function chatOf(req: Record<string, unknown>, hygiene = true): ChatRequest {
  const r = messagesToChat(req, { messageId: 'msg_00', hygiene });
  assert.ok(r.ok, JSON.stringify(!r.ok && r.error));
  return r.chat;
}
function errorOf(req: unknown) {
  const r = messagesToChat(req);
  assert.ok(!r.ok, `expected a refusal, got ${JSON.stringify(r.ok && r.chat)}`);
  return r.error;
}
const base = { model: 'm', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] };

/** A Claude Code request as captured (contents shortened). */
const claudeCode = {
  model: 'm',
  max_tokens: 32000,
  stream: true,
  metadata: { user_id: '{"device_id":"d","account_uuid":"","session_id":"s-1"}' },
  thinking: { type: 'adaptive', display: 'omitted' },
  context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
  output_config: { effort: 'high' },
  system: [
    { type: 'text', text: 'x-anthropic-billing-header: cc_version=2.1.328.593; cc_entrypoint=sdk-cli;' },
    { type: 'text', text: 'You are a Claude agent.', cache_control: { type: 'ephemeral' } },
    { type: 'text', text: '\nBe helpful.', cache_control: { type: 'ephemeral' } },
  ],
  messages: [
    { role: 'user', content: [{ type: 'text', text: '<system-reminder>r</system-reminder>' }, { type: 'text', text: 'say hi', cache_control: { type: 'ephemeral' } }] },
    { role: 'system', content: [{ type: 'text', text: '# Environment\ncwd: /tmp/x' }] },
  ],
  tools: [
    { name: 'Bash', description: 'run', input_schema: { type: 'object', properties: { command: { type: 'string' } } } },
    { name: 'DeferredToolPlaceholder', description: 'never call', input_schema: { type: 'object', properties: {} }, defer_loading: true },
  ],
};

describe('messagesToChat: what Claude Code sends', () => {
  it('becomes one leading system message (billing block dropped), the system turn joins the user turn, tools become functions', () => {
    const chat = chatOf(claudeCode);
    assert.deepEqual(chat.messages, [
      { role: 'system', content: 'You are a Claude agent.\n\nBe helpful.' },
      { role: 'user', content: '<system-reminder>r</system-reminder>\nsay hi\n\n# Environment\ncwd: /tmp/x' },
    ]);
    assert.deepEqual(
      chat.tools?.map((t) => t.function.name),
      ['Bash', 'DeferredToolPlaceholder'],
    );
    assert.deepEqual(chat.tools?.[0].function.parameters, claudeCode.tools[0].input_schema);
    assert.equal(chat.stream, true);
    assert.deepEqual(chat.stream_options, { include_usage: true });
    assert.equal(chat.max_tokens, 32000);
    // thinking, metadata, context_management, output_config, cache_control, defer_loading: accepted, left out.
    assert.deepEqual(Object.keys(chat).sort(), ['max_tokens', 'messages', 'model', 'stream', 'stream_options', 'tools']);
    assert.ok(!JSON.stringify(chat).includes('cache_control') && !JSON.stringify(chat).includes('defer_loading'));
  });

  it('with hygiene off, the billing block stays at the start of the system message', () => {
    const chat = chatOf(claudeCode, false);
    assert.match(chat.messages[0].content as string, /^x-anthropic-billing-header: cc_version=2\.1\.328\.593;/);
  });

  it('a tool round trip: tool_use becomes tool_calls; tool_result (with a tool_reference block) a tool message before the user text', () => {
    const chat = chatOf({
      ...base,
      messages: [
        { role: 'user', content: 'run it' },
        { role: 'assistant', content: [{ type: 'thinking', thinking: 'hm', signature: 's' }, { type: 'text', text: 'Running.' }, { type: 'tool_use', id: 'toolu_1', name: 'Bash', input: { command: 'echo hi' } }] },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'hi' }, { type: 'tool_reference', tool_name: 'WebFetch' }] },
            { type: 'text', text: 'go on' },
          ],
        },
      ],
    });
    assert.deepEqual(chat.messages, [
      { role: 'user', content: 'run it' },
      { role: 'assistant', content: 'Running.', tool_calls: [{ id: 'toolu_1', type: 'function', function: { name: 'Bash', arguments: '{"command":"echo hi"}' } }] },
      { role: 'tool', tool_call_id: 'toolu_1', content: 'hi\n[tool loaded: WebFetch]' },
      { role: 'user', content: 'go on' },
    ]);
  });

  it('an error result is marked; an image becomes an image_url part; a string system is the system message', () => {
    const chat = chatOf({
      ...base,
      system: 'sys',
      messages: [
        { role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }, { type: 'text', text: 'what is it?' }] },
        { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'f', input: {} }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', is_error: true, content: 'boom' }] },
      ],
    });
    assert.deepEqual(chat.messages[0], { role: 'system', content: 'sys' });
    assert.deepEqual(chat.messages[1], { role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } }, { type: 'text', text: 'what is it?' }] });
    assert.deepEqual(chat.messages[3], { role: 'tool', tool_call_id: 't1', content: 'Error: boom' });
  });

  it('stop_sequences, temperature, top_p, top_k pass; tool_choice maps; server tools are left out and named', () => {
    const r = messagesToChat({
      ...base,
      stop_sequences: ['END'],
      temperature: 0.2,
      top_p: 0.9,
      top_k: 40,
      tools: [{ type: 'web_search_20250305', name: 'web_search' }, { name: 'f', input_schema: { type: 'object' } }],
      tool_choice: { type: 'any', disable_parallel_tool_use: true },
    });
    assert.ok(r.ok);
    assert.deepEqual(r.chat.stop, ['END']);
    assert.equal(r.chat.temperature, 0.2);
    assert.equal(r.chat.top_p, 0.9);
    assert.equal(r.chat.top_k, 40);
    assert.deepEqual(r.chat.tools?.map((t) => t.function.name), ['f']);
    assert.equal(r.chat.tool_choice, 'required');
    assert.equal(r.chat.parallel_tool_calls, false);
    assert.deepEqual(r.meta.omittedTools, ['web_search']);
  });

  const refusals: { name: string; req: unknown; param: string | null; code?: string }[] = [
    { name: 'no model', req: { messages: [{ role: 'user', content: 'x' }] }, param: 'model' },
    { name: 'messages not a list', req: { model: 'm', messages: 'x' }, param: 'messages' },
    { name: 'no turns', req: { model: 'm', messages: [] }, param: 'messages' },
    { name: 'an unknown role', req: { model: 'm', messages: [{ role: 'robot', content: 'x' }] }, param: 'messages[0].role' },
    { name: 'max_tokens zero', req: { ...base, max_tokens: 0 }, param: 'max_tokens' },
    { name: 'a tool_choice forcing an omitted tool', req: { ...base, tools: [{ type: 'web_search_20250305', name: 'web_search' }], tool_choice: { type: 'tool', name: 'web_search' } }, param: 'tool_choice', code: 'unsupported_tool' },
    { name: 'a tool_choice naming no tool', req: { ...base, tools: [{ name: 'f' }], tool_choice: { type: 'tool', name: 'g' } }, param: 'tool_choice.name' },
    { name: 'a body that is not an object', req: [1], param: null },
  ];
  for (const c of refusals) {
    it(`refuses ${c.name} with a 400 naming the field`, () => {
      const e = errorOf(c.req);
      assert.equal(e.status, 400);
      assert.equal(e.param, c.param);
      if (c.code) assert.equal(e.code, c.code);
    });
  }
});

const meta: MessageMeta = { id: 'msg_abc', model: 'm', stream: true, stopSequences: [], omittedTools: [], ignored: [] };

function events(text: string): { event: string; data: any }[] {
  return text
    .split('\n\n')
    .filter((b) => b.trim())
    .map((b) => {
      const [e, d] = b.split('\n');
      return { event: e.slice(7), data: JSON.parse(d.slice(6)) };
    });
}
const chunk = (delta: Record<string, unknown>, finish: string | null = null) => `data: ${JSON.stringify({ choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;

describe('chat answers → Anthropic answers', () => {
  it('whole: text, tool_use with parsed input, stop reasons and usage with cached tokens', () => {
    const m = chatToMessage(
      {
        choices: [{ index: 0, message: { role: 'assistant', content: 'ok', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }] }, finish_reason: 'tool_calls' }],
        usage: { prompt_tokens: 100, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 60 } },
      },
      meta,
    );
    assert.ok(m.ok);
    assert.deepEqual(m.message.content, [
      { type: 'text', text: 'ok' },
      { type: 'tool_use', id: 'c1', name: 'f', input: { a: 1 } },
    ]);
    assert.equal(m.message.stop_reason, 'tool_use');
    assert.deepEqual(m.message.usage, { input_tokens: 40, output_tokens: 5, cache_read_input_tokens: 60, cache_creation_input_tokens: 0 });
    for (const [finish, stop] of [['stop', 'end_turn'], ['length', 'max_tokens'], ['content_filter', 'refusal']] as const) {
      const x = chatToMessage({ choices: [{ index: 0, message: { role: 'assistant', content: 'x' }, finish_reason: finish }] }, meta);
      assert.ok(x.ok);
      assert.equal(x.message.stop_reason, stop);
    }
    assert.equal(chatToMessage({ error: { message: 'bad' } }, meta).ok, false);
  });

  it('streamed: the event sequence Claude Code needs, text then a tool call, with a ping after message_start', () => {
    const t = new MessagesStreamTranslator(meta);
    let out = t.start();
    out += t.pushBytes(chunk({ role: 'assistant', content: 'Hel' }) + chunk({ content: 'lo' }));
    out += t.pushBytes(chunk({ tool_calls: [{ index: 0, id: 'call_9', type: 'function', function: { name: 'Bash', arguments: '' } }] }));
    out += t.pushBytes(chunk({ tool_calls: [{ index: 0, function: { arguments: '{"command":' } }] }) + chunk({ tool_calls: [{ index: 0, function: { arguments: '"ls"}' } }] }));
    out += t.pushBytes(chunk({}, 'tool_calls'));
    out += t.pushBytes(`data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 10, completion_tokens: 3, prompt_tokens_details: { cached_tokens: 4 } } })}\n\ndata: [DONE]\n\n`);
    out += t.end();
    const ev = events(out);
    assert.deepEqual(
      ev.map((e) => e.event),
      ['message_start', 'ping', 'content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_stop', 'content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop'],
    );
    assert.deepEqual(ev[2].data.content_block, { type: 'text', text: '' });
    assert.deepEqual(ev[3].data.delta, { type: 'text_delta', text: 'Hel' });
    assert.deepEqual(ev[6].data, { type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: 'call_9', name: 'Bash', input: {} } });
    assert.equal(ev[7].data.delta.type, 'input_json_delta');
    assert.equal(ev[7].data.delta.partial_json + ev[8].data.delta.partial_json, '{"command":"ls"}');
    assert.deepEqual(ev[10].data.delta, { stop_reason: 'tool_use', stop_sequence: null });
    assert.deepEqual(ev[10].data.usage, { input_tokens: 6, output_tokens: 3, cache_read_input_tokens: 4, cache_creation_input_tokens: 0 });
  });

  it('an empty answer still has one (empty) text block; a stream cut short ends with an error event', () => {
    const t = new MessagesStreamTranslator(meta);
    const ev = events(t.pushBytes(chunk({}, 'stop') + 'data: [DONE]\n\n') + t.end());
    assert.deepEqual(
      ev.map((e) => e.event),
      ['message_start', 'ping', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop'],
    );
    const u = new MessagesStreamTranslator(meta);
    const cut = events(u.pushBytes(chunk({ content: 'partial' })) + u.end());
    assert.equal(cut.at(-1)!.event, 'error');
    assert.equal(cut.at(-1)!.data.error.type, 'api_error');
  });
});
