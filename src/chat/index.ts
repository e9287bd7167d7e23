/**
 * The chat side every translated API ends at (Responses, Messages): the
 * chat-completions request types, reading an engine's answer (whole, or a
 * streamed chunk), the one SSE decoder, and the field guards and refusals a
 * translation of a client's body is written with. A leaf: it imports no
 * other room, so both translations use it and neither needs the other.
 */
export { answerText, callArguments, reasoningText, toolInput } from './content.ts';
export { joinName, readChatChunk, type ChatChunk, type ToolCallPiece } from './chunk.ts';
export { readChatCompletion, type ChatCallRead, type ChatCompletionRead, type ChatCompletionResult } from './completion.ts';
export { isObj, present, type Obj } from './fields.ts';
export { randomId } from './ids.ts';
export { DEFAULT_LIMITS, TRANSLATE_MAX, type TranslationLimits } from './limits.ts';
export { guardTranslation, num, refuse, str, type TranslationError, type TranslationErrorCode, type TranslationOptions, type TranslationResult } from './refusal.ts';
export { ChatSseDecoder, DEFAULT_MAX_EVENT_BYTES, eventData, sseEvent, type ChatSseData } from './sse.ts';
export { ChatStreamTranslator } from './stream-translator.ts';
export { parseTranslatedBody, type BodyRefusal } from './translated-body.ts';
export type { ChatContentPart, ChatMessage, ChatRequest, ChatTool, ChatToolCall } from './types.ts';
export { ReplyCollector, replyOfCompletion, type ChatReply } from './reply.ts';
export { readChatUsage, type ChatUsageRead } from './usage.ts';
