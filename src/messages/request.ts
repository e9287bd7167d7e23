/**
 * An Anthropic Messages API request body → a Chat Completions request body,
 * for an engine that does not serve /v1/messages itself (SPEC section 4).
 * Pure: no I/O, never throws. Agent clients send many fields a local engine
 * cannot honour (thinking, cache_control, context_management, …): they are
 * accepted and left out, never refused; only a body that cannot mean a
 * conversation is a 400 naming the field. docs/api.md lists the mapping.
 */
import { guardTranslation, isObj, num, present, randomId, refuse, str, type ChatContentPart, type ChatMessage, type ChatRequest, type ChatTool, type ChatToolCall, type Obj, type TranslationLimits, type TranslationOptions, type TranslationResult } from '../chat/index.ts';
import type { MessageMeta } from './types.ts';

export interface MessagesToChatOptions extends TranslationOptions {
  /** The new message's id (`msg_…`); a random one when absent. */
  messageId?: string;
  /** Prompt-cache hygiene (api.agent_hygiene): drop Claude Code's per-session billing block from `system`. */
  hygiene?: boolean;
}

export type MessagesToChatResult = TranslationResult<MessageMeta>;

/** A fresh message id: `msg_` and 48 hex digits. */
export function newMessageId(random?: (n: number) => Buffer): string {
  return randomId('msg', random);
}

/**
 * Claude Code's first system block: `x-anthropic-billing-header: cc_version=…;`.
 * Its suffix changes with each session's first prompt, so at the start of the
 * prompt it would make every session miss the engine's cache.
 */
export const BILLING_HEADER_PREFIX = 'x-anthropic-billing-header:';

const HANDLED = new Set(['model', 'messages', 'system', 'tools', 'tool_choice', 'max_tokens', 'stop_sequences', 'temperature', 'top_p', 'top_k', 'stream']);

export function messagesToChat(req: unknown, opts: MessagesToChatOptions = {}): MessagesToChatResult {
  return guardTranslation(req, opts.limits, (body, limits) => translate(body, limits, opts));
}

/** Consecutive user turns become one (chat templates that want turns to alternate accept the result). */
function pushUser(messages: ChatMessage[], content: string | ChatContentPart[]): void {
  const last = messages[messages.length - 1];
  if (last?.role !== 'user') {
    messages.push({ role: 'user', content });
    return;
  }
  if (typeof last.content === 'string' && typeof content === 'string') {
    last.content = `${last.content}\n\n${content}`;
    return;
  }
  const asParts = (c: string | ChatContentPart[]): ChatContentPart[] => (typeof c === 'string' ? [{ type: 'text', text: c }] : c);
  last.content = [...asParts(last.content), ...asParts(content)];
}

function translate(req: Obj, limits: TranslationLimits, opts: MessagesToChatOptions): MessagesToChatResult {
  const model = req.model;
  if (typeof model !== 'string' || model === '') refuse('invalid_request', 'model', 'the request has no "model": name one of the models listed by GET /v1/models');
  const ignored = Object.keys(req).filter((k) => !HANDLED.has(k) && present(req[k]));

  // One leading system message: the top-level `system`, then any `role:"system"` messages before the first turn.
  const systemParts: string[] = [];
  if (typeof req.system === 'string') {
    if (req.system !== '') systemParts.push(req.system);
  } else if (Array.isArray(req.system)) {
    req.system.forEach((b, i) => {
      const at = `system[${i}]`;
      if (!isObj(b)) return refuse('invalid_request', at, `${at} must be a text block`);
      if (b.type !== 'text') return void ignored.push(`${at}.type=${String(b.type).slice(0, 40)}`);
      const text = str(b.text, `${at}.text`);
      if (opts.hygiene && text.startsWith(BILLING_HEADER_PREFIX)) return;
      systemParts.push(text);
    });
  } else if (present(req.system)) {
    refuse('invalid_request', 'system', 'system must be a string or a list of text blocks');
  }

  if (!Array.isArray(req.messages)) refuse('invalid_request', 'messages', 'messages must be a list of {role, content} turns');
  const list = req.messages as unknown[];
  if (list.length > limits.maxInputItems) refuse('input_too_large', 'messages', `messages has ${list.length} turns; at most ${limits.maxInputItems} are accepted`);

  const turns: ChatMessage[] = [];
  list.forEach((m, i) => addTurn(turns, systemParts, m, `messages[${i}]`, limits));
  const messages: ChatMessage[] = systemParts.length ? [{ role: 'system', content: systemParts.join('\n') }, ...turns] : turns;
  if (turns.length === 0) refuse('invalid_request', 'messages', 'messages is empty: send at least one user turn');

  const chat: ChatRequest = { model: model as string, messages };

  const omittedTools: string[] = [];
  const tools = translateTools(req.tools, limits, omittedTools);
  if (tools.length > 0) chat.tools = tools;
  translateToolChoice(req.tool_choice, chat, omittedTools);

  if (present(req.max_tokens)) {
    const v = req.max_tokens;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) refuse('invalid_request', 'max_tokens', 'max_tokens must be a whole number of at least 1');
    chat.max_tokens = v as number;
  }
  let stopSequences: string[] = [];
  if (present(req.stop_sequences)) {
    if (!Array.isArray(req.stop_sequences)) refuse('invalid_request', 'stop_sequences', 'stop_sequences must be a list of strings');
    stopSequences = (req.stop_sequences as unknown[]).map((s, i) => str(s, `stop_sequences[${i}]`)).filter((s) => s !== '');
    if (stopSequences.length) chat.stop = stopSequences;
  }
  if (present(req.temperature)) chat.temperature = num(req.temperature, 'temperature', 0, 2);
  if (present(req.top_p)) chat.top_p = num(req.top_p, 'top_p', 0, 1);
  if (present(req.top_k)) chat.top_k = Math.round(num(req.top_k, 'top_k', 0, 1e6));
  const stream = req.stream === true;
  if (stream) {
    chat.stream = true;
    chat.stream_options = { include_usage: true };
  }
  return { ok: true, chat, meta: { id: opts.messageId ?? newMessageId(), model: model as string, stream, stopSequences, omittedTools, ignored } };
}

