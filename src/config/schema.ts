/**
 * The configuration file's schema (SPEC section 2). Every key has its
 * default here and nowhere else; docs/configuration.md lists them.
 */
import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { isKnownWorkload, KNOWN_WORKLOADS } from '../workloads/workloads.ts';
import { closest } from './suggest.ts';
import { parseDuration, parseSize } from './units.ts';

export const NODE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

/** Node's timers hold at most 2^31-1 ms (24.8 days); a longer one fires at once. */
export const MAX_DURATION_MS = 2_147_483_647;

/**
 * A duration string, in milliseconds. Every duration in this file is a
 * period or a deadline, so zero or less is an error naming the key (a zero
 * `rejoin_interval` would spin; a zero timeout would fail every request).
 */
const duration = z
  .string({ error: 'expected a duration string such as "500ms", "20s" or "10m"' })
  .transform((s, ctx) => {
    const ms = parseDuration(s);
    if (ms === undefined) {
      ctx.addIssue({ code: 'custom', message: `expected a duration such as "500ms", "20s" or "10m", got "${s}"` });
      return z.NEVER;
    }
    if (ms <= 0) {
      ctx.addIssue({ code: 'custom', message: `expected a duration greater than zero, got "${s}"` });
      return z.NEVER;
    }
    if (ms > MAX_DURATION_MS) {
      ctx.addIssue({ code: 'custom', message: `expected a duration of at most 596h (24.8 days), got "${s}"` });
      return z.NEVER;
    }
    return ms;
  });

/** A duration that may also be off: `0` (or "0") turns the behaviour off, and is kept as 0 ms. */
const durationOrOff = z
  .union([z.literal(0), z.string()], { error: 'expected 0 (off) or a duration string such as "500ms" or "2s"' })
  .transform((s, ctx) => {
    const ms = s === 0 || s === '0' ? 0 : parseDuration(s);
    if (ms === undefined || ms < 0 || ms > MAX_DURATION_MS) {
      ctx.addIssue({ code: 'custom', message: `expected 0 (off) or a duration such as "500ms" or "2s", got "${s}"` });
      return z.NEVER;
    }
    return ms;
  });

/** A byte size ("32MiB", "512KB" or a number of bytes) between `min` and `max` bytes. */
function size(min: number, max: number, maxText: string) {
  return z
    .union([z.string(), z.number().int().nonnegative()], { error: 'expected a size such as "32MiB"' })
    .transform((s, ctx) => {
      const n = typeof s === 'number' ? s : parseSize(s);
      if (n === undefined) {
        ctx.addIssue({ code: 'custom', message: `expected a size such as "32MiB" or "512KB", got "${s}"` });
        return z.NEVER;
      }
      if (n < min || n > max) {
        ctx.addIssue({ code: 'custom', message: `expected a size from ${min} byte${min === 1 ? '' : 's'} to ${maxText}, got "${s}"` });
        return z.NEVER;
      }
      return n;
    });
}

/** Bytes a model entry or a node may use: a size, or `auto` (computed; see src/lifecycle/memory.ts). */
const memorySize = z.union([z.literal('auto'), size(0, 2 ** 50, '1PiB')], { error: 'expected "auto" or a size such as "8GiB"' });

/** `idle_unload`: a duration, or "0" (never unloaded for idleness). */
const idleDuration = z.union([z.literal('0').transform(() => 0), z.literal(0), duration], { error: 'expected a duration such as "15m", or "0" for never' });

/** An environment variable's name, as a shell would accept it. */
export const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const envName = z.string().regex(ENV_NAME, 'expected the name of an environment variable, such as LLAMA_KEY');

/** A host name or an IP literal, without scheme or port. */
const HOST_NAME = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$/;
const hostName = z.union([z.ipv4(), z.ipv6(), z.string().regex(HOST_NAME)], {
  error: 'expected a host name or an IP address, without scheme or port (such as "gpu1.lan" or "10.0.0.5")',
});

