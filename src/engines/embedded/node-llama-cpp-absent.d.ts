/**
 * node-llama-cpp is an optional dependency. When it is not installed, the
 * type checker resolves the module here (tsconfig `paths` falls back to this
 * file), so `npm run typecheck` passes; at run time the embedded engine then
 * starts dead with a message that says how to fix it. Every type is `any`:
 * the real ones come from the package whenever it is installed.
 */
/* eslint-disable @typescript-eslint/no-explicit-any */
export type ChatWrapper = any;
export type LlamaChatResponse = any;
export type LlamaContextSequence = any;
export type LlamaEmbeddingContext = any;
export type LlamaModel = any;
export type ChatHistoryItem = any;
export type Token = any;
export type Llama = any;
export type LlamaContext = any;
export declare const LlamaChat: any;
export declare const LlamaCompletion: any;
export declare const LlamaLogLevel: any;
export declare function getLlama(...args: any[]): Promise<any>;
export declare function resolveChatWrapper(...args: any[]): any;