// ---- turns ---------------------------------------------------------------

function addTurn(turns: ChatMessage[], systemParts: string[], m: unknown, at: string, limits: TranslationLimits): void {
  if (!isObj(m)) refuse('invalid_request', at, `${at} must be an object with role and content`);
  const role = (m as Obj).role;
  const content = (m as Obj).content;
  if (typeof content !== 'string' && !Array.isArray(content)) refuse('invalid_request', `${at}.content`, `${at}.content must be a string or a list of content blocks`);
  if (Array.isArray(content) && content.length > limits.maxContentParts) refuse('input_too_large', `${at}.content`, `${at}.content has ${content.length} blocks; at most ${limits.maxContentParts} are accepted`);
  const blocks: unknown[] = typeof content === 'string' ? [{ type: 'text', text: content }] : (content as unknown[]);
  switch (role) {
    case 'system': {
      // Claude Code sends its environment as a system turn. Before the first turn it joins the system
      // message; later, a second system message would break chat templates, so it travels as user text.
      const text = blocks.map((b, j) => blockText(b, `${at}.content[${j}]`)).join('\n');
      if (turns.length === 0) systemParts.push(text);
      else pushUser(turns, text);
      return;
    }
    case 'user':
      return addUser(turns, blocks, at);
    case 'assistant':
      return addAssistant(turns, blocks, at);
    default:
      refuse('invalid_request', `${at}.role`, `${at}.role must be user, assistant or system (got ${JSON.stringify(typeof role === 'string' ? role.slice(0, 40) : typeof role)})`);
  }
}

/** The text of a text-like block; other blocks are described in words (the model still learns they were there). */
function blockText(b: unknown, at: string): string {
  if (!isObj(b)) return refuse('invalid_request', at, `${at} must be a content block object`);
  switch (b.type) {
    case 'text':
      return str(b.text, `${at}.text`);
    case 'tool_reference':
      // Claude Code's tool search answers with references to the tools it has just loaded.
      return `[tool loaded: ${typeof b.tool_name === 'string' ? b.tool_name : 'unknown'}]`;
    case 'search_result': {
      const inner = Array.isArray(b.content) ? b.content.map((c, j) => blockText(c, `${at}.content[${j}]`)).join('\n') : '';
      return [typeof b.title === 'string' ? b.title : '', typeof b.source === 'string' ? b.source : '', inner].filter(Boolean).join('\n');
    }
    case 'document':
      return isObj(b.source) && b.source.type === 'text' && typeof b.source.data === 'string' ? b.source.data : '[document]';
    case 'image':
      return '[image]';
    default:
      return `[${String(b.type).slice(0, 40)}]`;
  }
}

function imagePart(b: Obj, at: string): ChatContentPart {
  const src = b.source;
  if (isObj(src) && src.type === 'base64') return { type: 'image_url', image_url: { url: `data:${str(src.media_type, `${at}.source.media_type`)};base64,${str(src.data, `${at}.source.data`)}` } };
  if (isObj(src) && src.type === 'url') return { type: 'image_url', image_url: { url: str(src.url, `${at}.source.url`) } };
  return refuse('unsupported_input', `${at}.source`, `${at}.source must be {"type":"base64",…} or {"type":"url",…}; viiwork has no file store, so file ids cannot be used`);
}

