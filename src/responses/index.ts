/**
 * The Responses API (POST /v1/responses) for chat-only engines: the request
 * becomes a chat completion, the answer (whole or streamed) becomes a
 * Responses object or event stream. Pure translation; the node does the I/O.
 * The chat side (request types, SSE decoding, chunk reading) is src/chat/.
 * What is supported: docs/api.md.
 */
export { flatName, newResponseId, responsesToChat, type ResponsesToChatOptions, type ResponsesToChatResult } from './request.ts';
export { chatToResponse, chatUsageToResponses, type ChatToResponseOptions } from './response.ts';
export { ResponsesStreamTranslator, type StreamTranslatorOptions } from './stream.ts';
export type { ResponseMeta, ResponseObject, ResponseUsage } from './types.ts';
