/**
 * The one table that maps an inference endpoint to the workload it needs
 * (SPEC section 8), and the descriptor a target publishes.
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

const ENDPOINTS: ReadonlyMap<string, Workload> = new Map([
  ['/v1/chat/completions', 'chat'],
  // The Responses API is routed as chat; the executor translates it unless its target lists `responses`.
  ['/v1/responses', 'chat'],
  // Anthropic's Messages API, routed as chat; translated unless the target lists `messages` (count_tokens takes no slot).
  ['/v1/messages', 'chat'],
  ['/v1/messages/count_tokens', 'chat'],
  ['/v1/completions', 'completion'],
  ['/v1/embeddings', 'embeddings'],
  ['/v1/rerank', 'rerank'],
  ['/rerank', 'rerank'],
  ['/v1/audio/speech', 'speech'],
  ['/v1/audio/transcriptions', 'transcription'],
  ['/v1/audio/translations', 'transcription'],
]);

/** The workload an inference path needs, or undefined when the path is not an inference endpoint. */
export function workloadForPath(path: string): Workload | undefined {
  return ENDPOINTS.get(path);
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

/** A canonical string for a descriptor, for stable sorting and grouping. */
export function descriptorKey(d: Descriptor): string {
  return [...d.workloads].sort().join(',') + (d.audio ? '|audio' : '');
}

/** Descriptors of an older node that publishes no `targets`. */
export const LEGACY_DESCRIPTOR: Descriptor = { workloads: ['chat', 'completion'], audio: false };