/** A browser origin as browsers send it: scheme://host[:port], lower case, no path, no trailing slash. */
const ORIGIN = /^[a-z][a-z0-9+.-]*:\/\/[^/\s?#A-Z]+$/;
const origin = z.string().refine((o) => o === '*' || ORIGIN.test(o), {
  message: 'expected "*" or an origin such as "https://app.example.com" or "http://10.0.0.5:3000" (lower case, no path, no trailing slash: origins are compared exactly)',
});

const positiveInt = z.number({ error: 'expected a positive integer' }).int('expected a positive integer').positive('expected a positive integer');
const nonNegativeInt = z.number({ error: 'expected a non-negative integer' }).int('expected a non-negative integer').nonnegative('expected a non-negative integer');
const port = z.number({ error: 'expected a port number' }).int('expected a port number').min(0, 'expected a port number').max(65535, 'expected a port number');

const hostPort = z
  .string()
  .regex(/^[^\s:]+:\d{1,5}$|^\[[0-9a-fA-F:]+\]:\d{1,5}$/, { message: 'expected "ip:port"', abort: true })
  .refine((s) => {
    const p = Number(s.slice(s.lastIndexOf(':') + 1));
    return p >= 1 && p <= 65535;
  }, 'expected "ip:port" with a port from 1 to 65535');

function expandHome(p: string): string {
  return p.startsWith('~/') ? path.join(os.homedir(), p.slice(2)) : p;
}

/**
 * Workloads an operator may declare: the ones this node routes (SPEC section
 * 8), `responses`, which marks an engine that serves the Responses API
 * natively, and `messages`, one that serves Anthropic's Messages API natively.
 * Anything else in a config is a typo, not a capability.
 */
export const CONFIG_WORKLOADS: readonly string[] = [...new Set<string>([...KNOWN_WORKLOADS, 'responses', 'messages'])];

const workloadList = z
  .array(
    z.string().refine((w) => isKnownWorkload(w) || CONFIG_WORKLOADS.includes(w), {
      error: (issue) => `unknown workload "${String(issue.input)}": expected one of ${CONFIG_WORKLOADS.join(', ')}`,
    }),
  )
  .min(1, 'expected at least one workload');

/** Keys every model entry takes, whatever its engine. */
const modelCommon = {
  name: z.string().min(1, 'expected a model name'),
  parallel: positiveInt.default(4),
  workloads: workloadList.optional(),
  audio_input: z.boolean().default(false),
  context: positiveInt.default(8192),
  replicas: positiveInt.default(1),
  /** The environment variable holding the key this engine wants (a bearer token); never logged, reported or forwarded. */
  api_key_env: envName.optional(),
  /** always: loaded at start and kept; on_demand: loaded when asked for, unloaded after idle_unload (SPEC section 11). */
  load: z.enum(['always', 'on_demand'], { error: 'expected always or on_demand' }).default('always'),
  /** on_demand only: unloaded after this long without a request; 0 = never. */
  idle_unload: idleDuration.default(15 * 60_000),
  /** Bytes one backend needs; auto: from the GGUF (llamacpp, embedded), 0 for openai and sim. */
  memory: memorySize.default('auto'),
};

/** The one value `models` takes: every model the endpoint lists (SPEC section 3, "Endpoints that serve many models"). */
export const MODELS_AUTO_MESSAGE = 'expected auto (every model the endpoint lists, refreshed as it changes)';

const openaiModel = z
  .strictObject({
    ...modelCommon,
    engine: z.literal('openai'),
    url: z.url({ protocol: /^https?$/, error: 'expected an http:// or https:// URL such as http://127.0.0.1:9100' }),
    /** auto: the entry serves every model the endpoint lists (`name` is then the group's label); left out: one model, `name`. */
    models: z.literal('auto', { error: MODELS_AUTO_MESSAGE }).optional(),
    // Left out, the default depends on `models` (below): on_demand for a many-model endpoint, always otherwise.
    load: z.enum(['always', 'on_demand'], { error: 'expected always or on_demand' }).optional(),
  })
  .superRefine((m, ctx) => {
    if (m.load === 'on_demand' && m.models !== 'auto')
      ctx.addIssue({
        code: 'custom',
        path: ['load'],
        message:
          'an openai entry of one model cannot be on_demand: the node cannot start or stop a server it does not run (use load: always, a llamacpp or embedded entry, or models: auto for a llama-server in router mode)',
      });
    if (m.models === 'auto' && m.replicas > 1)
      ctx.addIssue({ code: 'custom', path: ['replicas'], message: 'a models: auto entry serves each listed model once (the endpoint runs its models itself): remove replicas' });
  })
  // A many-model endpoint loads on demand unless told otherwise: loading every model it lists at start could not fit.
  .transform((m) => ({ ...m, load: m.load ?? (m.models === 'auto' ? 'on_demand' : 'always') }) as const);

/** A split model is one llama-server with its lenders: one copy per entry. */
export const SPLIT_ONE_COPY = 'a split model runs as one llama-server with the memory its lenders hold';

/** `split`: false, auto, or the members that may lend to this model (SPEC section 11, "A model bigger than one host"). */
const splitSetting = z.union(
  [
    z.literal(false),
    z.literal('auto'),
    z
      .array(z.string().regex(NODE_NAME, 'expected member names (node.name of each member that may lend), such as [gpu2, gpu3]'), {
        error: 'expected false, auto, or a list of member names such as [gpu2, gpu3]',
      })
      .min(1, 'expected at least one member name; write split: auto to let any lending member take part, or split: false')
      .refine((a) => new Set(a).size === a.length, 'expected each member once: remove the repeated name'),
  ],
  { error: 'expected false, auto, or a list of member names such as [gpu2, gpu3]' },
);

/** Keys of an entry that names a model file (SPEC section 11, "Model files travel between members"). */
const fileKeys = {
  path: z.string().min(1, 'expected the path of a GGUF file').transform(expandHome),
  /** Optional: the file's SHA-256 (64 hex); a file here or fetched must match it. "" = not checked. */
  sha256: z
    .string()
    .regex(/^([0-9a-fA-F]{64})?$/, 'expected "" or the 64 hex digits of a SHA-256 (sha256sum prints them)')
    .transform((s) => s.toLowerCase())
    .default(''),
  /** mesh: when `path` does not exist here, the file is fetched from a member that has it; never: never fetched. */
  fetch: z.enum(['mesh', 'never'], { error: 'expected mesh or never' }).default('mesh'),
};

const llamacppModel = z.strictObject({
  ...modelCommon,
  engine: z.literal('llamacpp'),
  ...fileKeys,
  startup_timeout: duration.default(600_000),
  /**
   * Today's llama-server's host-RAM prompt cache, in MiB per backend (`--cache-ram`, passed by the node): prompts a
   * slot gives up are kept there and restored instead of prefilled. Default the engine's 8192; 0 = off.
   */
  cache_ram: z
    .number({ error: 'expected a whole number of MiB such as 8192, or 0 to turn the RAM prompt cache off' })
    .int('expected a whole number of MiB such as 8192, or 0 to turn the RAM prompt cache off')
    .min(0, 'expected 0 (off) or a positive number of MiB: the node budgets the pool, so an unlimited one (-1) is not accepted')
    .max(16 * 1024 * 1024, 'expected at most 16777216 MiB (16 TiB)')
    .default(8192),
  llamacpp: z
    .strictObject({
      binary: z.string().min(1, 'expected a command name or a path').default('llama-server'),
      args: z.array(z.string()).default([]),
    })
    .default({ binary: 'llama-server', args: [] }),
  /**
   * A model bigger than one host (SPEC section 11): false (default) runs it here only; auto, or a list of members
   * that may lend to it, runs it across members through llama.cpp's RPC backend when it fits no single budget.
   */
  split: splitSetting.default(false),
})
  .superRefine((m, ctx) => {
    if (m.split !== false && m.replicas > 1)
      ctx.addIssue({ code: 'custom', path: ['split'], message: `${SPLIT_ONE_COPY}, and replicas is ${m.replicas}: remove replicas, or set split: false to run ${m.replicas} whole copies here` });
  });

const embeddedModel = z.strictObject({
  ...modelCommon,
  engine: z.literal('embedded'),
  ...fileKeys,
  embedded: z
    .strictObject({
      threads: positiveInt.default(1),
      gpu: z.boolean().default(false),
    })
    .default({ threads: 1, gpu: false }),
});

/** A loopback IP literal: the sim engine has no keys, so it never listens where the network reaches it. */
const loopbackIp = z.union([z.ipv4(), z.ipv6()], { error: 'expected a loopback address (127.x.x.x or ::1)' }).refine(
  (ip) => /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(ip) || ip === '::1',
  'expected a loopback address (127.x.x.x or ::1): the sim engine answers anyone who reaches it',
);

const simModel = z
  .strictObject({
    ...modelCommon,
    engine: z.literal('sim'),
    sim: z
      .strictObject({
        ttft_ms: nonNegativeInt.default(80),
        prefill_ms_per_1k: nonNegativeInt.default(40),
        tokens_per_s: z.number().positive('expected a positive number').default(60),
        output_tokens: positiveInt.default(32),
        /** A simulated load: the backend is `loading` this long before it serves (SPEC section 11). */
        load_ms: nonNegativeInt.optional(),
        /*
         * The keys below model the engine, not the node: left out, the sim
         * behaves as llama-server does by default (cache on, similarity 0.5,
         * see src/engines/prompt-cache.ts) and listens on 127.0.0.1, any port.
         * They stay optional so settings built in code need not spell them.
         */
        /** The prompt cache (llama-server's `cache_prompt`): off, every request prefills its whole prompt. */
        cache: z.boolean().optional(),
        /** false: the answers carry no cached-token count (no `cached_tokens`, no `cache_n`/`prompt_n`), as engines that do not report their cache answer. */
        report_cache: z.boolean().optional(),
        /** llama-server's `--slot-prompt-similarity`: a free slot is preferred for its cached prefix only above this share of the prompt. */
        slot_prompt_similarity: z.number({ error: 'expected a number from 0 to 1' }).min(0, 'expected a number from 0 to 1').max(1, 'expected a number from 0 to 1').optional(),
        /**
         * Today's llama-server's host-RAM prompt cache, in simulated tokens (the sim has no KV bytes): a slot's prompt
         * is saved there when another prompt takes the slot, and restored instead of prefilled. 0 or left out: none
         * (b4748's behaviour, a prompt lives only in its slot). With a pool the sim also picks slots by today's rule.
         */
        cache_ram: nonNegativeInt.optional(),
        /** Where the engine listens (loopback only), so a benchmark's other arms can reach the same engine. */
        host: loopbackIp.optional(),
        /** Its port; 0 or left out: any free port. */
        port: port.optional(),
      })
      .default({ ttft_ms: 80, prefill_ms_per_1k: 40, tokens_per_s: 60, output_tokens: 32 }),
  })
  .superRefine((m, ctx) => {
    if ((m.sim.port ?? 0) !== 0 && m.replicas > 1)
      ctx.addIssue({ code: 'custom', path: ['sim', 'port'], message: `a fixed port takes one backend, and replicas is ${m.replicas}: leave the port out (any free port) or use one entry per port` });
  });

/** `split:` on an entry whose engine is not llama-server. */
const SPLIT_ONLY_LLAMACPP = (engine: string) => `split is for llamacpp entries (llama.cpp's RPC backend spreads one model over members); a ${engine} entry runs whole on one host`;

/** `models:` on an entry whose engine runs one model. */
const MODELS_ONLY_OPENAI = (engine: string) =>
  `models: auto is for an openai entry only (an endpoint that serves many models: llama-server in router mode, llama-swap, Ollama's /v1, LM Studio); a ${engine} entry is one model`;

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
  if (engine !== 'openai' && 'models' in value) {
    ctx.addIssue({ code: 'custom', path: ['models'], message: MODELS_ONLY_OPENAI(String(engine)) });
    return z.NEVER;
  }
  if (engine !== 'llamacpp' && 'split' in value) {
    ctx.addIssue({ code: 'custom', path: ['split'], message: SPLIT_ONLY_LLAMACPP(String(engine)) });
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
      /** Bytes the engines here may use; auto: GPU memory (nvidia-smi, rocm-smi) less other processes' use, else 75% of RAM. */
      memory_budget: memorySize.default('auto'),
      /** Where files fetched from members are kept (SPEC section 11). */
      models_dir: z.string().default('~/.local/share/viiwork/models').transform(expandHome),
      /** Bytes per second this node sends model files at; 0 = no limit. */
      transfer_rate: size(0, 2 ** 50, '1PiB').default(0),
      /**
       * MiB of saved slot caches kept under state_dir (SPEC section 13): prompts saved on stop and before an idle
       * unload, restored when the model loads again; the oldest files go first. 0 = nothing is saved.
       */
      cache_disk: z
        .number({ error: 'expected a whole number of MiB such as 4096, or 0 to keep no slot caches on disk' })
        .int('expected a whole number of MiB such as 4096, or 0 to keep no slot caches on disk')
        .min(0, 'expected 0 (off) or a positive number of MiB such as 4096')
        .max(16 * 1024 * 1024, 'expected at most 16777216 MiB (16 TiB)')
        .default(4096),
      /**
       * Lend this node's free memory to members that run a model bigger than one host (SPEC section 11): it starts
       * `ggml-rpc-server` on loopback for them, reached through the members-only tunnel. Off unless the operator says so.
       */
      lend_memory: z.boolean({ error: 'expected true or false' }).default(false),
      /** The `ggml-rpc-server` a lend starts; "" = the one beside this node's llama-server (else found in PATH). */
      rpc_server: z.string().default('').transform(expandHome),
      /** How long a drain (`viiwork drain`, SIGTERM) lets the requests running or queued here finish before the node leaves. */
      drain_timeout: duration.default(60_000),
    })
    .prefault({}),
  api: z
    .strictObject({
      host: hostName.default('0.0.0.0'),
      port: port.default(8086),
      /** Larger request bodies get 413. */
      max_body: size(1, 1024 ** 3, '1GiB').default(32 * 1024 * 1024),
      /** Bytes of a request's `model`; a longer name gets 400. */
      max_model_name: size(1, 65_536, '64KiB').default(256),
      /** Nesting depth of request JSON; deeper gets 400. */
      max_json_depth: z
        .number({ error: 'expected an integer from 8 to 1024' })
        .int('expected an integer from 8 to 1024')
        .min(8, 'expected an integer from 8 to 1024')
        .max(1024, 'expected an integer from 8 to 1024')
        .default(64),
      /** Time to receive a request's headers; then the connection is closed (408). */
      header_timeout: duration.default(30_000),
      /** An upload that sends nothing this long is dropped with 408. */
      body_idle_timeout: duration.default(30_000),
      /** The whole body must have arrived this long after the request's headers; else 408 and the connection is closed. */
      body_timeout: duration.default(60_000),
      /** Request bodies one client address may have arriving at once; one more is answered 503 before it is read. */
      max_open_bodies: positiveInt.default(32),
      /** A client that reads nothing of its answer this long has its request cancelled and its slot freed. */
      write_stall: duration.default(60_000),
      /** After the first content chunk, a stream that receives nothing this long ends with an SSE error event. */
      stream_stall: duration.default(60_000),
      cors: z.strictObject({ allow_origins: z.array(origin).default([]) }).prefault({}),
      /** Names a browser may reach this node by, beyond its node name, advertise address and loopback (DNS rebinding guard). */
      allowed_hosts: z.array(hostName).default([]),
      /** Environment variable holding client keys, comma-separated; "" = none. */
      keys_env: z.string().refine((v) => v === '' || ENV_NAME.test(v), 'expected "" or the name of an environment variable, such as VIIWORK_API_KEYS').default(''),
      /** File with one client key per line; "" = none. */
      keys_file: z.string().default('').transform(expandHome),
      /** true: /health, /metrics and the dashboards need a client key too. */
      protect_ops: z.boolean().default(false),
      /** Prompt-cache hygiene for agent clients (docs/api.md lists each rule): on by default. */
      agent_hygiene: z.boolean().default(true),
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
      /**
       * Members this node does not route to are polled this often (never more
       * often than capacity_poll; SPEC section 7: 10s by default). The first
       * request for one of their models polls them at once before it is placed.
       */
      capacity_background: duration.default(10_000),
      /** A model asked for at this node keeps its hosts polled every capacity_poll this long after its last request. */
      capacity_interest: duration.default(600_000),
      label: z
        .string()
        .refine((l) => Buffer.byteLength(l) <= 255, 'expected at most 255 bytes')
        .default('viiwork-v2'),
    })
    .prefault({}),
  routing: z
    .strictObject({
      performance: z.boolean().default(true),
      queue_max: nonNegativeInt.default(64),
      queue_timeout: duration.default(20_000),
      /** How long a batch-priority request may wait (SPEC section 12). */
      batch_queue_timeout: duration.default(600_000),
      forward_retry: nonNegativeInt.default(1),
      /**
       * With keys (or batch requests): how long a forward may wait at a full executor, in its line ordered by band and key
       * (SPEC section 12, docs/decisions.md "Fairness across entry nodes"); 0: a forward never waits there (refused at once).
       */
      // Off by default: SPEC 9 step 2 says a forward is never queued; an operator opts in (docs/decisions.md).
      forward_wait: durationOrOff.default(0),
      /**
       * Free slots per target that batch requests may not take while interactive requests came for the model within
       * interactive_reserve_for (queue/reserve.ts); a target never holds back all its slots. 0: batch takes any.
       */
      interactive_reserve: nonNegativeInt.default(1),
      interactive_reserve_for: duration.default(30_000),
      stale_after: duration.default(3000),
      prefix_affinity: z.boolean().default(true),
      /** How long a request waits for an on-demand load (SPEC section 11). */
      load_wait: duration.default(300_000),
      /** Queueing this long on a model whose loaded copies are all busy loads one more copy. */
      scale_after: duration.default(10_000),
    })
    .prefault({}),
  /** SPEC section 10: OpenTelemetry traces, off unless otlp_endpoint is set (docs/configuration.md). */
  telemetry: z
    .strictObject({
      /** OTLP/HTTP (protobuf) traces endpoint, e.g. http://127.0.0.1:4318/v1/traces; "" = no tracing. */
      otlp_endpoint: z.union([z.url({ protocol: /^https?$/, error: 'expected an http:// or https:// URL, or ""' }), z.literal('')]).default(''),
      /** Share of requests traced (0–1); a client's traceparent with its sampled flag decides for its own. */
      sample: z.number({ error: 'expected a number from 0 to 1' }).min(0, 'expected a number from 0 to 1').max(1, 'expected a number from 0 to 1').default(1),
    })
    .prefault({}),
  models: z.array(modelEntry).default([]),
  aliases: z.record(z.string(), aliasEntry).default({}),
});

