/** responsesToChat, field by field: what each Responses field becomes in the chat body, and every refusal. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ChatRequest, TranslationError } from '../../src/chat/index.ts';
import { newResponseId, responsesToChat, type ResponseMeta } from '../../src/responses/index.ts';
import { seeded } from '../helpers/random.ts';

const base = { model: 'm1', input: 'hi' };

function chatOf(req: Record<string, unknown>): ChatRequest {
  const r = responsesToChat(req, { responseId: 'resp_00', createdAt: 1 });
  assert.ok(r.ok, JSON.stringify(!r.ok && r.error));
  return r.chat;
}
function metaOf(req: Record<string, unknown>): ResponseMeta {
  const r = responsesToChat(req, { responseId: 'resp_00', createdAt: 1 });
  assert.ok(r.ok, JSON.stringify(!r.ok && r.error));
  return r.meta;
}
function errorOf(req: unknown, limits?: Record<string, number>): TranslationError {
  const r = responsesToChat(req, { limits });
  assert.ok(!r.ok, `expected a refusal, got ${JSON.stringify(r.ok && r.chat)}`);
  assert.equal(r.error.status, 400);
  return r.error;
}

describe('responsesToChat: what each field becomes', () => {
  const cases: { name: string; req: Record<string, unknown>; chat: Partial<ChatRequest> }[] = [
    { name: 'input as a string is one user message', req: base, chat: { model: 'm1', messages: [{ role: 'user', content: 'hi' }] } },
    { name: 'instructions become the first, system message', req: { ...base, instructions: 'be terse' }, chat: { messages: [{ role: 'system', content: 'be terse' }, { role: 'user', content: 'hi' }] } },
    { name: 'empty instructions add no message', req: { ...base, instructions: '' }, chat: { messages: [{ role: 'user', content: 'hi' }] } },
    {
      name: 'messages keep their order; developer becomes system; easy messages need no type',
      req: {
        model: 'm1',
        input: [
          { role: 'developer', content: 'rules' },
          { type: 'message', role: 'user', content: 'q1' },
          { role: 'assistant', content: 'a1' },
          { role: 'system', content: [{ type: 'input_text', text: 's1' }, { type: 'input_text', text: 's2' }] },
        ],
      },
      chat: {
        messages: [
          { role: 'system', content: 'rules' },
          { role: 'user', content: 'q1' },
          { role: 'assistant', content: 'a1' },
          { role: 'system', content: 's1\ns2' },
        ],
      },
    },
    {
      name: 'an earlier output message (output_text and refusal parts) becomes assistant text',
      req: {
        model: 'm1',
        input: [{ type: 'message', id: 'msg_1', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'yes', annotations: [] }, { type: 'refusal', refusal: 'no' }] }],
      },
      chat: { messages: [{ role: 'assistant', content: 'yes\nno' }] },
    },
    {
      name: 'user text parts alone travel as one string',
      req: { model: 'm1', input: [{ role: 'user', content: [{ type: 'input_text', text: 'a' }, { type: 'input_text', text: 'b' }] }] },
      chat: { messages: [{ role: 'user', content: 'a\nb' }] },
    },
    {
      name: 'input_image with a URL becomes an image_url part, with its detail when chat knows it',
      req: {
        model: 'm1',
        input: [
          {
            role: 'user',
            content: [
              { type: 'input_text', text: 'what is this?' },
              { type: 'input_image', image_url: 'data:image/png;base64,AAAA', detail: 'low' },
              { type: 'input_image', image_url: 'https://x/y.png', detail: 'original' },
            ],
          },
        ],
      },
      chat: {
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'what is this?' },
              { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA', detail: 'low' } },
              { type: 'image_url', image_url: { url: 'https://x/y.png' } },
            ],
          },
        ],
      },
    },
    {
      name: 'input_file with inline file_data and input_audio pass as chat parts',
      req: {
        model: 'm1',
        input: [
          {
            role: 'user',
            content: [
              { type: 'input_file', file_data: 'data:application/pdf;base64,JVBE', filename: 'a.pdf' },
              { type: 'input_audio', input_audio: { data: 'UklG', format: 'wav' } },
            ],
          },
        ],
      },
      chat: {
        messages: [
          {
            role: 'user',
            content: [
              { type: 'file', file: { file_data: 'data:application/pdf;base64,JVBE', filename: 'a.pdf' } },
              { type: 'input_audio', input_audio: { data: 'UklG', format: 'wav' } },
            ],
          },
        ],
      },
    },
    {
      name: 'function_call items join the assistant turn before them; outputs become tool messages; reasoning items are dropped',
      req: {
        model: 'm1',
        input: [
          { role: 'user', content: 'go' },
          { type: 'reasoning', id: 'rs_1', summary: [] },
          { type: 'message', role: 'assistant', content: 'calling two tools' },
          { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{"a":1}' },
          { type: 'function_call', call_id: 'c2', name: 'g', arguments: '{}' },
          { type: 'function_call_output', call_id: 'c1', output: 'one' },
          { type: 'function_call_output', call_id: 'c2', output: [{ type: 'input_text', text: 'two' }] },
          { type: 'function_call', call_id: 'c3', name: 'h' },
        ],
      },
      chat: {
        messages: [
          { role: 'user', content: 'go' },
          {
            role: 'assistant',
            content: 'calling two tools',
            tool_calls: [
              { id: 'c1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } },
              { id: 'c2', type: 'function', function: { name: 'g', arguments: '{}' } },
            ],
          },
          { role: 'tool', tool_call_id: 'c1', content: 'one' },
          { role: 'tool', tool_call_id: 'c2', content: 'two' },
          { role: 'assistant', content: null, tool_calls: [{ id: 'c3', type: 'function', function: { name: 'h', arguments: '{}' } }] },
        ],
      },
    },
    {
      name: 'function tools become chat tools (description, parameters, strict kept)',
      req: { ...base, tools: [{ type: 'function', name: 'f', description: 'does f', parameters: { type: 'object' }, strict: true }, { type: 'function', name: 'g', parameters: null, strict: null }] },
      chat: {
        tools: [
          { type: 'function', function: { name: 'f', description: 'does f', parameters: { type: 'object' }, strict: true } },
          { type: 'function', function: { name: 'g' } },
        ],
      },
    },
    { name: 'an empty tools list sends none', req: { ...base, tools: [] }, chat: { tools: undefined } },
    { name: 'tool_choice "none"', req: { ...base, tool_choice: 'none' }, chat: { tool_choice: 'none' } },
    { name: 'tool_choice "auto"', req: { ...base, tool_choice: 'auto' }, chat: { tool_choice: 'auto' } },
    { name: 'tool_choice "required"', req: { ...base, tool_choice: 'required' }, chat: { tool_choice: 'required' } },
    {
      name: 'tool_choice naming a function',
      req: { ...base, tools: [{ type: 'function', name: 'f' }], tool_choice: { type: 'function', name: 'f' } },
      chat: { tool_choice: { type: 'function', function: { name: 'f' } } },
    },
    {
      name: 'tool_choice allowed_tools sends only the allowed functions, with its mode',
      req: { ...base, tools: [{ type: 'function', name: 'f' }, { type: 'function', name: 'g' }], tool_choice: { type: 'allowed_tools', mode: 'required', tools: [{ type: 'function', name: 'g' }] } },
      chat: { tools: [{ type: 'function', function: { name: 'g' } }], tool_choice: 'required' },
    },
    { name: 'parallel_tool_calls false', req: { ...base, parallel_tool_calls: false }, chat: { parallel_tool_calls: false } },
    {
      name: 'text.format json_schema becomes response_format json_schema',
      req: { ...base, text: { format: { type: 'json_schema', name: 'p', schema: { type: 'object' }, strict: true, description: 'a p' } } },
      chat: { response_format: { type: 'json_schema', json_schema: { name: 'p', schema: { type: 'object' }, strict: true, description: 'a p' } } },
    },
    { name: 'text.format json_object', req: { ...base, text: { format: { type: 'json_object' } } }, chat: { response_format: { type: 'json_object' } } },
    { name: 'text.format text sends no response_format', req: { ...base, text: { format: { type: 'text' }, verbosity: 'low' } }, chat: { response_format: undefined } },
    { name: 'temperature and top_p', req: { ...base, temperature: 0.7, top_p: 0.9 }, chat: { temperature: 0.7, top_p: 0.9 } },
    { name: 'max_output_tokens becomes max_tokens', req: { ...base, max_output_tokens: 128 }, chat: { max_tokens: 128 } },
    { name: 'reasoning.effort becomes reasoning_effort; the rest is dropped', req: { ...base, reasoning: { effort: 'high', summary: 'auto' } }, chat: { reasoning_effort: 'high' } },
    { name: 'reasoning without effort sends nothing', req: { ...base, reasoning: { summary: 'auto' } }, chat: { reasoning_effort: undefined } },
    { name: 'stream asks for usage in the stream', req: { ...base, stream: true, stream_options: { include_obfuscation: false } }, chat: { stream: true, stream_options: { include_usage: true } } },
    { name: 'stream false sends no stream fields', req: { ...base, stream: false }, chat: { stream: undefined, stream_options: undefined } },
    {
      name: 'metadata, store, user, include, truncation and friends never reach the engine',
      req: { ...base, metadata: { a: 'b' }, store: true, user: 'u1', include: ['reasoning.encrypted_content'], truncation: 'auto', service_tier: 'auto', prompt_cache_key: 'k', safety_identifier: 's', top_logprobs: 2, background: false, previous_response_id: null },
      chat: { model: 'm1', messages: [{ role: 'user', content: 'hi' }] },
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const chat = chatOf(c.req);
      for (const [k, v] of Object.entries(c.chat)) assert.deepEqual(chat[k as keyof ChatRequest], v, k);
    });
  }

  it('only translated fields reach the chat body', () => {
    const chat = chatOf({ ...base, metadata: { a: 'b' }, store: true, user: 'u1', truncation: 'auto', reasoning: { summary: 'auto' }, text: { verbosity: 'low' } });
    assert.deepEqual(Object.keys(chat).sort(), ['messages', 'model']);
  });
});

describe('responsesToChat: the meta a response echoes', () => {
  it('carries the id, time and request parameters; defaults when absent', () => {
    const m = metaOf(base);
    assert.deepEqual(m, {
      id: 'resp_00',
      createdAt: 1,
      model: 'm1',
      instructions: null,
      tools: [],
      toolChoice: 'auto',
      parallelToolCalls: true,
      temperature: null,
      topP: null,
      maxOutputTokens: null,
      text: { format: { type: 'text' } },
      reasoning: null,
      metadata: {},
      user: null,
      stream: false,
      ignored: [],
      namespaced: {},
      omittedTools: [],
    });
  });

  it('echoes what was sent and lists the keys that had no effect', () => {
    const m = metaOf({
      ...base,
      instructions: 'x',
      tools: [{ type: 'function', name: 'f' }],
      tool_choice: 'required',
      temperature: 0,
      top_p: 1,
      max_output_tokens: 5,
      metadata: { k: 'v', n: 1 },
      user: 'me',
      reasoning: { effort: 'low', summary: 'auto' },
      text: { format: { type: 'json_object' }, verbosity: 'low' },
      truncation: 'auto',
      some_future_field: 1,
    });
    assert.deepEqual(m.tools, [{ type: 'function', name: 'f', description: null, parameters: null, strict: null }]);
    assert.equal(m.toolChoice, 'required');
    assert.equal(m.temperature, 0);
    assert.equal(m.maxOutputTokens, 5);
    assert.deepEqual(m.metadata, { k: 'v' });
    assert.equal(m.user, 'me');
    assert.deepEqual(m.reasoning, { effort: 'low', summary: null });
    assert.deepEqual(m.text, { format: { type: 'json_object' }, verbosity: 'low' });
    assert.deepEqual(m.ignored.sort(), ['metadata', 'reasoning.summary', 'some_future_field', 'text.verbosity', 'truncation', 'user']);
  });

  it('newResponseId is resp_ and 48 hex digits from the random source it is given', () => {
    assert.equal(newResponseId((n) => Buffer.alloc(n, 0xab)), `resp_${'ab'.repeat(24)}`);
    assert.match(newResponseId(), /^resp_[0-9a-f]{48}$/);
  });
});

describe('responsesToChat: refusals (400, naming the field)', () => {
  const cases: { name: string; req: unknown; code: TranslationError['code']; param: string | null; message: RegExp }[] = [
    { name: 'previous_response_id says to send the history in input', req: { ...base, previous_response_id: 'resp_1' }, code: 'stateful_request', param: 'previous_response_id', message: /send the whole history in `input`/ },
    { name: 'conversation', req: { ...base, conversation: 'conv_1' }, code: 'stateful_request', param: 'conversation', message: /keeps no conversation state/ },
    { name: 'a stored prompt template', req: { ...base, prompt: { id: 'pmpt_1' } }, code: 'stateful_request', param: 'prompt', message: /instructions/ },
    { name: 'an item_reference', req: { model: 'm1', input: [{ type: 'item_reference', id: 'msg_1' }] }, code: 'stateful_request', param: 'input[0].type', message: /send the item itself/ },
    { name: 'background: true', req: { ...base, background: true }, code: 'unsupported_parameter', param: 'background', message: /background/ },
    { name: 'a body that is not an object', req: [1, 2], code: 'invalid_request', param: null, message: /JSON object/ },
    { name: 'null body', req: null, code: 'invalid_request', param: null, message: /JSON object/ },
    { name: 'no model', req: { input: 'x' }, code: 'invalid_request', param: 'model', message: /no "model"/ },
    { name: 'no input', req: { model: 'm1' }, code: 'invalid_request', param: 'input', message: /no input/ },
    { name: 'input of the wrong type', req: { model: 'm1', input: 5 }, code: 'invalid_request', param: 'input', message: /string or a list/ },
    { name: 'an input item that is not an object', req: { model: 'm1', input: ['hi'] }, code: 'invalid_request', param: 'input[0]', message: /must be an object/ },
    { name: 'an input item with neither type nor role', req: { model: 'm1', input: [{ content: 'x' }] }, code: 'invalid_request', param: 'input[0].type', message: /neither/ },
    { name: 'a message with an unknown role', req: { model: 'm1', input: [{ role: 'robot', content: 'x' }] }, code: 'invalid_request', param: 'input[0].role', message: /robot/ },
    { name: 'a message without content', req: { model: 'm1', input: [{ role: 'user' }] }, code: 'invalid_request', param: 'input[0].content', message: /content/ },
    { name: 'a built-in tool call item in input', req: { model: 'm1', input: [{ type: 'web_search_call', id: 'ws_1', status: 'completed' }] }, code: 'unsupported_input', param: 'input[0].type', message: /"web_search_call"/ },
    { name: 'an image by file_id', req: { model: 'm1', input: [{ role: 'user', content: [{ type: 'input_image', file_id: 'file-1', detail: 'auto' }] }] }, code: 'unsupported_input', param: 'input[0].content[0]', message: /file_id is not supported/ },
    { name: 'a file by file_id', req: { model: 'm1', input: [{ role: 'user', content: [{ type: 'input_file', file_id: 'file-1' }] }] }, code: 'unsupported_input', param: 'input[0].content[0]', message: /file_data/ },
    { name: 'bad input_audio', req: { model: 'm1', input: [{ role: 'user', content: [{ type: 'input_audio', input_audio: 'x' }] }] }, code: 'invalid_request', param: 'input[0].content[0].input_audio', message: /format/ },
    { name: 'an unknown user part', req: { model: 'm1', input: [{ role: 'user', content: [{ type: 'input_video' }] }] }, code: 'unsupported_input', param: 'input[0].content[0].type', message: /"input_video"/ },
    { name: 'an image in a system message', req: { model: 'm1', input: [{ role: 'system', content: [{ type: 'input_image', image_url: 'x' }] }] }, code: 'unsupported_input', param: 'input[0].content[0].type', message: /system message can only carry text/ },
    { name: 'an image in a function_call_output', req: { model: 'm1', input: [{ type: 'function_call_output', call_id: 'c', output: [{ type: 'input_image', image_url: 'x' }] }] }, code: 'unsupported_input', param: 'input[0].output[0].type', message: /function_call_output/ },
    { name: 'a function_call without call_id', req: { model: 'm1', input: [{ type: 'function_call', name: 'f', arguments: '{}' }] }, code: 'invalid_request', param: 'input[0].call_id', message: /string/ },
    { name: 'a function_call_output without output', req: { model: 'm1', input: [{ type: 'function_call_output', call_id: 'c' }] }, code: 'invalid_request', param: 'input[0].output', message: /output/ },
    { name: 'tools that are not a list', req: { ...base, tools: {} }, code: 'invalid_request', param: 'tools', message: /list/ },
    { name: 'a function tool without a name', req: { ...base, tools: [{ type: 'function' }] }, code: 'invalid_request', param: 'tools[0].name', message: /string/ },
    { name: 'a function tool with bad parameters', req: { ...base, tools: [{ type: 'function', name: 'f', parameters: 'x' }] }, code: 'invalid_request', param: 'tools[0].parameters', message: /schema/ },
    { name: 'a tool without a type', req: { ...base, tools: [{ name: 'f' }] }, code: 'invalid_request', param: 'tools[0].type', message: /"function"/ },
    { name: 'a built-in tool_choice', req: { ...base, tool_choice: { type: 'file_search' } }, code: 'unsupported_tool', param: 'tool_choice', message: /"file_search"/ },
    { name: 'a tool_choice forcing a built-in tool', req: { ...base, tools: [{ type: 'web_search' }], tool_choice: { type: 'web_search' } }, code: 'unsupported_tool', param: 'tool_choice', message: /"web_search"/ },
    { name: 'an allowed_tools mode that does not exist', req: { ...base, tool_choice: { type: 'allowed_tools', mode: 'none', tools: [] } }, code: 'invalid_request', param: 'tool_choice.mode', message: /mode/ },
    { name: 'an unknown tool_choice string', req: { ...base, tool_choice: 'sometimes' }, code: 'invalid_request', param: 'tool_choice', message: /sometimes/ },
    { name: 'an unknown text.format', req: { ...base, text: { format: { type: 'grammar' } } }, code: 'unsupported_parameter', param: 'text.format.type', message: /"grammar"/ },
    { name: 'json_schema without a name', req: { ...base, text: { format: { type: 'json_schema', schema: {} } } }, code: 'invalid_request', param: 'text.format.name', message: /string/ },
    { name: 'json_schema without a schema', req: { ...base, text: { format: { type: 'json_schema', name: 'n' } } }, code: 'invalid_request', param: 'text.format.schema', message: /schema/ },
    { name: 'temperature out of range', req: { ...base, temperature: 3 }, code: 'invalid_request', param: 'temperature', message: /0 to 2/ },
    { name: 'top_p of the wrong type', req: { ...base, top_p: '1' }, code: 'invalid_request', param: 'top_p', message: /0 to 1/ },
    { name: 'max_output_tokens zero', req: { ...base, max_output_tokens: 0 }, code: 'invalid_request', param: 'max_output_tokens', message: /at least 1/ },
    { name: 'max_output_tokens fractional', req: { ...base, max_output_tokens: 1.5 }, code: 'invalid_request', param: 'max_output_tokens', message: /whole number/ },
    { name: 'parallel_tool_calls not a boolean', req: { ...base, parallel_tool_calls: 'yes' }, code: 'invalid_request', param: 'parallel_tool_calls', message: /true or false/ },
    { name: 'stream not a boolean', req: { ...base, stream: 1 }, code: 'invalid_request', param: 'stream', message: /true or false/ },
    { name: 'reasoning not an object', req: { ...base, reasoning: 'high' }, code: 'invalid_request', param: 'reasoning', message: /effort/ },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const e = errorOf(c.req);
      assert.equal(e.code, c.code, e.message);
      assert.equal(e.param, c.param);
      assert.match(e.message, c.message);
    });
  }

});

describe('responsesToChat: tools an agent client declares (SPEC section 4)', () => {
  for (const type of ['web_search', 'web_search_preview', 'file_search', 'code_interpreter', 'computer_use_preview', 'image_generation', 'mcp', 'local_shell', 'custom']) {
    it(`the built-in tool "${type}" is left out of what the engine sees and named, not refused`, () => {
      const r = responsesToChat({ ...base, tools: [{ type: 'function', name: 'ok' }, { type }] });
      assert.ok(r.ok, JSON.stringify(!r.ok && r.error));
      assert.deepEqual(r.chat.tools?.map((t) => t.function.name), ['ok']);
      assert.deepEqual(r.meta.omittedTools, [type]);
    });
  }

  it('a built-in tool inside allowed_tools is passed over; the allowed functions remain', () => {
    const chat = chatOf({ ...base, tools: [{ type: 'function', name: 'f' }, { type: 'web_search' }], tool_choice: { type: 'allowed_tools', mode: 'auto', tools: [{ type: 'web_search' }, { type: 'function', name: 'f' }] } });
    assert.deepEqual(chat.tools?.map((t) => t.function.name), ['f']);
    assert.equal(chat.tool_choice, 'auto');
  });

  it('only built-in tools: the engine gets no tools and no tool_choice', () => {
    const chat = chatOf({ ...base, tools: [{ type: 'web_search', external_web_access: false }], tool_choice: 'auto' });
    assert.equal(chat.tools, undefined);
    assert.equal(chat.tool_choice, undefined);
  });

  it("a namespace tool's functions are offered flat; a replayed namespaced call finds the same flat name", () => {
    const ns = { type: 'namespace', name: 'multi_agent_v1', description: 'sub-agents', tools: [{ type: 'function', name: 'spawn_agent', description: 'spawn', parameters: { type: 'object', properties: {} } }, { type: 'function', name: 'close_agent' }] };
    const r = responsesToChat({
      model: 'm1',
      tools: [{ type: 'function', name: 'exec_command' }, ns],
      input: [
        { role: 'user', content: 'go' },
        { type: 'function_call', call_id: 'c1', namespace: 'multi_agent_v1', name: 'spawn_agent', arguments: '{}' },
        { type: 'function_call_output', call_id: 'c1', output: 'ok' },
      ],
      tool_choice: { type: 'function', namespace: 'multi_agent_v1', name: 'close_agent' },
    });
    assert.ok(r.ok, JSON.stringify(!r.ok && r.error));
    assert.deepEqual(r.chat.tools?.map((t) => t.function.name), ['exec_command', 'multi_agent_v1__spawn_agent', 'multi_agent_v1__close_agent']);
    assert.equal(r.chat.tools?.[1].function.description, 'spawn');
    assert.deepEqual(r.meta.namespaced['multi_agent_v1__spawn_agent'], { namespace: 'multi_agent_v1', name: 'spawn_agent' });
    const call = r.chat.messages[1] as { tool_calls: { function: { name: string } }[] };
    assert.equal(call.tool_calls[0].function.name, 'multi_agent_v1__spawn_agent');
    assert.deepEqual(r.chat.tool_choice, { type: 'function', function: { name: 'multi_agent_v1__close_agent' } });
    // The response echoes the namespace tool as the client declared it.
    assert.deepEqual(r.meta.tools[1], ns);
  });
});

describe('responsesToChat: bounds', () => {
  it('a body nested deeper than the limit is refused, without recursion', () => {
    let deep: unknown = 'x';
    for (let i = 0; i < 200_000; i++) deep = [deep];
    const e = errorOf({ ...base, metadata: { deep } });
    assert.equal(e.code, 'input_too_large');
    assert.match(e.message, /deeper than 64/);
  });

  it('too many input items, tools or content parts are refused', () => {
    assert.equal(errorOf({ model: 'm1', input: Array.from({ length: 11 }, () => ({ role: 'user', content: 'x' })) }, { maxInputItems: 10 }).param, 'input');
    assert.equal(errorOf({ ...base, tools: Array.from({ length: 3 }, (_, i) => ({ type: 'function', name: `f${i}` })) }, { maxTools: 2 }).param, 'tools');
    assert.equal(errorOf({ model: 'm1', input: [{ role: 'user', content: Array.from({ length: 5 }, () => ({ type: 'input_text', text: 'x' })) }] }, { maxContentParts: 4 }).param, 'input[0].content');
    assert.equal(errorOf({ model: 'm1', input: [{ role: 'system', content: Array.from({ length: 5 }, () => ({ type: 'input_text', text: 'x' })) }] }, { maxContentParts: 4 }).code, 'input_too_large');
  });

  it('never throws, whatever the body (seeded random bodies)', () => {
    const rnd = seeded(7);
    const pick = <T>(xs: T[]): T => xs[Math.floor(rnd() * xs.length)];
    const leaves = [null, undefined, 0, -1, 1.5, 'x', '', true, false, [], {}, NaN, 'resp_1', 'function', 'message', 'user', 'input_text', 'web_search'];
    const keys = ['model', 'input', 'instructions', 'tools', 'tool_choice', 'text', 'format', 'type', 'role', 'content', 'name', 'call_id', 'output', 'arguments', 'text', 'image_url', 'reasoning', 'effort', 'stream', 'mode', 'schema', 'previous_response_id', '__proto__', 'constructor'];
    const gen = (d: number): unknown => {
      if (d > 4 || rnd() < 0.3) return pick(leaves);
      if (rnd() < 0.4) return Array.from({ length: Math.floor(rnd() * 4) }, () => gen(d + 1));
      const o: Record<string, unknown> = {};
      for (let i = Math.floor(rnd() * 5); i > 0; i--) o[pick(keys)] = gen(d + 1);
      return o;
    };
    let ok = 0;
    for (let i = 0; i < 3000; i++) {
      const body = rnd() < 0.5 ? { model: 'm1', ...(gen(0) as object) } : gen(0);
      const r = responsesToChat(body);
      if (r.ok) ok++;
      else {
        assert.equal(r.error.status, 400);
        assert.equal(typeof r.error.message, 'string');
      }
    }
    assert.ok(ok > 0);
  });
});
