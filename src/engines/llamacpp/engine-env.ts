/**
 * Where and with what an engine process starts: the environment it is
 * given (the node's, less every key and mesh secret) and a loopback address
 * and port of its own.
 */
import net from 'node:net';
import { API_KEY_ENV, SECRET_ENV_VARS } from '../../security/secret.ts';

/** Variables the node holds keys in (api.keys_env, every api_key_env): never passed to an engine's environment. */
const hidden = new Set<string>([...SECRET_ENV_VARS, API_KEY_ENV]);

/** Keep a variable out of every engine's environment from now on. */
export function hideFromEngines(name: string): void {
  if (name) hidden.add(name);
}

/** Every key variable a config names (api.keys_env, each model's api_key_env), kept from engines from now on. */
export function hideConfiguredKeys(config: { api: { keys_env: string }; models: readonly { api_key_env?: string }[] }): void {
  hideFromEngines(config.api.keys_env);
  for (const m of config.models) if (m.api_key_env) hideFromEngines(m.api_key_env);
}

/** The environment an engine starts with: the node's, plus `extra`, minus the mesh secrets and every key variable. */
export function engineEnv(extra: Record<string, string | undefined> = {}, base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...base, ...extra };
  for (const k of hidden) delete env[k];
  return env;
}

/**
 * The loopback address an engine listens on. llama-server binds with
 * SO_REUSEPORT, so two of them given one port both start, and the kernel
 * spreads connections between them: a node would talk to another engine
 * (another model, another node's) without any error. A port that bind(0)
 * chose is soon handed out again (about 7,000 candidates), so on Linux,
 * where all of 127/8 is loopback, each engine also gets an address of its
 * own, drawn from 127.64.0.0/10 (clear of the 127.0.x.x that configs and
 * tests use); elsewhere only 127.0.0.1 exists.
 */
export function engineHost(platform: NodeJS.Platform = process.platform, random: () => number = Math.random): string {
  if (platform !== 'linux') return '127.0.0.1';
  const octet = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1));
  return `127.${octet(64, 127)}.${octet(0, 255)}.${octet(1, 254)}`;
}

/** A port that was free on `host` a moment ago (the engine binds it; a lost race is a failed start, retried). */
export function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.once('error', reject);
    srv.listen(0, host, () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}
