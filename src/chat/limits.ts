/**
 * How much a translation to chat takes: the request body's size, and bounds
 * inside it. Past one, the client gets a 413 or a 400 `input_too_large`
 * rather than a node that parses or walks an unbounded body on its event loop.
 */

/** A request body larger than this is not translated (it would be parsed whole on the event loop). */
export const TRANSLATE_MAX = 8 * 1024 * 1024;

/** Bounds inside a request body; past one, a 400 `input_too_large`. */
export interface TranslationLimits {
  /** Nesting depth of the whole request body (objects and arrays). */
  maxDepth: number;
  /** Items in `input` (Responses), turns in `messages` (Messages). */
  maxInputItems: number;
  /** Content parts in one message. */
  maxContentParts: number;
  /** Entries in `tools`. */
  maxTools: number;
}

export const DEFAULT_LIMITS: TranslationLimits = { maxDepth: 64, maxInputItems: 4096, maxContentParts: 1024, maxTools: 512 };
