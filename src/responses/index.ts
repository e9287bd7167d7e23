/**
 * The Responses API (POST /v1/responses) for chat-only engines: the request
 * becomes a chat completion, the answer (whole or streamed) becomes a
 * Responses object or event stream. Pure translation; the node does the I/O.
 * What is supported: docs/api.md.
 */
export { newResponseId, responsesToChat, type ResponsesToChatOptions, type ResponsesToChatResult } from './request.ts';
export { chatToResponse, chatUsageToResponses, contentText, type ChatToResponseOptions } from './response.ts';
export { ResponsesStreamTranslator, type StreamTranslatorOptions } from './stream.ts';
export { ChatSseDecoder, sseEvent, type ChatSseData } from './sse.ts';
export { joinName, readChatChunk, type ChatChunk, type ToolCallPiece } from './chunk.ts';
export { flatName } from './request.ts';
export { DEFAULT_LIMITS, type ChatContentPart, type ChatMessage, type ChatRequest, type ChatTool, type ChatToolCall, type TranslationErrorCode, type ResponseMeta, type ResponseObject, type ResponseUsage, type TranslationError, type TranslationLimits } from './types.ts';
