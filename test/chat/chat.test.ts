/**
 * The chat room's own pieces, beside what test/responses and test/messages
 * check through the translators: the translated-body checks (the exact
 * 413/400 texts dispatch sends), the whole-answer and usage readers, and the
 * stream life every stream translator inherits.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ChatStreamTranslator, isObj, parseTranslatedBody, readChatCompletion, readChatUsage, TRANSLATE_MAX, type ChatChunk } from '../../src/chat/index.ts';

describe('parseTranslatedBody', () => {
  it('parses a JSON body', () => {
    assert.deepEqual(parseTranslatedBody(Buffer.from('{"a":1}'), 'Responses', 'x'), { ok: true, doc: { a: 1 } });
  });

  it('refuses a body over TRANSLATE_MAX with a 413 that names the API and ends with its advice', () => {
    const r = parseTranslatedBody(Buffer.alloc(TRANSLATE_MAX + 1, 0x20), 'Messages', 'send a shorter conversation');
    assert.deepEqual(r, {
      ok: false,
      refusal: { status: 413, code: 'request_too_large', message: `a Messages API request to a chat-only engine is translated, and translation takes at most ${8 * 1024 * 1024} bytes; send a shorter conversation` },
    });
  });

  it('refuses a body that is not JSON with a 400', () => {
    assert.deepEqual(parseTranslatedBody(Buffer.from('{'), 'Responses', 'x'), { ok: false, refusal: { status: 400, code: 'invalid_json', message: 'the request body is not valid JSON' } });
  });
});

describe('readChatCompletion', () => {
  it('reads choice 0 whatever its place, with the engine quirks (reasoning, object arguments)', () => {
    const c = readChatCompletion({
      model: 'm',
      usage: { prompt_tokens: 3 },
      choices: [
        { index: 1, message: { content: 'no' } },
        { index: 0, finish_reason: 'tool_calls', message: { content: [{ type: 'text', text: 'a' }, { text: 'b' }], reasoning: 'r', tool_calls: [{ id: '', function: { name: 'f', arguments: { x: 1 } } }, 7] } },
      ],
    });
    assert.deepEqual(c, { ok: true, model: 'm', text: 'ab', reasoning: 'r', refusal: '', toolCalls: [{ id: undefined, name: 'f', args: '{"x":1}' }], finishReason: 'tool_calls', usage: { prompt_tokens: 3 } });
  });

  it('says why a body is not a chat completion, with the engine error when it sent one', () => {
    assert.deepEqual(readChatCompletion({ error: { message: 'boom' } }), { ok: false, model: undefined, failure: "the engine's answer is not a chat completion: boom" });
    assert.deepEqual(readChatCompletion('x'), { ok: false, model: undefined, failure: "the engine's answer is not a chat completion" });
  });
});

describe('readChatUsage', () => {
  it('reads counts, 0 for what is missing or not a count, total only when sent', () => {
    assert.equal(readChatUsage(undefined), undefined);
    assert.deepEqual(readChatUsage({ prompt_tokens: 10, completion_tokens: -1, prompt_tokens_details: { cached_tokens: 4 } }), { promptTokens: 10, completionTokens: 0, cachedTokens: 4, reasoningTokens: 0, totalTokens: undefined });
    assert.equal(readChatUsage({ total_tokens: 9 })?.totalTokens, 9);
  });
});

/** The smallest translator: its events name what the base class asked it for. */
class Probe extends ChatStreamTranslator {
  constructor() {
    super('probe');
  }
  protected override opening(): string {
    return '[open]';
  }
  protected override translate(c: ChatChunk): string {
    return c.text;
  }
  protected override completion(finishReason: unknown): string {
    return `[done ${String(finishReason)}]`;
  }
  protected override failure(message: string, code?: string): string {
    return `[failed ${message}${code ? ` ${code}` : ''}]`;
  }
}

const sse = (v: unknown) => `data: ${typeof v === 'string' ? v : JSON.stringify(v)}\n\n`;

describe('ChatStreamTranslator', () => {
  it('opens once, hands on each chunk, completes at the end once the engine gave a finish reason', () => {
    const t = new Probe();
    let out = t.start() + t.start();
    out += t.pushBytes(sse({ choices: [{ delta: { content: 'a' } }] }) + sse({ choices: [{ delta: { content: 'b' }, finish_reason: 'stop' }] }));
    out += t.end();
    assert.equal(out, '[open]ab[done stop]');
    assert.ok(t.finished);
    assert.equal(t.push({ choices: [{ delta: { content: 'late' } }] }) + t.error('late') + t.end(), '');
  });

  it('completes at [DONE] even without a finish reason', () => {
    const t = new Probe();
    assert.equal(t.pushBytes(sse('[DONE]')), '[open][done undefined]');
  });

  it('fails a stream that stops short, breaks, or carries the engine error', () => {
    assert.equal(new Probe().end(), "[open][failed the engine's stream ended before the probe was complete]");
    assert.equal(new Probe().pushBytes(sse('{nope')), '[open][failed the engine\'s stream carried an event that is not JSON: {nope]');
    assert.equal(new Probe().push({ error: { message: 'oom' } }), '[open][failed oom]');
    assert.equal(new Probe().error('gone', 'engine_failed'), '[open][failed gone engine_failed]');
  });
});

describe('isObj', () => {
  it('is a plain object, not null or an array', () => {
    assert.deepEqual([{}, null, [], 'x'].map(isObj), [true, false, false, false]);
  });
});
