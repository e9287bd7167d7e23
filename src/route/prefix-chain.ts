/**
 * The prefix chain (SPEC section 9, step 6): one hash per boundary of a
 * prompt, each chained to the one before, over the prompt's canonical text
 * — never its JSON bytes, so whitespace, key order and escapes never change
 * a hash. One definition serves the entry node's router, the executor's
 * cache digests and the sim engine's cache model, so all three agree on
 * what "the first n messages" are and how many tokens they hold.
 *
 * Boundaries: chat (and Responses, Messages) at the leading system
 * message(s), then at every tool definition (one link per tool, so a tool
 * appended at the end keeps the earlier links), then at every message;
 * completions at every 1 KiB of prompt and at its end.
 *
 * Canonical text is what a chat template renders: each segment as
 * `<|role|>\ntext\n`, the tools (role `tools`) right after the leading
 * system message(s), as chat templates put them, a chat ending in
 * `<|assistant|>\n`. A link's `tokens` are the
 * rendered characters up to it ÷ 4 (the sim engine's stand-in tokenizer, so
 * the chain and the sim count alike; SPEC: bytes ÷ 4 where the engine has
 * not said).
 *
 * Bounded: at most CHAIN_WALK_MAX bytes of the body are walked in all, and
 * only the elements inside that walk are parsed (one at a time), so a 30 MiB
 * body costs what its first MiB costs; at most CHAIN_LINKS_MAX links are
 * made, whatever the messages' size. Past the bound the chain simply
 * stops: a prefix longer than that is priced as if nothing past it were
 * held. Pure: the same body gives the same chain on every node.
 */
import crypto from 'node:crypto';
import { isObj, type Obj } from '../chat/index.ts';
import { arrayElements, lastSpan, type ScannedObject, type Span } from '../http/json-scan.ts';
import type { ChainLink, PrefixChain } from './cache.ts';

/** Bytes of the body walked in all, for one chain. */
export const CHAIN_WALK_MAX = 1024 * 1024;
/**
 * Links in one chain at most: a body of 30,000 tiny messages inside the
 * 1 MiB walk would otherwise cost 100 ms and more of parsing and hashing
 * (and a digest holds at most 1,024 entries per target anyway).
 */
export const CHAIN_LINKS_MAX = 2048;
/** Completions: a boundary every this many characters of prompt. */
export const COMPLETION_LINK_CHARS = 1024;
/** Characters of canonical text per token (the sim engine's tokenizer stand-in; SPEC's bytes ÷ 4). */
export const CHARS_PER_TOKEN = 4;

/** One piece of canonical prompt: a tool definition (role `tools`) or a message. */
export interface Segment {
  readonly role: string;
  readonly text: string;
}

export interface ChainOptions {
  /**
   * Prompt-cache hygiene (api.agent_hygiene): system text blocks of a
   * Messages request that start with `x-anthropic-billing-header:` are left
   * out, as the node removes them before the engine sees them. Pass the
   * same value the executor's engines get, so the chain is what they hold.
   */
  hygiene?: boolean;
}

/** A chain with what routing also needs from the walk. */
export interface PromptWalk {
  readonly chain: PrefixChain;
  /**
   * Index of the first boundary — tools and system (chat), else the first
   * message; completions: the first 1 KiB — whose hash is the prefix key;
   * -1 when the chain is empty.
   */
  readonly head: number;
  /** The walk reached the prompt's end (false: cut at CHAIN_WALK_MAX, or the prompt is not readable). */
  readonly complete: boolean;
}

/** The prefix chain of a request body the scanner has already checked (see walkPrompt). */
export function prefixChain(body: Buffer, scan: ScannedObject, path: string, opts: ChainOptions = {}): PrefixChain {
  return walkPrompt(body, scan, path, opts).chain;
}

/** The prefix chain of a body, with its first boundary and whether it covers the whole prompt. */
export function walkPrompt(body: Buffer, scan: ScannedObject, path: string, opts: ChainOptions = {}): PromptWalk {
  const format = formatOf(path);
  const sink = new ChainSink();
  if (!format) return { chain: [], head: -1, complete: false };
  const src = new BodySource(body, scan, CHAIN_WALK_MAX, () => sink.links.length >= CHAIN_LINKS_MAX);
  walk(format, src, sink, opts);
  return { chain: sink.links, head: sink.head, complete: !src.cut && sink.links.length > 0 };
}

