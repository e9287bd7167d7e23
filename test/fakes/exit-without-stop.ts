/**
 * Fixture for the orphan test: starts a LlamacppBackend on the fake
 * llama-server with the model path given as argv[2], prints the engine's pid
 * once healthy, then exits without stopping the backend. The engines module's
 * exit hook must kill the engine all the same.
 */
import { LlamacppBackend } from '../../src/engines/llamacpp/llamacpp.ts';
import { FAKE_LLAMA_SERVER } from './fake-engine.ts';

const b = new LlamacppBackend(
  { id: 'orphan/0', model: 'orphan', index: 0, parallel: 1, context: 512, engine: 'llamacpp' },
  { workloads: ['chat'], audio: false },
  { binary: FAKE_LLAMA_SERVER, args: [], path: process.argv[2]!, startupTimeoutMs: 15_000 },
  () => {},
  { loadPollMs: 25, env: { FAKE_LOAD_MS: '50', FAKE_IGNORE_SIGTERM: '1' } },
);
await b.start();
process.stdout.write(`${b.state} ${b.pid}\n`);
process.exit(process.argv[3] === 'throw' ? 3 : 0);