export type Config = z.output<typeof configSchema>;
/**
 * One model entry. `listed` marks an entry the node made from a `models:
 * auto` entry, one per model its endpoint lists (engines/many/listing.ts): never
 * written in a config file.
 */
export type ModelConfig = Config['models'][number] & { readonly listed?: ListedFrom };

/** Where a listed model's entry came from. */
export interface ListedFrom {
  /** The `models: auto` entry's name: a label for the group in logs. */
  readonly group: string;
  /** The endpoint is llama-server in router mode: the node loads, unloads and reads slots per model through its API. */
  readonly router: boolean;
}
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

/** The object schema inside defaults, prefaults, optionals and transforms, if any. */
function objectShape(schema: unknown): Record<string, unknown> | undefined {
  let s = schema as { _zod?: { def?: Record<string, unknown> }; shape?: Record<string, unknown> } | undefined;
  for (let i = 0; i < 8 && s; i++) {
    if (s.shape) return s.shape;
    const def = s._zod?.def;
    if (!def) return undefined;
    if (Array.isArray(def.options)) return def.options.map(objectShape).find(Boolean);
    s = (def.innerType ?? def.in) as typeof s;
  }
  return undefined;
}

/** Every key allowed beside `path`'s last element: for a model entry, the keys of every engine. */
export function knownKeys(path: readonly PropertyKey[]): string[] {
  const parent = path.slice(0, -1);
  if (parent[0] === 'models' && typeof parent[1] === 'number') {
    const inner = parent.slice(2);
    const keys = new Set<string>();
    for (const schema of Object.values(ENGINE_SCHEMAS)) {
      let shape = objectShape(schema);
      for (const part of inner) shape = shape && objectShape(shape[String(part)]);
      for (const k of Object.keys(shape ?? {})) keys.add(k);
    }
    return [...keys];
  }
  if (parent[0] === 'aliases' && parent.length === 2) return Object.keys(objectShape(aliasEntry) ?? {});
  let shape = objectShape(configSchema);
  for (const part of parent) shape = shape && objectShape(shape[String(part)]);
  return Object.keys(shape ?? {});
}

