/**
 * What an engine may advertise (SPEC section 8): the config's list is the
 * operator's statement; probing only confirms or withdraws. When the config
 * leaves `workloads` out, what the engine reports fills it. A llama-server
 * older than a workload needs has that workload withdrawn, with a log line,
 * before any request can reach it.
 */
import type { Descriptor } from './workloads.ts';

/**
 * The oldest llama.cpp build (the number in /props `build_info`, "b4500-…")
 * that serves each workload well enough for us to route it. Our own
 * judgement from llama.cpp's release history; see docs/decisions.md.
 */
export const MIN_LLAMACPP_BUILD: Readonly<Record<string, number>> = {
  rerank: 3800, // /v1/rerank with --reranking
  transcription: 5400, // audio input through the multimodal (mtmd) path
};

export interface EngineAbilities {
  buildNumber?: number;
  /** /props modalities.audio */
  audio?: boolean;
}

/** Read what llama-server says of itself in /props. */
export function abilitiesFromProps(raw: Record<string, unknown>, buildNumber: number | undefined): EngineAbilities {
  const modalities = raw.modalities as { audio?: unknown } | undefined;
  return { buildNumber, audio: typeof modalities?.audio === 'boolean' ? modalities.audio : undefined };
}

/** Workloads a llama-server serves from its command line, when the config names none. */
export function workloadsFromArgs(args: readonly string[]): string[] {
  if (args.includes('--reranking') || args.includes('--rerank')) return ['rerank'];
  if (args.includes('--embedding') || args.includes('--embeddings')) return ['embeddings'];
  return ['chat', 'completion'];
}

/**
 * The descriptor a backend advertises after probing. `configured` is the
 * config's list (undefined when left out); `fallback` is what to use then.
 */
export function gateDescriptor(
  configured: Descriptor & { explicit: boolean },
  engine: EngineAbilities,
  log: (msg: string) => void,
  who: string,
): Descriptor {
  let workloads = [...configured.workloads];
  let audio = configured.audio;
  if (!configured.explicit && engine.audio === true) audio = true;
  if (engine.audio === false && audio) {
    log(`${who}: audio input withdrawn: the engine reports no audio modality`);
    audio = false;
  }
  if (engine.buildNumber !== undefined) {
    for (const [w, min] of Object.entries(MIN_LLAMACPP_BUILD)) {
      const needs = w === 'transcription' ? workloads.includes('transcription') || audio : workloads.includes(w);
      if (!needs || engine.buildNumber >= min) continue;
      log(`${who}: ${w} withdrawn: llama.cpp build b${engine.buildNumber} is older than b${min}, which ${w} needs; upgrade llama-server`);
      workloads = workloads.filter((x) => x !== w);
      if (w === 'transcription') audio = false;
    }
  }
  return { workloads, audio };
}
