/**
 * The gossip worker thread: runs the GossipEngine and talks to the node
 * through parentPort only. Started by MemberlistThread through worker.mjs,
 * which loads TypeScript first.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { GossipEngine } from './engine.ts';
import { toWireError, type EngineInit, type FromEngine, type ToEngine } from './protocol.ts';

const port = parentPort;
if (!port) throw new Error('src/mesh/thread/worker.ts runs as a worker thread (MemberlistThread starts it); do not import it');

// As on the main thread (src/cli/serve.ts), a bug in one code path is reported, not fatal; an uncaught exception ends the thread (MemberlistThread reports it).
process.on('unhandledRejection', (reason) => port.postMessage({ t: 'unhandled', error: toWireError(reason) } satisfies FromEngine));

const engine = await GossipEngine.start(workerData as EngineInit, (msg, transfer) => port.postMessage(msg, transfer));
// Failed to start: the node has been told and terminates us; take no calls meanwhile.
if (engine) port.on('message', (msg: ToEngine) => engine.handle(msg));
