// Types for fake-engine-core.mjs. Import FakeEngine from ./fake-engine.ts in tests.
import { EventEmitter } from 'node:events';
import type { IncomingHttpHeaders, Server } from 'node:http';

export interface FakeEngineOptions {
  /** Interface to bind (default 127.0.0.1). */
  host?: string;
  /** Port (default 0: an ephemeral port; read `port` or `url` after start()). */
  port?: number;
  /** Model id in /v1/models and in answers that carry no `model` (default 'fake-model'). */
  model?: string;
  /** Sent as `X-Fake-Engine` on every answer and as `owned_by`, to tell engines apart (default 'fake'). */
  name?: string;
  /** /props `build_info` (default 'b4500-abcdef'). */
  buildInfo?: string;
  /** /props `total_slots` (default 4). */
  totalSlots?: number;
  /** /props default_generation_settings.n_ctx (default 4096). */
  contextPerSlot?: number;
  /** /props model_path (default: the model id). */
  modelPath?: string;
  /** After start(), /health and inference answer 503 "Loading model" for this long (default 0). */
  loadingMs?: number;
  /** Delay before the first byte of every inference answer (default 0); a request header `X-Fake-Delay-Ms` overrides it. */
  delayMs?: number;
  /** Delay between stream chunks (default 0). */
  chunkDelayMs?: number;
  /** Generated pieces ("tokens") per completion (default 4; `max_tokens` caps it). */
  outputTokens?: number;
  /** Embedding vector length (default 8). */
  embeddingDim?: number;
  /** false: GET /health answers 404, as servers without it do (default true). */
  healthEndpoint?: boolean;
  /** /props modalities.audio: the model takes audio input (default false). */
  audio?: boolean;
  /** false: GET /props answers 404 (default true). */
  propsEndpoint?: boolean;
  /** Serve the /_control/* endpoints (default false; the fake llama-server turns them on). */
  control?: boolean;
  /** Called by POST /_control/crash after its answer is sent. */
  onCrash?: () => void;
  /** Extra fields merged into GET /_control/state. */
  info?: () => Record<string, unknown>;
  /** When set, GET /_control/env answers what it returns. */
  env?: () => Record<string, string | undefined>;
  /**
   * A scripted engine: each chat request's answer (a text, or one call of a tool), or undefined for the
   * default behaviour. Streamed or not as the request asks; finish_reason `tool_calls` for a call, else `stop`.
   */
  script?: (json: any) => { text: string } | { call: { id?: string; name: string; arguments: string } } | undefined;
  /** false: `requests` stays empty (a test sending huge bodies need not keep them; default true). */
  keepRequests?: boolean;
  /** Serve POST /tokenize (one token per character of `content`) after this many ms; undefined: 404. */
  tokenizeMs?: number;
}

export interface ReceivedRequest {
  method: string;
  path: string;
  query: Record<string, string>;
  headers: IncomingHttpHeaders;
  body: Buffer;
  /** The parsed JSON body when the request was JSON, else undefined. */
  json: any;
  /** Date.now() when the body was fully received. */
  at: number;
}

export interface MultipartPart {
  name: string | undefined;
  filename: string | undefined;
  contentType: string | undefined;
  data: Buffer;
}

export declare function fakePiece(i: number): string;
export declare function fakeEmbedding(text: string, dim?: number): number[];
/** `vector` as little-endian float32s in base64 (OpenAI's `encoding_format: "base64"`). */
export declare function fakeEmbeddingBase64(vector: number[]): string;
export declare function fakeRelevance(query: string, doc: string): number;
export declare function parseMultipart(body: Buffer, contentType: string | undefined): MultipartPart[] | undefined;

export declare class FakeEngine extends EventEmitter {
  constructor(opts?: FakeEngineOptions);
  readonly opts: Required<Omit<FakeEngineOptions, 'onCrash' | 'info' | 'env' | 'modelPath' | 'tokenizeMs'>> & Pick<FakeEngineOptions, 'onCrash' | 'info' | 'env' | 'modelPath' | 'tokenizeMs'>;
  readonly server: Server;
  readonly host: string;
  /** The bound port, after start(). */
  readonly port: number;
  /** http://host:port, after start(). */
  readonly url: string;

  /** Requests per path, every method and path (health probes included). */
  received: Record<string, number>;
  /** Every request received, in order, with headers and body. */
  requests: ReceivedRequest[];
  /** Inference requests (POST to an OpenAI path) accepted and not yet finished or aborted. */
  inFlight: number;
  /** Highest `inFlight` seen (since start or resetCounters()). */
  maxInFlight: number;
  /** Inference requests answered to the end. */
  completed: number;
  /** Inference requests whose client went away before the answer was complete. */
  aborted: number;
  /** True while /health and inference answer 503 "Loading model". */
  loading: boolean;
  /** When set, /health and /v1/models answer this status. */
  healthStatus: number | undefined;
  /** True in hold mode: inference requests wait before their first byte. */
  holding: boolean;
  delayMs: number;
  chunkDelayMs: number;
  outputTokens: number;
  buildInfo: string;
  totalSlots: number;

  /** Bind and begin; the loading phase (opts.loadingMs) starts now. */
  start(): Promise<this>;
  /** Stop listening, drop every connection, release held requests. */
  close(): Promise<void>;

  /** Enter or leave the loading phase by hand (cancels the timed one). */
  setLoading(on: boolean): void;
  /** Make /health and /v1/models answer `status` (undefined: normal again). */
  setHealthStatus(status: number | undefined): void;
  /** Delay before the first byte of each inference answer. */
  setDelay(ms: number): void;
  /** Hold mode on (default) or off; turning it off releases every held request. */
  hold(on?: boolean): void;
  /** Let the `n` oldest held requests go on (default 1); returns how many went. */
  release(n?: number): number;
  /** Let every held request go on (hold mode stays as it is); returns how many went. */
  releaseAll(): number;
  /** Requests waiting in hold mode. */
  readonly heldCount: number;
  /** The next inference request (calls queue up) is answered `status` with an OpenAI-shaped error, before any byte. */
  failNext(status?: number, message?: string): void;
  /** The next `times` (default 1) streamed answers send one content chunk, then the socket is destroyed. */
  failMidStream(times?: number): void;
  /** Requests received on `path`. */
  count(path: string): number;
  /** Parsed JSON bodies received on `path`, in order. */
  bodiesFor(path: string): any[];
  /** Zero received, requests, completed, aborted, maxInFlight. */
  resetCounters(): void;
  /** Resolve once pred(this) is true; reject after deadlineMs (default 5000). */
  waitFor(pred: (e: this) => boolean, deadlineMs?: number, what?: string): Promise<void>;
}