/** The prompt text a chat template renders from segments: the system message(s), the tools, then the conversation, then the assistant's opening. */
export function renderChat(segments: Iterable<Segment>): string {
  let out = '';
  for (const s of segments) out += renderSegment(s);
  return out + GENERATION_PROMPT;
}

/** One segment as the template renders it. */
export function renderSegment(s: Segment): string {
  return `<|${s.role}|>\n${s.text}\n`;
}

/** What a chat prompt ends with: the assistant's turn opening (not part of any link). */
export const GENERATION_PROMPT = '<|assistant|>\n';

/**
 * The canonical segments of an already parsed chat-completions body (the
 * sim engine renders these), or undefined when it has no `messages` list.
 */
export function chatSegments(body: Record<string, unknown>): Segment[] | undefined {
  if (!Array.isArray(body.messages)) return undefined;
  const sink = new ListSink();
  walk('chat', new ObjectSource(body), sink, {});
  return sink.segments;
}

/** The prompt text of an already parsed completions body (its links fall every COMPLETION_LINK_CHARS of it), or undefined. */
export function completionText(body: Record<string, unknown>): string | undefined {
  const src = new ObjectSource(body);
  return completionPrompt(src)?.text;
}

// ---- formats -----------------------------------------------------------

type Format = 'chat' | 'responses' | 'messages' | 'completions';

function formatOf(path: string): Format | undefined {
  switch (path) {
    case '/v1/chat/completions':
      return 'chat';
    case '/v1/responses':
      return 'responses';
    case '/v1/messages':
      return 'messages';
    case '/v1/completions':
      return 'completions';
    default:
      return undefined;
  }
}

