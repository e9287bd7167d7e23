/**
 * The one table that maps an inference endpoint to the workload it needs
 * (SPEC section 8) and the dialect it speaks, and the descriptor a target
 * publishes.
 */

/** Workloads this node knows. Any other string in a peer's report is kept but never eligible. */
export const KNOWN_WORKLOADS = ['chat', 'completion', 'embeddings', 'rerank', 'speech', 'transcription'] as const;
export type Workload = (typeof KNOWN_WORKLOADS)[number];

/** Generation workloads: their streams are asked for usage (stream_options) so prompt tokens can be measured. */
export const GENERATION_WORKLOADS: readonly Workload[] = ['chat', 'completion'];

/**
 * The one definition of which workloads get TTFT scores (SPEC section 9,
 * step 6): generation, and transcription (done by a chat target with audio).
 * Routing prices hosts for these, and the executor measures them.
 */
export function isScoredWorkload(workload: string): boolean {
  return (GENERATION_WORKLOADS as readonly string[]).includes(workload) || workload === 'transcription';
}

/** What a group of backends can do: its workloads (verbatim strings) and whether it takes audio input. */
export interface Descriptor {
  workloads: string[];
  audio: boolean;
}

/**
 * The API a request speaks, decided once from its path and carried on the
 * request: how its body reads (the prefix chain's reader), how its errors
 * look (Anthropic's shape for `messages`), and whether the executor
 * translates it to chat completions (`responses`, `messages`). `plain`: an
 * OpenAI endpoint whose body is no prompt (embeddings, rerank, audio).
 */
export type Dialect = 'chat' | 'completions' | 'responses' | 'messages' | 'plain';
/** The dialects whose bodies carry a prompt (they have a prefix chain). */
export type PromptDialect = Exclude<Dialect, 'plain'>;

/** One inference endpoint: what it needs of a target, the API it speaks, and what it asks (count_tokens takes no slot). */
export interface Endpoint {
  readonly workload: Workload;
  readonly dialect: Dialect;
  readonly action: 'infer' | 'count_tokens';
}

const endpoint = (workload: Workload, dialect: Dialect, action: Endpoint['action'] = 'infer'): Endpoint => Object.freeze({ workload, dialect, action });

const ENDPOINTS: ReadonlyMap<string, Endpoint> = new Map([
  ['/v1/chat/completions', endpoint('chat', 'chat')],
  // The Responses API is routed as chat; the executor translates it unless its target lists `responses`.
  ['/v1/responses', endpoint('chat', 'responses')],
  // Anthropic's Messages API, routed as chat; translated unless the target lists `messages` (count_tokens takes no slot).
  ['/v1/messages', endpoint('chat', 'messages')],
  ['/v1/messages/count_tokens', endpoint('chat', 'messages', 'count_tokens')],
  ['/v1/completions', endpoint('completion', 'completions')],
  ['/v1/embeddings', endpoint('embeddings', 'plain')],
  ['/v1/rerank', endpoint('rerank', 'plain')],
  ['/rerank', endpoint('rerank', 'plain')],
  ['/v1/audio/speech', endpoint('speech', 'plain')],
  ['/v1/audio/transcriptions', endpoint('transcription', 'plain')],
  ['/v1/audio/translations', endpoint('transcription', 'plain')],
]);

/** The inference endpoint at a path, or undefined when the path is not one. */
export function endpointFor(path: string): Endpoint | undefined {
  return ENDPOINTS.get(path);
}

/** The dialect a request's body is read in for its prefix chain: none for count_tokens (it takes no slot) or a body with no prompt. */
export function promptDialectOf(e: Endpoint): PromptDialect | undefined {
  return e.action === 'infer' && e.dialect !== 'plain' ? e.dialect : undefined;
}

/**
 * The dialect of any path a client may send: its endpoint's, else Anthropic's
 * for the rest of its API's space (an unknown `/v1/messages/...` path is
 * answered as an Anthropic SDK reads it), else none.
 */
export function dialectOfPath(path: string): Dialect | undefined {
  return ENDPOINTS.get(path)?.dialect ?? (path.startsWith('/v1/messages/') ? 'messages' : undefined);
}

/** How an error body is written: OpenAI's `{"error":{…}}`, or Anthropic's `{"type":"error",…}` (the Messages API, SPEC section 4). */
export type ErrorShape = 'openai' | 'anthropic';

/** The shape of errors on an endpoint (SPEC section 4): Anthropic's on the Messages API, else OpenAI's. */
export function errorShapeOf(d: Dialect | undefined): ErrorShape {
  return d === 'messages' ? 'anthropic' : 'openai';
}

export function isKnownWorkload(w: string): w is Workload {
  return (KNOWN_WORKLOADS as readonly string[]).includes(w);
}

/**
 * Does one descriptor do this workload? Decided from that descriptor alone:
 * transcription is done by a target listing `transcription`, or by a chat
 * target whose own descriptor has audio input.
 */
export function descriptorDoes(d: Descriptor, w: Workload): boolean {
  if (d.workloads.includes(w)) return true;
  return w === 'transcription' && d.audio && d.workloads.includes('chat');
}

/** Keys already made, per descriptor object (routing asks for every target on every request; nothing edits a descriptor). */
const keys = new WeakMap<Descriptor, { workloads: readonly string[]; audio: boolean; key: string }>();

/** A canonical string for a descriptor, for stable sorting and grouping. */
export function descriptorKey(d: Descriptor): string {
  const k = keys.get(d);
  // The same arrays and flag as when the key was made: the same key (a descriptor given new workloads gets a new one).
  if (k && k.workloads === d.workloads && k.audio === d.audio && k.workloads.length === d.workloads.length) return k.key;
  const key = [...d.workloads].sort().join(',') + (d.audio ? '|audio' : '');
  keys.set(d, { workloads: d.workloads, audio: d.audio, key });
  return key;
}

/** Descriptors of an older node that publishes no `targets`. */
export const LEGACY_DESCRIPTOR: Descriptor = { workloads: ['chat', 'completion'], audio: false };
