/**
 * The configuration file's schema (SPEC section 2). Every key has its
 * default here and nowhere else; docs/configuration.md lists them.
 */
import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { parseDuration, parseSize } from './units.ts';

export const NODE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

const duration = z
  .string({ error: 'expected a duration string such as "500ms", "20s" or "10m"' })
  .transform((s, ctx) => {
    const ms = parseDuration(s);
    if (ms === undefined) {
      ctx.addIssue({ code: 'custom', message: `expected a duration such as "500ms", "20s" or "10m", got "${s}"` });
      return z.NEVER;
    }
    return ms;
  });

const size = z
  .union([z.string(), z.number().int().nonnegative()], { error: 'expected a size such as "32MiB"' })
  .transform((s, ctx) => {
    const n = typeof s === 'number' ? s : parseSize(s);
    if (n === undefined) {
      ctx.addIssue({ code: 'custom', message: `expected a size such as "32MiB" or "512KB", got "${s}"` });
      return z.NEVER;
    }
    return n;
  });

const positiveInt = z.number({ error: 'expected a positive integer' }).int('expected a positive integer').positive('expected a positive integer');
const nonNegativeInt = z.number({ error: 'expected a non-negative integer' }).int('expected a non-negative integer').nonnegative('expected a non-negative integer');
const port = z.number({ error: 'expected a port number' }).int('expected a port number').min(0, 'expected a port number').max(65535, 'expected a port number');

const hostPort = z.string().regex(/^[^\s:]+:\d{1,5}$|^\[[0-9a-fA-F:]+\]:\d{1,5}$/, 'expected "ip:port"');

function expandHome(p: string): string {
  return p.startsWith('~/') ? path.join(os.homedir(), p.slice(2)) : p;
}

const workloadList = z.array(z.string().min(1)).min(1, 'expected at least one workload');

/** Keys every model entry takes, whatever its engine. */
const modelCommon = {
  name: z.string().min(1, 'expected a model name'),
  parallel: positiveInt.default(4),
  workloads: workloadList.optional(),
  audio_input: z.boolean().default(false),
  context: positiveInt.default(8192),
  replicas: positiveInt.default(1),
};

const openaiModel = z.strictObject({
  ...modelCommon,
  engine: z.literal('openai'),
  url: z.url({ error: 'expected a URL such as http://127.0.0.1:9100' }),
});

const llamacppModel = z.strictObject({
  ...modelCommon,
  engine: z.literal('llamacpp'),
  path: z.string().min(1, 'expected the path of a GGUF file'),
  startup_timeout: duration.default(600_000),
  llamacpp: z
    .strictObject({
      binary: z.string().min(1).default('llama-server'),
      args: z.array(z.string()).default([]),
    })
    .default({ binary: 'llama-server', args: [] }),
});

const embeddedModel = z.strictObject({
  ...modelCommon,
  engine: z.literal('embedded'),
  path: z.string().min(1, 'expected the path of a GGUF file'),
  embedded: z
    .strictObject({
      threads: positiveInt.default(1),
      gpu: z.boolean().default(false),
    })
    .default({ threads: 1, gpu: false }),
});

const simModel = z.strictObject({
  ...modelCommon,
  engine: z.literal('sim'),
  sim: z
    .strictObject({
      ttft_ms: nonNegativeInt.default(80),
      prefill_ms_per_1k: nonNegativeInt.default(40),
      tokens_per_s: z.number().positive('expected a positive number').default(60),
      output_tokens: positiveInt.default(32),
    })
    .default({ ttft_ms: 80, prefill_ms_per_1k: 40, tokens_per_s: 60, output_tokens: 32 }),
});

const ENGINE_SCHEMAS = { openai: openaiModel, llamacpp: llamacppModel, embedded: embeddedModel, sim: simModel } as const;

