/**
 * A whole chat completion → a Responses API `response` object, and the
 * pieces the stream translator shares with it (ids, usage, the response
 * envelope). Pure; never throws on a malformed completion (the result is a
 * `failed` response that says why).
 */
import { readChatCompletion, readChatUsage } from '../chat/index.ts';
import type { ItemStatus, OutputItem, ResponseMeta, ResponseObject, ResponseStatus, ResponseUsage } from './types.ts';

/** The id of the `index`-th output item of a response: `msg_…`, `fc_…`, `rs_…` (unique within the response, derived from its id). */
export function itemId(meta: Pick<ResponseMeta, 'id'>, prefix: 'msg' | 'fc' | 'rs', index: number): string {
  return `${prefix}_${meta.id.replace(/^resp_/, '')}${index.toString(16).padStart(2, '0')}`;
}

/** Chat usage → Responses usage; undefined when the engine reported none. */
export function chatUsageToResponses(usage: unknown): ResponseUsage | undefined {
  const u = readChatUsage(usage);
  if (!u) return undefined;
  return {
    input_tokens: u.promptTokens,
    input_tokens_details: { cached_tokens: u.cachedTokens, cache_write_tokens: 0 },
    output_tokens: u.completionTokens,
    output_tokens_details: { reasoning_tokens: u.reasoningTokens },
    total_tokens: u.totalTokens ?? u.promptTokens + u.completionTokens,
  };
}

/**
 * A call of a namespaced function comes back as the client declared it:
 * `namespace` and the bare `name` (the engine only saw the flat name).
 */
export function restoreNamespace(item: { name: string; namespace?: string }, meta: Pick<ResponseMeta, 'namespaced'>): void {
  if (item.namespace !== undefined) return;
  const ns = Object.hasOwn(meta.namespaced, item.name) ? meta.namespaced[item.name] : undefined;
  if (!ns) return;
  item.namespace = ns.namespace;
  item.name = ns.name;
}

/**
 * How a chat `finish_reason` ends a response (SPEC section 4): incomplete only
 * when the engine stopped for the client's own max_output_tokens; any other
 * end (an engine's own length limit, a content filter) completes it, since
 * agent clients retry an incomplete response as if it had failed.
 */
export function statusFor(finishReason: unknown, meta: Pick<ResponseMeta, 'maxOutputTokens'>): { status: ResponseStatus; incomplete: ResponseObject['incomplete_details']; itemStatus: ItemStatus } {
  if (finishReason === 'length' && meta.maxOutputTokens !== null) return { status: 'incomplete', incomplete: { reason: 'max_output_tokens' }, itemStatus: 'incomplete' };
  return { status: 'completed', incomplete: null, itemStatus: 'completed' };
}

/** The response envelope with the request's parameters echoed; `output` empty, status in progress. */
export function baseResponse(meta: ResponseMeta, model = meta.model): ResponseObject {
  const r: ResponseObject = {
    id: meta.id,
    object: 'response',
    created_at: meta.createdAt,
    status: 'in_progress',
    completed_at: null,
    background: false,
    error: null,
    incomplete_details: null,
    instructions: meta.instructions,
    max_output_tokens: meta.maxOutputTokens,
    metadata: meta.metadata,
    model,
    output: [],
    parallel_tool_calls: meta.parallelToolCalls,
    previous_response_id: null,
    reasoning: meta.reasoning,
    store: false,
    temperature: meta.temperature,
    text: meta.text,
    tool_choice: meta.toolChoice,
    tools: meta.tools,
    top_p: meta.topP,
    truncation: 'disabled',
  };
  if (meta.user !== null) r.user = meta.user;
  return r;
}

export interface ChatToResponseOptions {
  /** Unix seconds for `completed_at`; `meta.createdAt` when absent. */
  completedAt?: number;
}

/**
 * A non-streamed chat completion (the engine's 200 body, parsed) → the
 * Responses object to send the client. Only the first choice is used
 * (the translation never asks for more). Output order: reasoning (when the
 * engine returned `reasoning_content`), the message, then function calls.
 */
export function chatToResponse(chatResponse: unknown, meta: ResponseMeta, opts: ChatToResponseOptions = {}): ResponseObject {
  const c = readChatCompletion(chatResponse);
  const r = baseResponse(meta, c.model ?? meta.model);
  if (!c.ok) {
    r.status = 'failed';
    r.error = { code: 'server_error', message: c.failure };
    return r;
  }
  const end = statusFor(c.finishReason, meta);
  const output: OutputItem[] = [];

  if (c.reasoning !== '') output.push({ type: 'reasoning', id: itemId(meta, 'rs', output.length), summary: [], content: [{ type: 'reasoning_text', text: c.reasoning }], status: end.itemStatus });

  const { text, refusal } = c;
  if (text !== '' || refusal !== '' || c.toolCalls.length === 0) {
    const content: Extract<OutputItem, { type: 'message' }> = { type: 'message', id: itemId(meta, 'msg', output.length), role: 'assistant', status: end.itemStatus, content: [] };
    if (text !== '' || refusal === '') content.content.push({ type: 'output_text', text, annotations: [], logprobs: [] });
    if (refusal !== '') content.content.push({ type: 'refusal', refusal });
    output.push(content);
  }
  for (const call of c.toolCalls) {
    const index = output.length;
    const item: Extract<OutputItem, { type: 'function_call' }> = {
      type: 'function_call',
      id: itemId(meta, 'fc', index),
      call_id: call.id ?? `call_${itemId(meta, 'fc', index).slice(3)}`,
      name: call.name,
      arguments: call.args,
      status: 'completed',
    };
    restoreNamespace(item, meta);
    output.push(item);
  }

  r.output = output;
  r.status = end.status;
  r.incomplete_details = end.incomplete;
  r.completed_at = end.status === 'completed' ? opts.completedAt ?? meta.createdAt : null;
  const usage = chatUsageToResponses(c.usage);
  if (usage) r.usage = usage;
  return r;
}
