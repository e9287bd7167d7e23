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
 * judgement from llama.cpp's release history; see docs/decisions.md. Only a
 * real build number is compared: a squashed or git-less source says "b1" or
 * "b0" (engines/llamacpp/version.ts), which is no evidence of age.
 */
export const MIN_LLAMACPP_BUILD: Readonly<Record<string, number>> = {
  rerank: 3800, // /v1/rerank with --reranking
  transcription: 5400, // audio input through the multimodal (mtmd) path
};

export interface EngineAbilities {
  /** A real build number; undefined when the engine's is unknown, squashed (b1) or git-less (b0). */
  buildNumber?: number;
  /** `build_info` verbatim, for the log line that says a workload was kept unchecked. */
  buildInfo?: string;
  /** /props modalities.audio: true shows the engine takes audio, whatever its build number says. */
  audio?: boolean;
}

/** Read what llama-server says of itself in /props. */
export function abilitiesFromProps(raw: Record<string, unknown>, buildNumber: number | undefined): EngineAbilities {
  const modalities = raw.modalities as { audio?: unknown } | undefined;
  const buildInfo = typeof raw.build_info === 'string' ? raw.build_info : undefined;
  return { buildNumber, buildInfo, audio: typeof modalities?.audio === 'boolean' ? modalities.audio : undefined };
}

/** What the engine shows it can do, which outweighs any build number. */
function shows(engine: EngineAbilities, workload: string): boolean {
  return workload === 'transcription' && engine.audio === true;
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
  for (const [w, min] of Object.entries(MIN_LLAMACPP_BUILD)) {
    const needs = w === 'transcription' ? workloads.includes('transcription') || audio : workloads.includes(w);
    if (!needs || shows(engine, w)) continue;
    if (engine.buildNumber === undefined) {
      // Only an engine that says something of itself is checked: one without /props never reaches here.
      if (engine.buildInfo !== undefined)
        log(`${who}: ${w} kept without a version check: build_info "${engine.buildInfo}" carries no build number to compare (a squashed or git-less llama.cpp source is not an old one)`);
      continue;
    }
    if (engine.buildNumber >= min) continue;
    log(`${who}: ${w} withdrawn: llama.cpp build b${engine.buildNumber} is older than b${min}, which ${w} needs; upgrade llama-server`);
    workloads = workloads.filter((x) => x !== w);
    if (w === 'transcription') audio = false;
  }
  return { workloads, audio };
}
