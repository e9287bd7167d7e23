/** Backends from the config's model entries: `replicas` of each, indexed per model name. */
import type { SlotKeeper } from './llamacpp/llamacpp.ts';
import type { Config, ModelConfig } from '../config/schema.ts';
import type { Descriptor } from '../workloads/workloads.ts';
import type { Backend, BackendInfo, Logger } from './backend.ts';
import { SimBackend } from './sim.ts';
import { abilitiesFromProps, gateDescriptor, workloadsFromArgs } from '../workloads/gate.ts';
import type { EngineProps } from './health.ts';

/** Config `workloads` when given; else what the engine reports (filled in by probing later), else chat and completion. */
export function configDescriptor(m: ModelConfig): Descriptor {
  return { workloads: m.workloads ? [...new Set(m.workloads)] : ['chat', 'completion'], audio: m.audio_input };
}

/** A stable key for a model entry: entries with equal keys need no new backends on reload. */
export function entryKey(m: ModelConfig): string {
  return JSON.stringify(m);
}

/** The ids of one entry's backends (`replicas` of them), from the lowest indices not yet taken for that model name. */
export function entryInfos(m: ModelConfig, taken: Set<string>): BackendInfo[] {
  const out: BackendInfo[] = [];
  for (let r = 0, index = 0; r < m.replicas; r++, index++) {
    while (taken.has(`${m.name}/${index}`)) index++;
    out.push({ id: `${m.name}/${index}`, model: m.name, index, parallel: m.parallel, context: m.context, engine: m.engine });
    taken.add(`${m.name}/${index}`);
  }
  return out;
}

/** Real backends of an entry with the given ids (an on-demand entry's load), not started. */
export async function createBackendsFor(m: ModelConfig, infos: readonly BackendInfo[], log: Logger, stateDir?: string, keeper?: SlotKeeper): Promise<Backend[]> {
  const out: Backend[] = [];
  for (const info of infos) {
    const b = await createBackend(m, info, log, stateDir, keeper);
    if (m.api_key_env) b.useApiKey(process.env[m.api_key_env]);
    out.push(b);
  }
  return out;
}

/**
 * The backends of one model entry (`replicas` of them), indexed from the
 * lowest indices not yet taken for that model name.
 */
export async function createEntryBackends(m: ModelConfig, taken: Set<string>, log: Logger, stateDir?: string, keeper?: SlotKeeper): Promise<Backend[]> {
  const out: Backend[] = [];
  for (let r = 0, index = 0; r < m.replicas; r++, index++) {
    while (taken.has(`${m.name}/${index}`)) index++;
    const info: BackendInfo = { id: `${m.name}/${index}`, model: m.name, index, parallel: m.parallel, context: m.context, engine: m.engine };
    taken.add(info.id);
    const b = await createBackend(m, info, log, stateDir, keeper);
    if (m.api_key_env) b.useApiKey(process.env[m.api_key_env]);
    out.push(b);
  }
  return out;
}

export async function createBackend(m: ModelConfig, info: BackendInfo, log: Logger, stateDir: string | undefined, keeper?: SlotKeeper): Promise<Backend> {
  let descriptor = configDescriptor(m);
  if (m.engine === 'llamacpp' && !m.workloads) descriptor = { ...descriptor, workloads: workloadsFromArgs(m.llamacpp.args) };
  // What the engine reports about itself can fill a list the config left out, or withdraw (never add) a listed workload.
  const base = { ...descriptor, explicit: m.workloads !== undefined };
  const onProps = (props: EngineProps) => gateDescriptor(base, abilitiesFromProps(props.raw, props.buildNumber), (msg) => log(msg), `backend ${info.id}`);
  switch (m.engine) {
    case 'sim':
      return new SimBackend(info, descriptor, m.sim, log);
    case 'openai': {
      if (m.listed?.router) {
        const { RouterModelBackend } = await import('./many/router-model.ts');
        return new RouterModelBackend(info, descriptor, m.url, log, { onProps, keepLoaded: m.load === 'always' });
      }
      const { OpenAIBackend } = await import('./openai.ts');
      return new OpenAIBackend(info, descriptor, { url: m.url }, log, { onProps });
    }
    case 'llamacpp': {
      const { LlamacppBackend } = await import('./llamacpp/llamacpp.ts');
      return new LlamacppBackend(
        info,
        descriptor,
        { binary: m.llamacpp.binary, args: m.llamacpp.args, path: m.path, startupTimeoutMs: m.startup_timeout, cacheRamMib: m.cache_ram },
        log,
        { onProps, stateDir, keeper },
      );
    }
    case 'embedded': {
      const { EmbeddedBackend } = await import('./embedded/embedded.ts');
      return new EmbeddedBackend(info, descriptor, { path: m.path, threads: m.embedded.threads, gpu: m.embedded.gpu }, log, { workloadsExplicit: m.workloads !== undefined });
    }
  }
}

/**
 * The backend of a model split across members (SPEC section 11): the entry's llama-server with `rpcArgs` (`--rpc …
 * -ngl 99 --tensor-split …`) after its own args. It is never restarted: a part that fails (a lender gone, a tunnel
 * cut) stops the model, which is placed again; `teardown` runs once its engine has stopped (tunnels, lends, the
 * runner's own part).
 */
export async function createSplitBackend(m: Extract<ModelConfig, { engine: 'llamacpp' }>, info: BackendInfo, log: Logger, rpcArgs: readonly string[], teardown: () => Promise<void>): Promise<Backend> {
  const { SplitLlamacppBackend } = await import('./llamacpp/split-backend.ts');
  let descriptor = configDescriptor(m);
  if (!m.workloads) descriptor = { ...descriptor, workloads: workloadsFromArgs(m.llamacpp.args) };
  const base = { ...descriptor, explicit: m.workloads !== undefined };
  const onProps = (props: EngineProps) => gateDescriptor(base, abilitiesFromProps(props.raw, props.buildNumber), (msg) => log(msg), `backend ${info.id}`);
  const b = new SplitLlamacppBackend(info, descriptor, { binary: m.llamacpp.binary, args: [...m.llamacpp.args, ...rpcArgs], path: m.path, startupTimeoutMs: m.startup_timeout, cacheRamMib: m.cache_ram }, log, { onProps, maxRestarts: 0 }, teardown);
  if (m.api_key_env) b.useApiKey(process.env[m.api_key_env]);
  return b;
}
