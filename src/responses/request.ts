/**
 * A Responses API request body → a Chat Completions request body, for an
 * engine that does not serve /v1/responses itself. Pure: no I/O, never
 * throws; whatever cannot be translated is a 400 that names the field.
 * docs/api.md lists what is supported; this file is its implementation.
 */
import { guardTranslation, isObj, num, present, randomId, refuse, str, type ChatContentPart, type ChatMessage, type ChatRequest, type ChatTool, type ChatToolCall, type Obj, type TranslationLimits, type TranslationOptions, type TranslationResult } from '../chat/index.ts';
import type { ResponseMeta } from './types.ts';

export interface ResponsesToChatOptions extends TranslationOptions {
  /** The new response's id (`resp_…`); a random one when absent. */
  responseId?: string;
  /** Unix seconds; now when absent. */
  createdAt?: number;
}

export type ResponsesToChatResult = TranslationResult<ResponseMeta>;

/** A fresh response id: `resp_` and 48 hex digits. */
export function newResponseId(random?: (n: number) => Buffer): string {
  return randomId('resp', random);
}

/** Request keys that need state kept by the server; this node keeps none. */
const STATEFUL = {
  previous_response_id: 'previous_response_id refers to a stored response, and viiwork keeps no conversation state: send the whole history in `input` (earlier output items, function_call and function_call_output items included) and omit previous_response_id',
  conversation: 'conversation refers to a stored conversation, and viiwork keeps no conversation state: send the whole history in `input` and omit conversation',
  prompt: 'prompt refers to a prompt template stored at OpenAI, which viiwork cannot reach: send the text in `instructions` and `input` instead',
} as const;

/** Accepted and echoed or dropped without effect (docs/api.md says which). */
const IGNORED = new Set([
  'metadata',
  'store',
  'user',
  'include',
  'truncation',
  'service_tier',
  'safety_identifier',
  'prompt_cache_key',
  'prompt_cache_retention',
  'prompt_cache_options',
  'top_logprobs',
  'moderation',
  'context_management',
  'stream_options',
]);

const HANDLED = new Set([
  'model',
  'input',
  'instructions',
  'tools',
  'tool_choice',
  'text',
  'temperature',
  'top_p',
  'max_output_tokens',
  'parallel_tool_calls',
  'reasoning',
  'stream',
  'background',
  ...Object.keys(STATEFUL),
]);

const show = (v: unknown) => JSON.stringify(typeof v === 'string' ? v.slice(0, 60) : v === null ? null : typeof v);

function bool(v: unknown, param: string): boolean {
  if (typeof v !== 'boolean') refuse('invalid_request', param, `${param} must be true or false`);
  return v as boolean;
}

/** Nesting depth over `max`, found without recursion (a hostile body must not blow the stack). */
function deeperThan(root: unknown, max: number): boolean {
  const stack: [unknown, number][] = [[root, 1]];
  while (stack.length > 0) {
    const [v, d] = stack.pop()!;
    if (d > max) return true;
    const children = Array.isArray(v) ? v : Object.values(v as Obj);
    for (const c of children) if (typeof c === 'object' && c !== null) stack.push([c, d + 1]);
  }
  return false;
}

export function responsesToChat(req: unknown, opts: ResponsesToChatOptions = {}): ResponsesToChatResult {
  return guardTranslation(req, opts.limits, (body, limits) => translate(body, limits, opts));
}

