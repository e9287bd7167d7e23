/**
 * The Responses side of the Responses ↔ Chat Completions translation: what
 * it carries from the request to the answer, and the Responses objects it
 * writes (the chat side is src/chat/). Only the fields the translation
 * touches are typed. Wire names are OpenAI's (snake_case), so a value of
 * these types is what goes on the wire as JSON.
 */

/**
 * What `chatToResponse` and the stream translator need to build the
 * Responses objects: the response id, its creation time, and the request
 * parameters a Response echoes back. Plain JSON; it never leaves the node
 * that translates.
 */
export interface ResponseMeta {
  /** `resp_…`; output item ids are derived from it. */
  id: string;
  /** Unix seconds. */
  createdAt: number;
  model: string;
  instructions: string | null;
  /** The request's tools, as the client sent them (function tools only). */
  tools: Record<string, unknown>[];
  toolChoice: unknown;
  parallelToolCalls: boolean;
  temperature: number | null;
  topP: number | null;
  maxOutputTokens: number | null;
  /** The request's `text` config; `{format:{type:'text'}}` when absent. */
  text: Record<string, unknown>;
  /** `{effort, summary}` echoed back; null when the request had none. */
  reasoning: { effort: string | null; summary: string | null } | null;
  metadata: Record<string, string>;
  user: string | null;
  stream: boolean;
  /** Top-level request keys that were accepted but have no effect here (for a debug line). */
  ignored: string[];
  /** Functions of `namespace` tools, by the flat name the engine was offered: the namespace and bare name to return. */
  namespaced: Record<string, { namespace: string; name: string }>;
  /** Built-in tools left out of what the engine sees (their types), for X-Viiwork-Omitted-Tools. */
  omittedTools: string[];
}

export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number; cache_write_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

export interface OutputText {
  type: 'output_text';
  text: string;
  annotations: unknown[];
  logprobs: unknown[];
}
export interface OutputRefusal {
  type: 'refusal';
  refusal: string;
}
export interface ReasoningText {
  type: 'reasoning_text';
  text: string;
}

export type ItemStatus = 'in_progress' | 'completed' | 'incomplete';

export type OutputItem =
  | { type: 'message'; id: string; role: 'assistant'; status: ItemStatus; content: (OutputText | OutputRefusal)[] }
  | { type: 'function_call'; id: string; call_id: string; name: string; arguments: string; status: ItemStatus; namespace?: string }
  | { type: 'reasoning'; id: string; summary: unknown[]; content: ReasoningText[]; status: ItemStatus };

export type ResponseStatus = 'in_progress' | 'completed' | 'incomplete' | 'failed';

/** A Responses API `response` object as it goes on the wire (without the SDK-side `output_text`). */
export interface ResponseObject {
  id: string;
  object: 'response';
  created_at: number;
  status: ResponseStatus;
  completed_at: number | null;
  background: false;
  error: { code: string; message: string } | null;
  incomplete_details: { reason: 'max_output_tokens' | 'content_filter' } | null;
  instructions: string | null;
  max_output_tokens: number | null;
  metadata: Record<string, string>;
  model: string;
  output: OutputItem[];
  parallel_tool_calls: boolean;
  previous_response_id: null;
  reasoning: { effort: string | null; summary: string | null } | null;
  store: false;
  temperature: number | null;
  text: Record<string, unknown>;
  tool_choice: unknown;
  tools: Record<string, unknown>[];
  top_p: number | null;
  truncation: 'disabled';
  usage?: ResponseUsage;
  user?: string;
}