function addUser(turns: ChatMessage[], blocks: unknown[], at: string): void {
  const parts: ChatContentPart[] = [];
  blocks.forEach((b, j) => {
    const bat = `${at}.content[${j}]`;
    if (!isObj(b)) return refuse('invalid_request', bat, `${bat} must be a content block object`);
    switch (b.type) {
      case 'tool_result': {
        // Chat wants each result as a tool message right after the assistant's calls, before any user text.
        const id = str(b.tool_use_id, `${bat}.tool_use_id`);
        let text = typeof b.content === 'string' ? b.content : Array.isArray(b.content) ? b.content.map((c, k) => blockText(c, `${bat}.content[${k}]`)).join('\n') : '';
        if (b.is_error === true) text = `Error: ${text}`;
        turns.push({ role: 'tool', tool_call_id: id, content: text });
        return;
      }
      case 'image':
        return void parts.push(imagePart(b, bat));
      case 'document': {
        const src = b.source;
        if (isObj(src) && src.type === 'base64' && typeof src.data === 'string') {
          const mt = typeof src.media_type === 'string' ? src.media_type : 'application/pdf';
          return void parts.push({ type: 'file', file: { file_data: `data:${mt};base64,${src.data}`, ...(typeof b.title === 'string' ? { filename: b.title } : {}) } });
        }
        return void parts.push({ type: 'text', text: blockText(b, bat) });
      }
      default:
        return void parts.push({ type: 'text', text: blockText(b, bat) });
    }
  });
  if (parts.length === 0) return;
  // Text alone travels as a plain string: every chat template understands that.
  pushUser(turns, parts.every((p) => p.type === 'text') ? parts.map((p) => (p as { text: string }).text).join('\n') : parts);
}

function addAssistant(turns: ChatMessage[], blocks: unknown[], at: string): void {
  const texts: string[] = [];
  const calls: ChatToolCall[] = [];
  blocks.forEach((b, j) => {
    const bat = `${at}.content[${j}]`;
    if (!isObj(b)) return refuse('invalid_request', bat, `${bat} must be a content block object`);
    if (b.type === 'text') texts.push(str(b.text, `${bat}.text`));
    else if (b.type === 'tool_use') {
      calls.push({ id: str(b.id, `${bat}.id`), type: 'function', function: { name: str(b.name, `${bat}.name`), arguments: JSON.stringify(b.input ?? {}) } });
    }
    // thinking, redacted_thinking, server tool blocks: the engine cannot replay them; text and calls carry the turn.
  });
  const msg: ChatMessage = { role: 'assistant', content: texts.length ? texts.join('\n') : null };
  if (calls.length) msg.tool_calls = calls;
  if (msg.content === null && !calls.length) return;
  turns.push(msg);
}

// ---- tools ---------------------------------------------------------------

function translateTools(tools: unknown, limits: TranslationLimits, omitted: string[]): ChatTool[] {
  if (!present(tools)) return [];
  if (!Array.isArray(tools)) return refuse('invalid_request', 'tools', 'tools must be a list');
  if (tools.length > limits.maxTools) refuse('input_too_large', 'tools', `tools has ${tools.length} entries; at most ${limits.maxTools} are accepted`);
  const out: ChatTool[] = [];
  tools.forEach((t, i) => {
    const at = `tools[${i}]`;
    if (!isObj(t)) return refuse('invalid_request', at, `${at} must be an object`);
    if (present(t.type) && t.type !== 'custom') {
      // Anthropic's own tools (web search, code execution, computer use, bash_2025…) run on Anthropic's side.
      omitted.push(typeof t.name === 'string' ? t.name : String(t.type));
      return;
    }
    const fn: ChatTool['function'] = { name: str(t.name, `${at}.name`) };
    if (present(t.description)) fn.description = str(t.description, `${at}.description`);
    if (present(t.input_schema)) {
      if (!isObj(t.input_schema)) refuse('invalid_request', `${at}.input_schema`, `${at}.input_schema must be a JSON schema object`);
      fn.parameters = t.input_schema as Obj;
    } else fn.parameters = { type: 'object', properties: {} };
    if (typeof t.strict === 'boolean') fn.strict = t.strict;
    out.push({ type: 'function', function: fn });
  });
  return out;
}

function translateToolChoice(choice: unknown, chat: ChatRequest, omitted: string[]): void {
  if (!present(choice)) return;
  if (!isObj(choice)) return refuse('invalid_request', 'tool_choice', 'tool_choice must be an object like {"type":"auto"}');
  if (choice.disable_parallel_tool_use === true) chat.parallel_tool_calls = false;
  switch (choice.type) {
    case 'auto':
      if (chat.tools) chat.tool_choice = 'auto';
      return;
    case 'none':
      if (chat.tools) chat.tool_choice = 'none';
      return;
    case 'any':
      if (!chat.tools) refuse('invalid_request', 'tool_choice', 'tool_choice {"type":"any"} needs at least one tool the engine can call');
      chat.tool_choice = 'required';
      return;
    case 'tool': {
      const name = str(choice.name, 'tool_choice.name');
      if (omitted.includes(name)) refuse('unsupported_tool', 'tool_choice', `tool_choice forces "${name.slice(0, 80)}", a tool of Anthropic's own that viiwork leaves out (its engines can only call tools you define)`);
      if (!chat.tools?.some((t) => t.function.name === name)) refuse('invalid_request', 'tool_choice.name', `tool_choice names "${name.slice(0, 80)}", which is not in tools`);
      chat.tool_choice = { type: 'function', function: { name } };
      return;
    }
    default:
      refuse('invalid_request', 'tool_choice.type', 'tool_choice.type must be auto, any, tool or none');
  }
}
