/**
 * The chat side every translated API ends at (Responses, Messages): the
 * chat-completions request types, reading an engine's answer (whole, or a
 * streamed chunk), the one SSE decoder, and the field guards and refusals a
 * translation of a client's body is written with. A leaf: it imports no
 * other room, so both translations use it and neither needs the other.
 */
export {
  answerText,
  callArguments,
  joinName,
  readChatChunk,
  readChatCompletion,
  readChatUsage,
  reasoningText,
  toolInput,
  type ChatCallRead,
  type ChatChunk,
  type ChatCompletionRead,
  type ChatCompletionResult,
  type ChatUsageRead,
  type ToolCallPiece,
} from './answer.ts';
export { isObj, present, type Obj } from './fields.ts';
export { randomId } from './ids.ts';
export { DEFAULT_LIMITS, parseTranslatedBody, TRANSLATE_MAX, type BodyRefusal, type TranslationLimits } from './limits.ts';
export { guardTranslation, num, refuse, str, type TranslationError, type TranslationErrorCode, type TranslationOptions, type TranslationResult } from './refusal.ts';
export { ReplyCollector, replyOfCompletion, type ChatReply } from './reply.ts';
export { ChatSseDecoder, DEFAULT_MAX_EVENT_BYTES, eventData, sseEvent, type ChatSseData } from './sse.ts';
export { ChatStreamTranslator } from './stream-translator.ts';
export type { ChatContentPart, ChatMessage, ChatRequest, ChatTool, ChatToolCall } from './types.ts';