function translate(req: Obj, limits: TranslationLimits, opts: ResponsesToChatOptions): ResponsesToChatResult {
  if (deeperThan(req, limits.maxDepth)) refuse('input_too_large', null, `the request nests deeper than ${limits.maxDepth} levels`);

  for (const [key, message] of Object.entries(STATEFUL)) {
    const v = req[key];
    if (present(v) && v !== '') refuse('stateful_request', key, message);
  }
  if (req.background === true) refuse('unsupported_parameter', 'background', 'background responses are stored and polled by id, and viiwork keeps no response state: omit background (or set it to false) and keep the connection open, or stream');

  const model = req.model;
  if (typeof model !== 'string' || model === '') refuse('invalid_request', 'model', 'the request has no "model": name one of the models listed by GET /v1/models');

  const ignored = Object.keys(req).filter((k) => !HANDLED.has(k) && present(req[k]));
  const messages: ChatMessage[] = [];

  let instructions: string | null = null;
  if (present(req.instructions)) {
    instructions = str(req.instructions, 'instructions');
    if (instructions !== '') messages.push({ role: 'system', content: instructions });
  }

  if (typeof req.input === 'string') {
    messages.push({ role: 'user', content: req.input });
  } else if (Array.isArray(req.input)) {
    if (req.input.length > limits.maxInputItems) refuse('input_too_large', 'input', `input has ${req.input.length} items; at most ${limits.maxInputItems} are accepted`);
    req.input.forEach((item, i) => addInputItem(messages, item, `input[${i}]`, limits));
  } else if (present(req.input)) {
    refuse('invalid_request', 'input', 'input must be a string or a list of input items');
  }
  if (messages.length === 0) refuse('invalid_request', 'input', 'the request has no input: send `input` as a string or a list of messages');

  const chat: ChatRequest = { model: model as string, messages };

  const tools = translateTools(req.tools, limits);
  const toolChoice = translateToolChoice(req.tool_choice, tools);
  if (toolChoice.tools.length > 0) chat.tools = toolChoice.tools;
  // A choice about tools the engine was not shown at all (every one was a built-in) is left out with them.
  if (toolChoice.choice !== undefined && (toolChoice.tools.length > 0 || tools.omitted.length === 0)) chat.tool_choice = toolChoice.choice;

  let parallelToolCalls = true;
  if (present(req.parallel_tool_calls)) chat.parallel_tool_calls = parallelToolCalls = bool(req.parallel_tool_calls, 'parallel_tool_calls');

  const text = translateText(req.text, chat, ignored);

  let temperature: number | null = null;
  if (present(req.temperature)) chat.temperature = temperature = num(req.temperature, 'temperature', 0, 2);
  let topP: number | null = null;
  if (present(req.top_p)) chat.top_p = topP = num(req.top_p, 'top_p', 0, 1);
  let maxOutputTokens: number | null = null;
  if (present(req.max_output_tokens)) {
    const v = req.max_output_tokens;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) refuse('invalid_request', 'max_output_tokens', 'max_output_tokens must be a whole number of at least 1');
    chat.max_tokens = maxOutputTokens = v as number;
  }

  let reasoning: ResponseMeta['reasoning'] = null;
  if (present(req.reasoning)) {
    if (!isObj(req.reasoning)) refuse('invalid_request', 'reasoning', 'reasoning must be an object like {"effort":"low"}');
    const r = req.reasoning as Obj;
    const effort = present(r.effort) ? str(r.effort, 'reasoning.effort') : null;
    if (effort !== null) chat.reasoning_effort = effort;
    for (const k of Object.keys(r)) if (k !== 'effort' && present(r[k])) ignored.push(`reasoning.${k}`);
    reasoning = { effort, summary: null };
  }

  let stream = false;
  if (present(req.stream)) stream = bool(req.stream, 'stream');
  if (stream) {
    chat.stream = true;
    chat.stream_options = { include_usage: true };
  }

  const metadata: Record<string, string> = {};
  if (isObj(req.metadata)) for (const [k, v] of Object.entries(req.metadata)) if (typeof v === 'string') metadata[k] = v;

  const meta: ResponseMeta = {
    id: opts.responseId ?? newResponseId(),
    createdAt: opts.createdAt ?? Math.floor(Date.now() / 1000),
    model: model as string,
    instructions,
    tools: tools.echo,
    toolChoice: present(req.tool_choice) ? req.tool_choice : 'auto',
    parallelToolCalls,
    temperature,
    topP,
    maxOutputTokens,
    text,
    reasoning,
    metadata,
    user: typeof req.user === 'string' ? req.user : null,
    stream,
    ignored,
    namespaced: tools.namespaced,
    omittedTools: tools.omitted,
  };
  return { ok: true, chat, meta };
}

// ---- input items -------------------------------------------------------

