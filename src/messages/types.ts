/**
 * What the Messages ⇄ Chat Completions translation carries between the
 * request and its answer, and the Anthropic shapes it writes. The chat side
 * (ChatRequest and its parts) is src/chat/, shared with the Responses
 * translation: both end at the same chat engine.
 */

/** What the answer translators need of the request: ids, echoes, and what was left out. */
export interface MessageMeta {
  /** `msg_…`; tool_use ids without an engine id are derived from it. */
  id: string;
  /** The model the client named (an alias stays the alias). */
  model: string;
  stream: boolean;
  /** The client's stop_sequences (the engine does not say which one matched). */
  stopSequences: string[];
  /** Tools with a `type` of Anthropic's own (server tools, computer use, …) the engine cannot run: left out. */
  omittedTools: string[];
  /** Top-level request keys accepted without effect (for a debug line). */
  ignored: string[];
}

/** A Messages API `message` as it goes on the wire. */
export interface AnthropicMessage {
  id: string;
  type: 'message';
  role: 'assistant';
  model: string;
  content: AnthropicBlock[];
  stop_reason: StopReason | null;
  stop_sequence: string | null;
  usage: AnthropicUsage;
}

export type AnthropicBlock = { type: 'text'; text: string } | { type: 'tool_use'; id: string; name: string; input: unknown };

export type StopReason = 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use' | 'refusal';

export interface AnthropicUsage {
  input_tokens: number;
  output_tokens: number;
  cache_read_input_tokens: number;
  cache_creation_input_tokens: number;
}
