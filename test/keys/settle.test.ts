/** A local run's end for its key (SPEC section 12, keys/settle.ts): the usage row it adds and the tokens it settles, as a table. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LOCAL_CALLER, type Caller } from '../../src/keys/access.ts';
import { settlement, type RunUsage, type SettledRequest } from '../../src/keys/settle.ts';

const limited: Caller = { ...LOCAL_CALLER, name: 'alice', role: 'user', limits: { tpm: 1000 } };
const chat = (over: Partial<SettledRequest> = {}): SettledRequest => ({ caller: limited, model: 'm', workload: 'chat', promptTokens: 100, maxTokens: 50, ...over });

describe('settlement of a local run', () => {
  const rows: [string, SettledRequest, RunUsage, boolean, ReturnType<typeof settlement>][] = [
    [
      'an answer with usage: the row, and the engine count less what admission held (100 + 50)',
      chat(),
      { status: 200, promptTokens: 120, cachedTokens: 20, completionTokens: 30, startedAt: 7 },
      true,
      { record: { key: 'alice', model: 'm', outcome: 'ok', promptCached: 20, promptUncached: 100, completion: 30 }, settle: { key: 'alice', tokens: 0, at: 7 } },
    ],
    [
      'a refusal that reports no usage ran nothing: everything held is handed back',
      chat(),
      { status: 400, startedAt: 3 },
      true,
      { record: { key: 'alice', model: 'm', outcome: 'error', promptCached: 0, promptUncached: 0, completion: 0 }, settle: { key: 'alice', tokens: -150, at: 3 } },
    ],
    [
      'a success that reports no usage settles nothing',
      chat(),
      { status: 200 },
      true,
      { record: { key: 'alice', model: 'm', outcome: 'ok', promptCached: 0, promptUncached: 0, completion: 0 } },
    ],
    [
      'a client that left is no error; the estimate stands in for a prompt count the engine never gave',
      chat({ heldOutput: 10 }),
      { status: 200, completionTokens: 4, cutShort: 'client' },
      true,
      { record: { key: 'alice', model: 'm', outcome: 'ok', promptCached: 0, promptUncached: 0, completion: 4 }, settle: { key: 'alice', tokens: 100 + 4 - 110, at: undefined } },
    ],
    [
      'an engine that broke off is an error',
      chat(),
      { status: 200, promptTokens: 100, completionTokens: 2, cutShort: 'engine' },
      true,
      { record: { key: 'alice', model: 'm', outcome: 'error', promptCached: 0, promptUncached: 100, completion: 2 }, settle: { key: 'alice', tokens: -48, at: undefined } },
    ],
    [
      'an embedding holds no output tokens',
      chat({ workload: 'embeddings' }),
      { status: 200, promptTokens: 100 },
      true,
      { record: { key: 'alice', model: 'm', outcome: 'ok', promptCached: 0, promptUncached: 100, completion: 0 }, settle: { key: 'alice', tokens: 0, at: undefined } },
    ],
    ['a key without limits: the row only', chat({ caller: { ...limited, limits: {} } }), { status: 200, promptTokens: 5 }, true, { record: { key: 'alice', model: 'm', outcome: 'ok', promptCached: 0, promptUncached: 5, completion: 0 } }],
    ['no caller with keys on: an anonymous row', chat({ caller: undefined }), { status: 200, promptTokens: 5 }, true, { record: { key: 'anonymous', model: 'm', outcome: 'ok', promptCached: 0, promptUncached: 5, completion: 0 } }],
    ['no caller and no keys: nothing at all', chat({ caller: undefined }), { status: 200, promptTokens: 5 }, false, {}],
  ];
  for (const [name, rr, used, keysEnabled, want] of rows) it(name, () => assert.deepEqual(settlement(rr, used, keysEnabled), want));
});