function addInputItem(messages: ChatMessage[], item: unknown, at: string, limits: TranslationLimits): void {
  if (!isObj(item)) refuse('invalid_request', at, `${at} must be an object (a message, a function_call or a function_call_output)`);
  const it = item as Obj;
  const type = it.type ?? (present(it.role) ? 'message' : undefined);
  switch (type) {
    case 'message':
      messages.push(translateMessage(it, at, limits));
      return;
    case 'function_call': {
      const call: ChatToolCall = {
        id: str(it.call_id, `${at}.call_id`),
        type: 'function',
        // A replayed call of a namespaced function carries its namespace: the engine saw the flat name.
        function: { name: typeof it.namespace === 'string' && it.namespace !== '' ? flatName(it.namespace, str(it.name, `${at}.name`)) : str(it.name, `${at}.name`), arguments: present(it.arguments) ? str(it.arguments, `${at}.arguments`) : '{}' },
      };
      // One assistant turn in chat holds its text and all its tool calls.
      const last = messages[messages.length - 1];
      if (last?.role === 'assistant') (last.tool_calls ??= []).push(call);
      else messages.push({ role: 'assistant', content: null, tool_calls: [call] });
      return;
    }
    case 'function_call_output': {
      const callId = str(it.call_id, `${at}.call_id`);
      const out = it.output;
      let content: string;
      if (typeof out === 'string') content = out;
      else if (Array.isArray(out)) content = joinText(out, `${at}.output`, limits, 'a function_call_output');
      else content = refuse('invalid_request', `${at}.output`, `${at}.output must be a string or a list of input_text parts`);
      messages.push({ role: 'tool', tool_call_id: callId, content });
      return;
    }
    case 'reasoning':
      // Earlier reasoning cannot be replayed to a chat engine; the turn's text and tool calls carry the conversation.
      return;
    case 'item_reference':
      return refuse('stateful_request', `${at}.type`, `${at} is an item_reference, which points at a stored item, and viiwork keeps no conversation state: send the item itself in \`input\``);
    case undefined:
      return refuse('invalid_request', `${at}.type`, `${at} has neither "type" nor "role"`);
    default:
      return refuse('unsupported_input', `${at}.type`, `${at} is a ${show(type)} item, which viiwork cannot translate for a chat engine: input accepts messages, function_call and function_call_output items (and ignores reasoning items)`);
  }
}

function translateMessage(it: Obj, at: string, limits: TranslationLimits): ChatMessage {
  const role = it.role;
  const content = it.content;
  if (typeof content !== 'string' && !Array.isArray(content)) refuse('invalid_request', `${at}.content`, `${at}.content must be a string or a list of content parts`);
  switch (role) {
    case 'system':
    case 'developer':
      // Chat templates of local models know `system`, not always `developer`.
      return { role: 'system', content: typeof content === 'string' ? content : joinText(content as unknown[], `${at}.content`, limits, `a ${role} message`) };
    case 'assistant':
      return { role: 'assistant', content: typeof content === 'string' ? content : joinText(content as unknown[], `${at}.content`, limits, 'an assistant message') };
    case 'user':
      return { role: 'user', content: typeof content === 'string' ? content : userParts(content as unknown[], `${at}.content`, limits) };
    default:
      return refuse('invalid_request', `${at}.role`, `${at}.role must be one of user, assistant, system, developer (got ${show(role)})`);
  }
}

const TEXT_PARTS = new Set(['input_text', 'output_text', 'text']);

/** Text parts joined by a newline; a refusal counts as text; anything else is refused. */
function joinText(parts: unknown[], at: string, limits: TranslationLimits, what: string): string {
  if (parts.length > limits.maxContentParts) refuse('input_too_large', at, `${at} has ${parts.length} parts; at most ${limits.maxContentParts} are accepted`);
  return parts
    .map((p, j) => {
      const pat = `${at}[${j}]`;
      if (!isObj(p)) return refuse('invalid_request', pat, `${pat} must be an object`);
      const part = p as Obj;
      if (TEXT_PARTS.has(part.type as string)) return str(part.text, `${pat}.text`);
      if (part.type === 'refusal') return str(part.refusal, `${pat}.refusal`);
      return refuse('unsupported_input', `${pat}.type`, `${pat} is a ${show(part.type)} part; ${what} can only carry text when translated for a chat engine`);
    })
    .join('\n');
}