/** A model entry: its engine key picks which other keys are allowed. */
const modelEntry = z.unknown().transform((value, ctx) => {
  const engine = (value as { engine?: unknown } | null)?.engine;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    ctx.addIssue({ code: 'custom', message: 'expected a model entry (a mapping)' });
    return z.NEVER;
  }
  const schema = ENGINE_SCHEMAS[engine as keyof typeof ENGINE_SCHEMAS];
  if (!schema) {
    ctx.addIssue({ code: 'custom', path: ['engine'], message: 'expected one of llamacpp, openai, embedded, sim' });
    return z.NEVER;
  }
  const parsed = (schema as z.ZodType).safeParse(value);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      const paths = issue.code === 'unrecognized_keys' ? issue.keys.map((k) => [...issue.path, k]) : [issue.path];
      for (const p of paths) ctx.addIssue({ code: 'custom', path: p as PropertyKey[], message: issue.code === 'unrecognized_keys' ? 'unknown key' : describeIssue(issue) });
    }
    return z.NEVER;
  }
  return parsed.data as z.output<(typeof ENGINE_SCHEMAS)[keyof typeof ENGINE_SCHEMAS]>;
});

const aliasEntry = z.union([
  z.string().min(1),
  z.strictObject({ target: z.string().min(1), fallbacks: z.array(z.string().min(1)).default([]) }),
]);

export const configSchema = z.strictObject({
  node: z
    .strictObject({
      name: z.string().regex(NODE_NAME, 'expected a name matching [A-Za-z0-9][A-Za-z0-9._-]{0,62}').default(() => os.hostname().slice(0, 63)),
      state_dir: z.string().default('~/.local/state/viiwork').transform(expandHome),
    })
    .prefault({}),
  api: z
    .strictObject({
      host: z.string().default('0.0.0.0'),
      port: port.default(8086),
      max_body: size.default(32 * 1024 * 1024),
      cors: z.strictObject({ allow_origins: z.array(z.string()).default([]) }).prefault({}),
    })
    .prefault({}),
  mesh: z
    .strictObject({
      open: z.boolean().default(false),
      network: z.enum(['tailnet', 'lan', 'auto'], { error: 'expected one of tailnet, lan, auto' }).default('auto'),
      advertise: z.union([z.ipv4(), z.ipv6(), z.literal('')], { error: 'expected an IP address or ""' }).default(''),
      port: port.default(7946),
      seeds: z.array(hostPort).default([]),
      mdns: z.boolean().default(true),
      tailnet_socket: z.string().default('/var/run/tailscale/tailscaled.sock'),
      rejoin_interval: duration.default(60_000),
      capacity_poll: duration.default(1000),
      label: z.string().max(255, 'expected at most 255 bytes').default('viiwork-v2'),
    })
    .prefault({}),
  routing: z
    .strictObject({
      performance: z.boolean().default(true),
      queue_max: nonNegativeInt.default(64),
      queue_timeout: duration.default(20_000),
      forward_retry: nonNegativeInt.default(1),
      stale_after: duration.default(3000),
    })
    .prefault({}),
  models: z.array(modelEntry).default([]),
  aliases: z.record(z.string(), aliasEntry).default({}),
});

export type Config = z.output<typeof configSchema>;
export type ModelConfig = Config['models'][number];
export type EngineKind = ModelConfig['engine'];
export type SimSettings = z.output<typeof simModel>['sim'];

/** One issue as the operator reads it: what was expected, with zod's jargon removed. */
export function describeIssue(issue: z.core.$ZodIssue): string {
  if (issue.code === 'unrecognized_keys') return `unknown key${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => `"${k}"`).join(', ')}`;
  if (issue.code === 'invalid_type' && issue.message.startsWith('Invalid input')) return `expected ${issue.expected}`;
  return issue.message;
}

/** "models[1].parallel" from ['models', 1, 'parallel']. */
export function formatPath(p: readonly PropertyKey[]): string {
  let out = '';
  for (const part of p) {
    if (typeof part === 'number') out += `[${part}]`;
    else out += out ? `.${String(part)}` : String(part);
  }
  return out || '(top level)';
}