function walk(format: Format, src: Source, sink: Sink, opts: ChainOptions): void {
  if (format === 'completions') {
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
  if (format === 'chat') chatBody(src, b);
  else if (format === 'responses') responsesBody(src, b);
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

// ---- canonical text ----------------------------------------------------

const TEXT_PARTS = new Set(['text', 'input_text', 'output_text']);

function partText(part: unknown): string {
  if (typeof part === 'string') return part;
  if (isObj(part)) {
    if (TEXT_PARTS.has(part.type as string) && typeof part.text === 'string') return part.text;
    if (part.type === 'refusal' && typeof part.refusal === 'string') return part.refusal;
    return canonicalJson(part);
  }
  return part === undefined || part === null ? '' : String(part);
}

/** A content value's canonical text: a string as it is, parts joined by newlines (as the Responses translation joins them), a part that is not text as canonical JSON. */
function canonicalContentText(content: unknown): string {
  if (Array.isArray(content)) return content.map(partText).join('\n');
  return partText(content);
}

function callText(name: unknown, args: string): string {
  return `<tool_call>${typeof name === 'string' ? name : ''} ${args}</tool_call>`;
}

function chatCalls(calls: unknown): string[] {
  if (!Array.isArray(calls)) return [];
  return calls.map((c) => {
    const fn = isObj(c) && isObj(c.function) ? c.function : {};
    return callText(fn.name, typeof fn.arguments === 'string' ? fn.arguments : canonicalJson(fn.arguments ?? {}));
  });
}

/** A tool definition in any of the three shapes (chat's nested `function`, Responses' flat, Messages' `input_schema`). */
function toolText(tool: unknown): string {
  if (!isObj(tool)) return canonicalJson(tool);
  const fn = isObj(tool.function) ? tool.function : tool;
  if (typeof fn.name !== 'string') return canonicalJson(tool);
  const params = fn.parameters ?? fn.input_schema ?? {};
  return `${fn.name}\n${typeof fn.description === 'string' ? fn.description : ''}\n${canonicalJson(params)}`;
}

function joinLines(parts: readonly string[]): string {
  return parts.filter((p) => p !== '').join('\n');
}

/** JSON with object keys sorted at every level: the same value always gives the same text. */
export function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (isObj(v))
    return `{${Object.keys(v)
      .sort()
      .filter((k) => v[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${canonicalJson(v[k])}`)
      .join(',')}}`;
  return JSON.stringify(v) ?? 'null';
}

// ---- building --------------------------------------------------------------

/** Where segments go: hashed into links (the router, digests) or collected (the sim's rendering). */
interface Sink {
  /** A whole segment, as it ends a boundary. */
  segment(s: Segment): void;
  /** A completions chunk of raw prompt text. */
  chunk(text: string): void;
  /** The boundary just emitted (or, with none yet, the next one) is the head. */
  endOfHead(): void;
  readonly head: number;
}

class ChainSink implements Sink {
  readonly links: ChainLink[] = [];
  head = -1;
  #headNext = false;
  #prev = '';
  #chars = 0;

  segment(s: Segment): void {
    this.chunk(renderSegment(s));
  }

  chunk(text: string): void {
    if (this.links.length >= CHAIN_LINKS_MAX) return;
    this.#chars += text.length;
    // The previous hash is 16 hex digits (or nothing, first), so hash input never runs ambiguously into the text.
    this.#prev = crypto.createHash('sha256').update(this.#prev).update(text, 'utf8').digest('hex').slice(0, 16);
    this.links.push({ hash: this.#prev, tokens: Math.floor(this.#chars / CHARS_PER_TOKEN) });
    if (this.#headNext) {
      this.head = this.links.length - 1;
      this.#headNext = false;
    }
  }

  endOfHead(): void {
    if (this.head >= 0 || this.#headNext) return;
    if (this.links.length > 0) this.head = this.links.length - 1;
    else this.#headNext = true;
  }
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

// ---- sources: the raw body (bounded) or a parsed object ----------------------

interface Source {
  /** A top-level string member (undefined: absent or not a string); `complete` false when cut at the bound. */
  string(key: string): { text: string; complete: boolean } | undefined;
  /** A top-level array member's elements, parsed, as far as the bound (then `cut` is set). */
  array(key: string): Iterable<unknown> | undefined;
  /** The bound stopped a walk: nothing after it may be emitted. */
  readonly cut: boolean;
}

class ObjectSource implements Source {
  readonly cut = false;
  constructor(private readonly o: Obj) {}
  string(key: string) {
    const v = this.o[key];
    return typeof v === 'string' ? { text: v, complete: true } : undefined;
  }
  array(key: string) {
    const v = this.o[key];
    return Array.isArray(v) ? v : undefined;
  }
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

class BodySource implements Source {
  cut = false;
  constructor(
    private readonly body: Buffer,
    private readonly scan: ScannedObject,
    private budget: number,
    /** The chain has as many links as it may: stop as if the walk's bound were reached. */
    private readonly full: () => boolean = () => false,
  ) {}

  string(key: string) {
    const span = lastSpan(this.scan, key);
    if (!span || this.body[span.start] !== QUOTE || this.cut) return undefined;
    const len = span.end - span.start;
    if (len <= this.budget) {
      this.budget -= len;
      return { text: JSON.parse(this.body.toString('utf8', span.start, span.end)) as string, complete: true };
    }
    const text = decodeStringPrefix(this.body, span, this.budget);
    this.budget = 0;
    this.cut = true;
    return { text, complete: false };
  }

  array(key: string): Iterable<unknown> | undefined {
    const span = lastSpan(this.scan, key);
    if (!span || this.body[span.start] !== 0x5b || this.cut) return undefined;
    return this.#elements(span);
  }

  *#elements(span: Span): Generator<unknown> {
    const limit = this.budget;
    let walked = 1;
    for (const el of arrayElements(this.body, span, limit)) {
      walked = el.end - span.start;
      let value: unknown;
      try {
        value = JSON.parse(this.body.toString('utf8', el.start, el.end));
      } catch {
        // Only an element cut at the bound fails to parse (the scanner checked the body).
        this.cut = true;
        this.budget = 0;
        return;
      }
      this.budget = Math.max(0, limit - walked);
      yield value;
      if (this.cut) return;
      if (this.full()) {
        this.cut = true;
        this.budget = 0;
        return;
      }
    }
    if (span.end - span.start - 1 > limit) {
      this.cut = true;
      this.budget = 0;
    } else this.budget = Math.max(0, limit - (span.end - span.start));
  }
}

/** The text of a JSON string's first `max` bytes (never splitting an escape or a UTF-8 sequence). */
function decodeStringPrefix(buf: Buffer, span: Span, max: number): string {
  let cut = span.start + Math.max(1, max);
  while (cut > span.start + 1 && (buf[cut] & 0xc0) === 0x80) cut--;
  const escapeAt = (p: number) => {
    let k = p - 1;
    while (k > span.start && buf[k] === BACKSLASH) k--;
    return (p - 1 - k) % 2 === 0; // an even run of backslashes before p: p opens an escape
  };
  for (let p = Math.max(span.start + 1, cut - 5); p < cut; p++) {
    if (buf[p] === BACKSLASH && escapeAt(p) && (buf[p + 1] === 0x75 ? p + 6 > cut : p + 2 > cut)) {
      cut = p;
      break;
    }
  }
  return JSON.parse(`${buf.toString('utf8', span.start, cut)}"`) as string;
}