function userParts(parts: unknown[], at: string, limits: TranslationLimits): string | ChatContentPart[] {
  if (parts.length > limits.maxContentParts) refuse('input_too_large', at, `${at} has ${parts.length} parts; at most ${limits.maxContentParts} are accepted`);
  const out: ChatContentPart[] = parts.map((p, j) => {
    const pat = `${at}[${j}]`;
    if (!isObj(p)) return refuse('invalid_request', pat, `${pat} must be an object`);
    const part = p as Obj;
    switch (part.type) {
      case 'input_text':
      case 'output_text':
      case 'text':
        return { type: 'text', text: str(part.text, `${pat}.text`) };
      case 'input_image': {
        if (typeof part.image_url !== 'string' || part.image_url === '')
          return refuse('unsupported_input', pat, `${pat} has no image_url; viiwork has no file store, so send the image as a URL or a data: URL in image_url (file_id is not supported)`);
        const detail = part.detail === 'low' || part.detail === 'high' || part.detail === 'auto' ? part.detail : undefined;
        return { type: 'image_url', image_url: detail ? { url: part.image_url, detail } : { url: part.image_url } };
      }
      case 'input_file': {
        if (typeof part.file_data !== 'string' || part.file_data === '')
          return refuse('unsupported_input', pat, `${pat} has no file_data; viiwork has no file store, so send the file inline in file_data (file_id and file_url are not supported)`);
        const file: { file_data: string; filename?: string } = { file_data: part.file_data };
        if (typeof part.filename === 'string') file.filename = part.filename;
        return { type: 'file', file };
      }
      case 'input_audio': {
        const a = part.input_audio;
        if (!isObj(a) || typeof a.data !== 'string' || typeof a.format !== 'string') return refuse('invalid_request', `${pat}.input_audio`, `${pat}.input_audio must be {"data": base64, "format": "wav"|"mp3"}`);
        return { type: 'input_audio', input_audio: { data: a.data, format: a.format } };
      }
      default:
        return refuse('unsupported_input', `${pat}.type`, `${pat} is a ${show(part.type)} part; a user message accepts input_text, input_image, input_file (inline) and input_audio`);
    }
  });
  // Text alone travels as a plain string: every chat template understands that.
  if (out.every((p) => p.type === 'text')) return out.map((p) => (p as { text: string }).text).join('\n');
  return out;
}

// ---- tools -------------------------------------------------------------

/** The name a namespaced function is offered to the engine by: one flat function name. */
export function flatName(namespace: string, name: string): string {
  return `${namespace}${NAMESPACE_SEPARATOR}${name}`;
}
export const NAMESPACE_SEPARATOR = '__';

/**
 * A namespace name an engine can take inside a function name (OpenAI's rule
 * for function names), without the separator: with every flat name unique
 * as well (checked as they are made), a call maps back to one tool.
 */
const NAMESPACE_NAME = /^[A-Za-z0-9_-]{1,64}$/;

interface Tools {
  chat: ChatTool[];
  echo: Obj[];
  namespaced: Record<string, { namespace: string; name: string }>;
  /** Namespace names declared. */
  namespaces: Set<string>;
  /** Types of the built-in tools left out. */
  omitted: string[];
}

function functionTool(tool: Obj, at: string, name = str(tool.name, `${at}.name`)): ChatTool {
  const fn: ChatTool['function'] = { name };
  if (present(tool.description)) fn.description = str(tool.description, `${at}.description`);
  if (present(tool.parameters)) {
    if (!isObj(tool.parameters)) refuse('invalid_request', `${at}.parameters`, `${at}.parameters must be a JSON schema object`);
    fn.parameters = tool.parameters as Obj;
  }
  if (present(tool.strict)) fn.strict = bool(tool.strict, `${at}.strict`);
  return { type: 'function', function: fn };
}

