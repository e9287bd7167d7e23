/**
 * The life of one translated stream, which every API's stream translator
 * (Responses, Messages) lives the same way: the engine's bytes decoded into
 * chunks, opening events once, each chunk read and handed on, and one end:
 * completed when the engine said it finished (a finish_reason or [DONE]),
 * failed when it broke, reported an error or stopped short. A subclass writes
 * only its API's events. Pure: feed it, write what it returns.
 */
import { readChatChunk, type ChatChunk } from './answer.ts';
import { ChatSseDecoder, type ChatSseData } from './sse.ts';

export abstract class ChatStreamTranslator {
  #started = false;
  #finished = false;
  #finishReason: unknown;
  readonly #decoder = new ChatSseDecoder();

  /** `answer` names what the client's API streams ('response', 'message'), for the failure of a stream that stops short. */
  constructor(private readonly answer: string) {}

  /** True once the stream's end (completed or failed) was produced; later calls return ''. */
  get finished(): boolean {
    return this.#finished;
  }

  /** The stream's opening events; produced at most once (push does it on its own). */
  start(): string {
    if (this.#started) return '';
    this.#started = true;
    return this.opening();
  }

  /** One parsed `data:` payload of the chat stream, or '[DONE]'. */
  push(chunk: unknown): string {
    if (this.#finished) return '';
    if (chunk === '[DONE]') return this.#complete();
    const out = this.start();
    const c = readChatChunk(chunk);
    if (c.error !== undefined) return out + this.error(c.error);
    const events = this.translate(c);
    if (c.finishReason !== undefined) this.#finishReason = c.finishReason;
    return out + events;
  }

  /**
   * Raw bytes of the chat stream, as they arrive from the engine: decoded
   * into events and pushed. Call `end()` when the engine's body ends.
   */
  pushBytes(bytes: Buffer | string): string {
    return this.#deliver(this.#decoder.push(bytes));
  }

  /**
   * The engine's stream ended: completes when the engine said it finished
   * (a finish_reason or [DONE]); otherwise a failure.
   */
  end(): string {
    const out = this.#deliver(this.#decoder.end());
    if (this.#finished) return out;
    if (this.#finishReason !== undefined) return out + this.#complete();
    return out + this.error(`the engine's stream ended before the ${this.answer} was complete`);
  }

  /** A failure mid-stream (engine gone, stall, a bad event): the API's failure events. Terminal. `code` where the API's error shape has one. */
  error(message: string, code?: string): string {
    if (this.#finished) return '';
    const out = this.start();
    this.#finished = true;
    return out + this.failure(message, code);
  }

  /** The events that open the stream. */
  protected abstract opening(): string;
  /** The events for one chunk's content (its finish reason is kept here, for the end). */
  protected abstract translate(chunk: ChatChunk): string;
  /** The events that end a stream the engine finished (`finishReason` undefined after a bare [DONE]). */
  protected abstract completion(finishReason: unknown): string;
  /** The events that end a failed stream. */
  protected abstract failure(message: string, code?: string): string;

  #complete(): string {
    const out = this.start();
    this.#finished = true;
    return out + this.completion(this.#finishReason);
  }

  #deliver(decoded: ChatSseData[]): string {
    let out = '';
    for (const d of decoded) out += d.kind === 'data' ? this.push(d.value) : d.kind === 'done' ? this.push('[DONE]') : this.error(d.reason);
    return out;
  }
}
