/**
 * The SSE scanner works on bytes: a stream of CJK and emoji text split at
 * every byte position arrives byte-identical, events are never cut, the
 * first content chunk and the usage are read, and the usage-only chunk the
 * node asked for is dropped.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SseScanner } from '../../src/http/sse.ts';

const piece = (s: string) => `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: s } }] })}\n\n`;
const STREAM =
  `data: ${JSON.stringify({ choices: [{ index: 0, delta: { role: 'assistant' } }] })}\n\n` +
  ['日本語', 'の', '😀👍🏽', '中文字', 'é', '🇫🇮'].map(piece).join('') +
  `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 12, completion_tokens: 6, prompt_tokens_details: { cached_tokens: 4 } } })}\n\n` +
  'data: [DONE]\n\n';
const BYTES = Buffer.from(STREAM);

function run(parts: Buffer[], strip: boolean) {
  let t = 0;
  const s = new SseScanner(strip, () => ++t);
  const out: Buffer[] = [];
  for (const p of parts) {
    const o = s.push(p);
    if (o) out.push(o);
  }
  const rest = s.flush();
  if (rest) out.push(rest);
  return { bytes: Buffer.concat(out), seen: s.seen };
}

describe('SSE scanning on bytes', () => {
  it('passes the stream byte for byte when split at every single position', () => {
    for (let at = 1; at < BYTES.length; at++) {
      const { bytes, seen } = run([BYTES.subarray(0, at), BYTES.subarray(at)], false);
      assert.ok(bytes.equals(BYTES), `split at ${at}`);
      assert.equal(seen.promptTokens, 12);
      assert.equal(seen.cachedTokens, 4);
      assert.equal(seen.firstContentAt !== undefined, true);
    }
  });

  it('passes it intact one byte at a time, and in three-byte pieces', () => {
    for (const size of [1, 3, 7]) {
      const parts: Buffer[] = [];
      for (let i = 0; i < BYTES.length; i += size) parts.push(BYTES.subarray(i, i + size));
      assert.ok(run(parts, false).bytes.equals(BYTES), `pieces of ${size}`);
    }
  });

  it('drops only the usage-only chunk when the node asked for usage on the client’s behalf', () => {
    const withoutUsage = STREAM.replace(/data: \{"choices":\[\],"usage".*?\n\n/, '');
    for (let at = 1; at < BYTES.length; at += 5) {
      const { bytes, seen } = run([BYTES.subarray(0, at), BYTES.subarray(at)], true);
      assert.equal(bytes.toString(), withoutUsage, `split at ${at}`);
      assert.equal(seen.promptTokens, 12);
    }
  });

  it('never holds back more than the unfinished event, with CRLF line ends too', () => {
    const s = new SseScanner(false);
    const crlf = Buffer.from('data: {"choices":[{"delta":{"content":"a"}}]}\r\n\r\ndata: {"cho');
    assert.equal(s.push(crlf)?.toString(), 'data: {"choices":[{"delta":{"content":"a"}}]}\r\n\r\n');
    assert.equal(s.flush()?.toString(), 'data: {"cho');
  });

  it('gathers the reply (CJK, emoji, escapes) whole however the stream is split, and still reads the usage', () => {
    const texts = ['日本語', 'の "quoted" \\ ', '😀👍🏽', '\n中文字', 'é', '🇫🇮'];
    const stream =
      `data: ${JSON.stringify({ choices: [{ index: 0, delta: { role: 'assistant' } }] })}\n\n` +
      texts.map(piece).join('') +
      `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 12, completion_tokens: 6 } })}\n\n` +
      'data: [DONE]\n\n';
    const bytes = Buffer.from(stream);
    for (let at = 1; at < bytes.length; at += 3) {
      const s = new SseScanner(false, () => 1, true);
      const out = [s.push(bytes.subarray(0, at)), s.push(bytes.subarray(at)), s.flush()].filter((b): b is Buffer => b !== undefined);
      assert.ok(Buffer.concat(out).equals(bytes), `bytes intact, split at ${at}`);
      assert.equal(s.reply?.reply?.text, texts.join(''), `split at ${at}`);
      assert.equal(s.seen.promptTokens, 12);
    }
  });

  it('a reply with reasoning is no reply; tool calls are gathered by name and arguments', () => {
    const ev = (delta: object) => `data: ${JSON.stringify({ choices: [{ index: 0, delta }] })}\n\n`;
    const reasoned = new SseScanner(false, () => 1, true);
    reasoned.push(Buffer.from(ev({ content: 'a' }) + ev({ reasoning_content: 'hmm' }) + ev({ content: 'b' })));
    assert.equal(reasoned.reply?.reply, undefined);
    const tools = new SseScanner(false, () => 1, true);
    tools.push(Buffer.from(ev({ content: 'x' }) + ev({ tool_calls: [{ index: 0, function: { name: 'get', arguments: '{"a"' } }] }) + ev({ tool_calls: [{ index: 0, function: { arguments: ':1}' } }] })));
    assert.deepEqual(tools.reply?.reply, { text: 'x', calls: [{ name: 'get', args: '{"a":1}' }] });
  });
});