/** How to fix one schema problem, in the operator's words. */
export function schemaFix(path: readonly PropertyKey[], message: string): string {
  const last = path[path.length - 1];
  const section = typeof path[0] === 'string' ? path[0] : 'models';
  const docs = path.length <= 1 ? `the sections are ${knownKeys(path).join(', ')}` : `docs/configuration.md lists every key of "${section}" with its default`;
  if (message === 'unknown key') {
    const guess = closest(String(last), knownKeys(path));
    return guess ? `did you mean "${guess}"? Otherwise remove it (${docs})` : `remove it, or correct its spelling (${docs})`;
  }
  if (message.startsWith('unknown workload')) {
    const bad = /"([^"]*)"/.exec(message)?.[1] ?? '';
    const guess = closest(bad, CONFIG_WORKLOADS);
    return guess ? `did you mean "${guess}"? Workloads are ${CONFIG_WORKLOADS.join(', ')}` : `use workloads from: ${CONFIG_WORKLOADS.join(', ')}`;
  }
  if (String(last) === 'models' && path[0] === 'models')
    return message === MODELS_AUTO_MESSAGE
      ? 'write models: auto, or leave it out for an entry of one model'
      : 'remove models from this entry, or make it engine: openai with the url of the endpoint';
  if (path[0] === 'models' && path[2] === 'split') {
    if (message.startsWith('split is for llamacpp')) return 'remove split from this entry, or make it engine: llamacpp with the path of a GGUF file';
    if (message.includes('replicas')) return 'remove replicas (a split model is one copy), or set split: false';
    return 'write split: false, split: auto, or split: [member, ...] with the node.name of each member that may lend';
  }
  if (message.includes('duration')) return 'write a duration greater than zero with its unit, such as "500ms", "20s", "10m" or "1h"';
  if (message.includes('size')) return 'write a size with its unit, such as "256", "512KB" or "32MiB", within the bound shown';
  if (message.includes('engine') || String(last) === 'engine') return 'set engine to llamacpp, openai, embedded or sim';
  return `correct the value (${docs})`;
}

/** A node that finds no members by itself (no seeds, no mDNS, not on a tailnet): a model file not here can never come to it. */
export function findsNoMembers(config: Pick<Config, 'mesh'>): boolean {
  return config.mesh.seeds.length === 0 && !config.mesh.mdns && config.mesh.network !== 'tailnet';
}