function translateTools(tools: unknown, limits: TranslationLimits): Tools {
  const out: Tools = { chat: [], echo: [], namespaced: {}, namespaces: new Set(), omitted: [] };
  if (!present(tools)) return out;
  // Where each flat name and namespace was declared: a second one is a 400 naming both.
  const flatAt = new Map<string, string>();
  const namespaceAt = new Map<string, string>();
  const offer = (fn: ChatTool, at: string) => {
    const name = fn.function.name;
    const first = flatAt.get(name);
    if (first !== undefined) refuse('invalid_request', `${at}.name`, `${at} reaches the engine as "${name.slice(0, 80)}", as ${first} does: tool names (a namespace's functions as namespace__name) must be unique; rename one`);
    flatAt.set(name, at);
    out.chat.push(fn);
  };
  if (!Array.isArray(tools)) return refuse('invalid_request', 'tools', 'tools must be a list');
  if (tools.length > limits.maxTools) refuse('input_too_large', 'tools', `tools has ${tools.length} entries; at most ${limits.maxTools} are accepted`);
  tools.forEach((t, i) => {
    const at = `tools[${i}]`;
    if (!isObj(t)) refuse('invalid_request', at, `${at} must be an object`);
    const tool = t as Obj;
    if (tool.type === 'function') {
      const fn = functionTool(tool, at);
      offer(fn, at);
      out.echo.push({ type: 'function', name: fn.function.name, description: fn.function.description ?? null, parameters: fn.function.parameters ?? null, strict: fn.function.strict ?? null });
      return;
    }
    if (tool.type === 'namespace') {
      // The engine knows only flat functions: each of the namespace's is offered under one flat name.
      const namespace = str(tool.name, `${at}.name`);
      if (!NAMESPACE_NAME.test(namespace) || namespace.includes(NAMESPACE_SEPARATOR))
        refuse('invalid_request', `${at}.name`, `${at}.name ${show(namespace)} is not a namespace name engines accept: 1 to 64 of A-Z, a-z, 0-9, "_" and "-", without "${NAMESPACE_SEPARATOR}"`);
      const first = namespaceAt.get(namespace);
      if (first !== undefined) refuse('invalid_request', `${at}.name`, `${at} declares namespace "${namespace}" again (${first} did): merge their tools into one namespace`);
      namespaceAt.set(namespace, at);
      out.namespaces.add(namespace);
      if (!Array.isArray(tool.tools)) refuse('invalid_request', `${at}.tools`, `${at}.tools must be a list of function tools`);
      (tool.tools as unknown[]).forEach((inner, j) => {
        const iat = `${at}.tools[${j}]`;
        if (!isObj(inner)) refuse('invalid_request', iat, `${iat} must be an object`);
        if ((inner as Obj).type !== 'function') return void out.omitted.push(`${namespace}.${String((inner as Obj).type).slice(0, 40)}`);
        const bare = str((inner as Obj).name, `${iat}.name`);
        const flat = flatName(namespace, bare);
        offer(functionTool(inner as Obj, iat, flat), iat);
        out.namespaced[flat] = { namespace, name: bare };
      });
      out.echo.push(tool);
      return;
    }
    if (typeof tool.type === 'string') {
      // Built-in tools run on OpenAI's side (or in a harness viiwork does not have): left out, named in a header.
      out.omitted.push(tool.type.slice(0, 60));
      return;
    }
    refuse('invalid_request', `${at}.type`, `${at}.type must be "function" or "namespace"`);
  });
  return out;
}

function forcedOmitted(type: unknown, at: string): never {
  return refuse(
    'unsupported_tool',
    at,
    `${at} forces a built-in tool of type ${show(type)}, which viiwork leaves out (its engines can only call functions you define): declare it as a {"type":"function"} tool and run it in your client, or use "auto"`,
  );
}

