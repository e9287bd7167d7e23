/**
 * FakeEngine: an in-process OpenAI-compatible server for tests (queue, API,
 * routing, workloads, engines). It is a node:http server on 127.0.0.1 and an
 * ephemeral port unless told otherwise.
 *
 *   const engine = await startFakeEngine({ name: 'gpu1', loadingMs: 0 });
 *   ... point a backend at engine.url ...
 *   await engine.close();
 *
 * Endpoints (shapes follow llama-server / OpenAI):
 * - POST /v1/chat/completions, /v1/completions: streamed (SSE `data: {...}`
 *   chunks, then `data: [DONE]`; with `stream_options.include_usage` a last
 *   chunk with `usage` and empty `choices`) or not. The text is
 *   deterministic: `outputTokens` pieces (fakePiece(i)), capped by `max_tokens`.
 * - POST /v1/embeddings: one deterministic unit vector per input (fakeEmbedding); with
 *   `encoding_format: "base64"` each as little-endian float32s in base64 (fakeEmbeddingBase64).
 * - POST /v1/rerank and /rerank: `{results: [{index, relevance_score}]}`, best first, `top_n` honoured.
 * - POST /v1/audio/transcriptions, /v1/audio/translations: multipart; answers
 *   `{text, sha256_of_file, bytes, filename, model, fields}` for the `file` part.
 * - POST /v1/audio/speech: bytes with `Content-Type: audio/mpeg`.
 * - Every JSON answer to an inference request has `usage.prompt_tokens` ≈ body bytes ÷ 4.
 * - GET /health: 200 `{"status":"ok"}`; 503 `{"error":{"code":503,"message":"Loading model"}}`
 *   while loading (inference answers 503 too); 404 with `healthEndpoint: false`.
 * - GET /v1/models, GET /props (`build_info`, `total_slots`, default_generation_settings.n_ctx).
 * - Every answer carries `X-Fake-Engine: <name>`. A request header
 *   `X-Fake-Delay-Ms: N` delays that one answer by N ms before its first byte.
 *
 * Controls (methods; see fake-engine-core.d.mts for each):
 *   hold()/hold(false), release(n), releaseAll(), heldCount; failNext(status);
 *   failMidStream(); setLoading(on); setHealthStatus(code); setDelay(ms);
 *   counters received[path], requests[], inFlight, maxInFlight, completed,
 *   aborted; waitFor(pred, deadlineMs); resetCounters(); close().
 * Events: 'request' (ReceivedRequest), 'held' (path), 'aborted' (path),
 *   'settled' (path, whenever an inference request ends either way), 'loaded'.
 *
 * The implementation lives in fake-engine-core.mjs (plain JS), shared with
 * the fake llama-server executable (fake-llama-server.mjs).
 */
import { FakeEngine, type FakeEngineOptions } from './fake-engine-core.mjs';

export { FakeEngine, fakeEmbedding, fakeEmbeddingBase64, fakePiece, fakeRelevance, parseMultipart } from './fake-engine-core.mjs';
export type { FakeEngineOptions, MultipartPart, ReceivedRequest } from './fake-engine-core.mjs';

/** Create and start a FakeEngine. */
export function startFakeEngine(opts: FakeEngineOptions = {}): Promise<FakeEngine> {
  return new FakeEngine(opts).start();
}

/** Absolute path of the fake llama-server executable (for `llamacpp.binary`). */
export const FAKE_LLAMA_SERVER = new URL('./fake-llama-server.mjs', import.meta.url).pathname;

/** Parse an SSE body into its `data:` payloads (JSON-parsed, `[DONE]` kept as the string). */
export function parseSse(text: string): unknown[] {
  const out: unknown[] = [];
  for (const block of text.split('\n\n')) {
    const data = block
      .split('\n')
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).trimStart())
      .join('\n');
    if (!data) continue;
    out.push(data === '[DONE]' ? data : JSON.parse(data));
  }
  return out;
}
