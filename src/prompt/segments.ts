/**
 * A prompt's canonical segments, read the way each dialect's body says them
 * (chat completions, Responses, Messages, completions): the system part, the
 * tools right after it (as chat templates put them), then each message; one
 * reader per dialect, chosen by the request's dialect, feeding a sink that
 * either hashes them into links (chain.ts) or collects them (the sim
 * engine's rendering). Sources are the raw body, bounded, or a parsed object
 * (sources.ts).
 */
import type { PromptDialect } from '../workloads/workloads.ts';
import { callText, canonicalJson, chatCalls, canonicalContentText, joinLines, partText, toolText, type Segment } from './canonical.ts';
import { isObj } from '../chat/index.ts';
import { ObjectSource, type Source } from './sources.ts';

/** Completions: a boundary every this many characters of prompt. */
export const COMPLETION_LINK_CHARS = 1024;

export interface ChainOptions {
  /**
   * Prompt-cache hygiene (api.agent_hygiene): system text blocks of a
   * Messages request that start with `x-anthropic-billing-header:` are left
   * out, as the node removes them before the engine sees them. Pass the
   * same value the executor's engines get, so the chain is what they hold.
   */
  hygiene?: boolean;
}

/** Where segments go: hashed into links (the router, digests) or collected (the sim's rendering). */
export interface Sink {
  /** A whole segment, as it ends a boundary. */
  segment(s: Segment): void;
  /** A completions chunk of raw prompt text. */
  chunk(text: string): void;
  /** The boundary just emitted (or, with none yet, the next one) is the head. */
  endOfHead(): void;
  readonly head: number;
}


class ListSink implements Sink {
  readonly segments: Segment[] = [];
  head = -1;
  segment(s: Segment): void {
    this.segments.push(s);
  }
  chunk(text: string): void {
    this.segments.push({ role: '', text });
  }
  endOfHead(): void {}
}

/**
 * Segments, an assistant turn of a Responses request held back: its chat
 * translation joins a function_call to the assistant turn before it, so
 * that turn's boundary is known only when the next item is not a call.
 */
class SegmentBuilder {
  #pending: { role: string; text: string } | undefined;
  #headDone = false;
  /** `tools`: emitted once, at the end of the head (after the leading system messages). */
  constructor(
    private readonly sink: Sink,
    private readonly tools: readonly Segment[] = [],
  ) {}

  /** `hold`: later calls may join this segment (it is emitted at the next push or flush). */
  push(s: Segment, hold = false): void {
    this.flush();
    if (hold) this.#pending = { role: s.role, text: s.text };
    else this.sink.segment(s);
  }

