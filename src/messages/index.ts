/**
 * Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens)
 * for chat-only engines: the request becomes a chat completion, the answer
 * (whole or streamed) becomes a message or Anthropic's event stream. Pure
 * translation; the node does the I/O. The chat side (types, SSE decoding,
 * chunk reading) is src/chat/, shared with the Responses translation.
 * What is supported: docs/api.md.
 */
export { BILLING_HEADER_PREFIX, messagesToChat, newMessageId, type MessagesToChatOptions, type MessagesToChatResult } from './request.ts';
export { chatToMessage, chatUsageToAnthropic, stopReasonFor, toolInput, type ChatToMessageResult } from './response.ts';
export { anthropicEvent, MessagesStreamTranslator, PING } from './stream.ts';
export { countText, estimateTokens } from './count.ts';
export type { AnthropicMessage, AnthropicUsage, MessageMeta } from './types.ts';