function translateToolChoice(choice: unknown, declared: Tools): { tools: ChatTool[]; choice?: ChatRequest['tool_choice'] } {
  const { chat: tools, namespaced } = declared;
  if (!present(choice)) return { tools };
  if (choice === 'none' || choice === 'auto' || choice === 'required') return { tools, choice };
  if (typeof choice === 'string') return refuse('invalid_request', 'tool_choice', `tool_choice must be "none", "auto", "required" or an object (got ${show(choice)})`);
  if (!isObj(choice)) return refuse('invalid_request', 'tool_choice', 'tool_choice must be a string or an object');
  const c = choice as Obj;
  // A choice names a function the request declares (the engine would be asked to force one it was never shown).
  const nameOf = (o: Obj, at: string) => {
    const name = str(o.name, `${at}.name`);
    const flat = typeof o.namespace === 'string' ? flatName(o.namespace, name) : name;
    if (!tools.some((t) => t.function.name === flat)) {
      const what = typeof o.namespace === 'string' ? `function "${name.slice(0, 80)}" of namespace "${o.namespace.slice(0, 80)}"` : `function "${name.slice(0, 80)}"`;
      refuse('invalid_request', `${at}.name`, `${at} names ${what}, which is not in tools; name one of the request's tools`);
    }
    return flat;
  };
  if (c.type === 'function') return { tools, choice: { type: 'function', function: { name: nameOf(c, 'tool_choice') } } };
  if (c.type === 'allowed_tools') {
    // Chat engines rarely know allowed_tools: send only the allowed functions instead (built-ins are left out anyway).
    if (c.mode !== 'auto' && c.mode !== 'required') refuse('invalid_request', 'tool_choice.mode', 'tool_choice.mode must be "auto" or "required"');
    if (!Array.isArray(c.tools)) refuse('invalid_request', 'tool_choice.tools', 'tool_choice.tools must be a list');
    const names = new Set<string>();
    (c.tools as unknown[]).forEach((t, i) => {
      const at = `tool_choice.tools[${i}]`;
      if (!isObj(t)) return refuse('invalid_request', at, `${at} must be an object`);
      const o = t as Obj;
      if (o.type === 'function') names.add(nameOf(o, at));
      else if (o.type === 'namespace') {
        const space = str(o.name, `${at}.name`);
        if (!declared.namespaces.has(space)) refuse('invalid_request', `${at}.name`, `${at} names namespace "${space.slice(0, 80)}", which is not in tools; name one of the request's namespaces`);
        for (const [flat, ns] of Object.entries(namespaced)) if (ns.namespace === space) names.add(flat);
      }
    });
    return { tools: tools.filter((t) => names.has(t.function.name)), choice: c.mode as 'auto' | 'required' };
  }
  return forcedOmitted(c.type, 'tool_choice');
}

// ---- text format -------------------------------------------------------

function translateText(text: unknown, chat: ChatRequest, ignored: string[]): Obj {
  const plain = { format: { type: 'text' } };
  if (!present(text)) return plain;
  if (!isObj(text)) return refuse('invalid_request', 'text', 'text must be an object like {"format":{"type":"json_object"}}');
  const t = text as Obj;
  if (present(t.verbosity)) ignored.push('text.verbosity');
  const f = t.format;
  if (!present(f)) return { ...plain, ...t, format: plain.format };
  if (!isObj(f)) return refuse('invalid_request', 'text.format', 'text.format must be an object');
  const format = f as Obj;
  switch (format.type) {
    case 'text':
      break;
    case 'json_object':
      chat.response_format = { type: 'json_object' };
      break;
    case 'json_schema': {
      const name = str(format.name, 'text.format.name');
      if (!isObj(format.schema)) refuse('invalid_request', 'text.format.schema', 'text.format.schema must be a JSON schema object');
      const js: { name: string; schema: Obj; strict?: boolean; description?: string } = { name, schema: format.schema as Obj };
      if (present(format.strict)) js.strict = bool(format.strict, 'text.format.strict');
      if (present(format.description)) js.description = str(format.description, 'text.format.description');
      chat.response_format = { type: 'json_schema', json_schema: js };
      break;
    }
    default:
      refuse('unsupported_parameter', 'text.format.type', `text.format.type must be "text", "json_object" or "json_schema" (got ${show(format.type)})`);
  }
  return t;
}