  call(text: string): void {
    if (this.#pending?.role === 'assistant') this.#pending.text = joinLines([this.#pending.text, text]);
    else this.push({ role: 'assistant', text }, true);
  }

  flush(): void {
    if (this.#pending) this.sink.segment(this.#pending);
    this.#pending = undefined;
  }

  /** The leading system part ends here: the tools follow it, and the head ends with them. Once; later calls only flush. */
  endOfHead(): void {
    this.flush();
    if (this.#headDone) return;
    this.#headDone = true;
    for (const t of this.tools) this.sink.segment(t);
    this.sink.endOfHead();
  }
}


/**
 * The canonical segments of an already parsed chat-completions body (the
 * sim engine renders these), or undefined when it has no `messages` list.
 */
export function chatSegments(body: Record<string, unknown>): Segment[] | undefined {
  if (!Array.isArray(body.messages)) return undefined;
  const sink = new ListSink();
  readSegments('chat', new ObjectSource(body), sink, {});
  return sink.segments;
}

/** The prompt text of an already parsed completions body (its links fall every COMPLETION_LINK_CHARS of it), or undefined. */
export function completionText(body: Record<string, unknown>): string | undefined {
  const src = new ObjectSource(body);
  return completionPrompt(src)?.text;
}


export function readSegments(dialect: PromptDialect, src: Source, sink: Sink, opts: ChainOptions): void {
  if (dialect === 'completions') {
    const p = completionPrompt(src);
    if (!p) return;
    const { text, complete } = p;
    const end = complete ? text.length : text.length - (text.length % COMPLETION_LINK_CHARS);
    sink.endOfHead();
    for (let at = 0; at < end; at += COMPLETION_LINK_CHARS) sink.chunk(text.slice(at, Math.min(end, at + COMPLETION_LINK_CHARS)));
    return;
  }
  // Tools go where chat templates put them: right after the leading system message(s), one link each, before
  // the conversation (Qwen's and Llama's templates render them inside or just after the system turn). Read first,
  // so the walk's bound counts them first; a tools list cut at the bound leaves the chain empty.
  const tools = [...(src.array('tools') ?? [])].map((tool): Segment => ({ role: 'tools', text: toolText(tool) }));
  if (src.cut) return;
  const b = new SegmentBuilder(sink, tools);
  if (dialect === 'chat') chatBody(src, b);
  else if (dialect === 'responses') responsesBody(src, b);
  else messagesBody(src, b, opts);
  if (!src.cut) b.endOfHead();
  if (sink.head < 0) sink.endOfHead();
}

/** Chat: the messages in order; the head ends after the leading system (and developer) messages. */
function chatBody(src: Source, b: SegmentBuilder): void {
  let leading = true;
  for (const m of src.array('messages') ?? []) {
    const msg = isObj(m) ? m : {};
    const role = typeof msg.role === 'string' ? msg.role : 'user';
    if (leading && role !== 'system' && role !== 'developer') {
      leading = false;
      b.endOfHead();
    }
    b.push({ role, text: joinLines([canonicalContentText(msg.content), ...chatCalls(msg.tool_calls)]) });
  }
}

/**
 * Responses: `instructions` as the system message, then `input` (a string,
 * or items), as src/responses translates them for a chat engine — developer
 * as system, text parts joined by newlines, a function_call joined to the
 * assistant turn before it, reasoning items left out — so a Responses
 * request and its translation have one chain.
 */
function responsesBody(src: Source, b: SegmentBuilder): void {
  const instructions = src.string('instructions');
  if (instructions) {
    if (!instructions.complete) return;
    if (instructions.text !== '') b.push({ role: 'system', text: instructions.text });
  }
  const input = src.string('input');
  if (input) {
    if (!input.complete) return;
    b.endOfHead();
    b.push({ role: 'user', text: input.text });
    return;
  }
  let leading = true;
  for (const item of src.array('input') ?? []) {
    if (!isObj(item)) continue;
    const type = item.type ?? (item.role !== undefined ? 'message' : undefined);
    const role = item.role === 'developer' ? 'system' : typeof item.role === 'string' ? item.role : 'user';
    if (leading && !(type === 'message' && role === 'system')) {
      leading = false;
      b.endOfHead();
    }
    // An assistant turn is held back: a function_call after it joins it.
    if (type === 'message') b.push({ role, text: canonicalContentText(item.content) }, role === 'assistant');
    else if (type === 'function_call') b.call(callText(item.name, typeof item.arguments === 'string' ? item.arguments : '{}'));
    else if (type === 'function_call_output') b.push({ role: 'tool', text: canonicalContentText(item.output) });
    else if (type !== 'reasoning') b.push({ role: String(type), text: canonicalJson(item) });
  }
}

/**
 * Messages (Anthropic): `system` (a string or text blocks, joined by
 * newlines) as the system message, then each message; a user message's
 * tool_result blocks become tool messages before its text, an assistant's
 * tool_use blocks its tool calls (as chat translations do); thinking blocks
 * are left out.
 */
function messagesBody(src: Source, b: SegmentBuilder, opts: ChainOptions): void {
  const sys = src.string('system');
  if (sys) {
    if (!sys.complete) return;
    if (sys.text !== '') b.push({ role: 'system', text: sys.text });
  } else {
    const blocks: string[] = [];
    for (const blk of src.array('system') ?? []) {
      const text = isObj(blk) && typeof blk.text === 'string' ? blk.text : canonicalJson(blk);
      if (opts.hygiene && text.startsWith('x-anthropic-billing-header:')) continue;
      blocks.push(text);
    }
    if (src.cut) return;
    if (blocks.length > 0) b.push({ role: 'system', text: blocks.join('\n') });
  }
  b.endOfHead();
  for (const m of src.array('messages') ?? []) {
    const msg = isObj(m) ? m : {};
    const role = typeof msg.role === 'string' ? msg.role : 'user';
    if (!Array.isArray(msg.content)) {
      b.push({ role, text: canonicalContentText(msg.content) });
      continue;
    }
    const texts: string[] = [];
    const calls: string[] = [];
    for (const blk of msg.content) {
      if (!isObj(blk)) texts.push(canonicalContentText(blk));
      else if (blk.type === 'tool_result') b.push({ role: 'tool', text: canonicalContentText(blk.content) });
      else if (blk.type === 'tool_use') calls.push(callText(blk.name, canonicalJson(blk.input ?? {})));
      else if (blk.type === 'thinking' || blk.type === 'redacted_thinking') continue;
      else texts.push(partText(blk));
    }
    if (texts.length > 0 || calls.length > 0) b.push({ role, text: joinLines([texts.join('\n'), ...calls]) });
  }
}

function completionPrompt(src: Source): { text: string; complete: boolean } | undefined {
  const s = src.string('prompt');
  if (s) return s;
  const parts: string[] = [];
  let any = false;
  for (const p of src.array('prompt') ?? []) {
    any = true;
    parts.push(typeof p === 'string' ? p : JSON.stringify(p));
  }
  if (!any) return undefined;
  // A cut array keeps its whole elements; the text after the last one may continue.
  return { text: parts.join('\n'), complete: !src.cut };
}
