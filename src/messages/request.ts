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
      // Anthropic's API takes only text blocks as system; anything else would have to be dropped unseen.
      if (b.type !== 'text') return refuse('invalid_request', `${at}.type`, `${at}.type must be "text": system takes text blocks only (got ${show(b.type)}); send images and documents in a user turn`);
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

  if (req.max_tokens === null) refuse('invalid_request', 'max_tokens', 'max_tokens must be a whole number of at least 1 (got null)');
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

/** A content block's `type`, which every block has (a block without one is a 400, as Anthropic answers). */
function blockType(b: unknown, at: string): string {
  if (!isObj(b)) return refuse('invalid_request', at, `${at} must be a content block object`);
  if (typeof b.type !== 'string' || b.type === '') return refuse('invalid_request', `${at}.type`, `${at}.type is missing: every content block has a type such as "text"`);
  return b.type;
}

function show(v: unknown): string {
  return typeof v === 'string' ? JSON.stringify(v.slice(0, 40)) : v === undefined ? 'nothing' : typeof v;
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const WHITESPACE = /\s/;

/** Is `data` base64 (standard alphabet, padded; line breaks allowed, as MIME encoders write them)? */
export function isBase64(data: string): boolean {
  const compact = WHITESPACE.test(data) ? data.replace(/\s+/g, '') : data;
  return compact.length % 4 === 0 && BASE64.test(compact);
}

function base64Data(src: Obj, at: string): string {
  const data = src.data;
  if (typeof data !== 'string' || !isBase64(data)) return refuse('invalid_request', `${at}.data`, `${at}.data must be a base64 string (got ${typeof data === 'string' ? 'text that is not base64' : show(data)})`);
  return data;
}

const IMAGE_TYPES = ['image/jpeg', 'image/png', 'image/gif', 'image/webp'];

/** An image block's source, checked as Anthropic's API checks it. */
function imageSource(b: Obj, at: string): { url: string } {
  const src = b.source;
  if (!isObj(src)) return refuse('invalid_request', `${at}.source`, `${at}.source must be {"type":"base64","media_type":…,"data":…} or {"type":"url","url":…}`);
  if (src.type === 'base64') {
    const mt = src.media_type;
    if (typeof mt !== 'string' || !IMAGE_TYPES.includes(mt)) refuse('invalid_request', `${at}.source.media_type`, `${at}.source.media_type must be one of ${IMAGE_TYPES.join(', ')} (got ${show(mt)})`);
    return { url: `data:${mt as string};base64,${base64Data(src, `${at}.source`)}` };
  }
  if (src.type === 'url') return { url: str(src.url, `${at}.source.url`) };
  return refuse('unsupported_input', `${at}.source`, `${at}.source must be {"type":"base64",…} or {"type":"url",…}; viiwork has no file store, so file ids cannot be used`);
}

/** A document block's source, checked; what of it reaches the engine. */
function documentSource(b: Obj, at: string): { kind: 'file'; mediaType: string; data: string } | { kind: 'text'; text: string } {
  const src = b.source;
  const sat = `${at}.source`;
  if (!isObj(src)) return refuse('invalid_request', sat, `${sat} must be an object such as {"type":"base64","media_type":"application/pdf","data":…} or {"type":"text","data":…}`);
  switch (src.type) {
    case 'base64':
      return { kind: 'file', mediaType: typeof src.media_type === 'string' ? src.media_type : 'application/pdf', data: base64Data(src, sat) };
    case 'text':
      return { kind: 'text', text: str(src.data, `${sat}.data`) };
    case 'url':
      return { kind: 'text', text: `[document: ${str(src.url, `${sat}.url`)}]` };
    case 'content': {
      const c = src.content;
      if (typeof c === 'string') return { kind: 'text', text: c };
      if (!Array.isArray(c)) return refuse('invalid_request', `${sat}.content`, `${sat}.content must be a string or a list of content blocks`);
      return { kind: 'text', text: c.map((x, k) => blockText(x, `${sat}.content[${k}]`)).join('\n') };
    }
    case 'file':
      return refuse('unsupported_input', sat, `${sat} refers to an uploaded file, and viiwork has no file store: send the document as base64 or text`);
    default:
      return refuse('invalid_request', `${sat}.type`, `${sat}.type must be "base64", "text", "url" or "content" (got ${show(src.type)})`);
  }
}

/** The text of a text-like block; other blocks are described in words (the model still learns they were there). */
function blockText(b: unknown, at: string): string {
  const type = blockType(b, at);
  if (!isObj(b)) return '';
  switch (type) {
    case 'text':
      return str(b.text, `${at}.text`);
    case 'tool_reference':
      // Claude Code's tool search answers with references to the tools it has just loaded.
      return `[tool loaded: ${typeof b.tool_name === 'string' ? b.tool_name : 'unknown'}]`;
    case 'search_result': {
      const inner = Array.isArray(b.content) ? b.content.map((c, j) => blockText(c, `${at}.content[${j}]`)).join('\n') : '';
      return [typeof b.title === 'string' ? b.title : '', typeof b.source === 'string' ? b.source : '', inner].filter(Boolean).join('\n');
    }
    case 'document': {
      const d = documentSource(b, at);
      return d.kind === 'text' ? d.text : '[document]';
    }
    case 'image':
      imageSource(b, at);
      return '[image]';
    default:
      return `[${type.slice(0, 40)}]`;
  }
}

function imagePart(b: Obj, at: string): ChatContentPart {
  return { type: 'image_url', image_url: imageSource(b, at) };
}

function addUser(turns: ChatMessage[], blocks: unknown[], at: string): void {
  const parts: ChatContentPart[] = [];
  blocks.forEach((b, j) => {
    const bat = `${at}.content[${j}]`;
    const type = blockType(b, bat);
    if (!isObj(b)) return;
    switch (type) {
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
        const d = documentSource(b, bat);
        if (d.kind === 'file') return void parts.push({ type: 'file', file: { file_data: `data:${d.mediaType};base64,${d.data}`, ...(typeof b.title === 'string' ? { filename: b.title } : {}) } });
        return void parts.push({ type: 'text', text: d.text });
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
    blockType(b, bat);
    if (!isObj(b)) return;
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

/** Anthropic's rule for a tool's name. */
const TOOL_NAME = /^[A-Za-z0-9_-]{1,128}$/;

function translateTools(tools: unknown, limits: TranslationLimits, omitted: string[]): ChatTool[] {
  if (!present(tools)) return [];
  if (!Array.isArray(tools)) return refuse('invalid_request', 'tools', 'tools must be a list');
  if (tools.length > limits.maxTools) refuse('input_too_large', 'tools', `tools has ${tools.length} entries; at most ${limits.maxTools} are accepted`);
  const out: ChatTool[] = [];
  const nameAt = new Map<string, string>();
  tools.forEach((t, i) => {
    const at = `tools[${i}]`;
    if (!isObj(t)) return refuse('invalid_request', at, `${at} must be an object`);
    if (present(t.type) && t.type !== 'custom') {
      // Anthropic's own tools (web search, code execution, computer use, bash_2025…) run on Anthropic's side.
      omitted.push(typeof t.name === 'string' ? t.name : String(t.type));
      return;
    }
    const name = str(t.name, `${at}.name`);
    if (!TOOL_NAME.test(name)) refuse('invalid_request', `${at}.name`, `${at}.name ${show(name)} is not a tool name: 1 to 128 of A-Z, a-z, 0-9, "_" and "-"`);
    const first = nameAt.get(name);
    if (first !== undefined) refuse('invalid_request', `${at}.name`, `${at}.name "${name}" is the name of ${first} too: tool names must be unique`);
    nameAt.set(name, at);
    const fn: ChatTool['function'] = { name };
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
