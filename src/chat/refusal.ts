/**
 * How a translation of a client's request to a chat completion (Responses,
 * Messages) says no: checks that refuse with a 400 naming the field, and the
 * guard that turns a refusal, or anything unforeseen in a client's body, into
 * that 400 instead of a crash. A translation never throws to its caller.
 */
import { isObj, type Obj } from './fields.ts';
import { DEFAULT_LIMITS, type TranslationLimits } from './limits.ts';
import type { ChatRequest } from './types.ts';

/** A 400 the API layer sends in the client API's error shape. */
export interface TranslationError {
  status: 400;
  message: string;
  /** Machine-readable: `invalid_request`, `unsupported_parameter`, `unsupported_tool`, `unsupported_input`, `stateful_request`, `input_too_large`. */
  code: TranslationErrorCode;
  /** The request field at fault, as a path (`input[3].content[0].type`), or null. */
  param: string | null;
}

export type TranslationErrorCode =
  | 'invalid_request'
  | 'unsupported_parameter'
  | 'unsupported_tool'
  | 'unsupported_input'
  | 'stateful_request'
  | 'input_too_large';

/** What every translation of a request takes besides the body. */
export interface TranslationOptions {
  /** Bounds that differ from DEFAULT_LIMITS. */
  limits?: Partial<TranslationLimits>;
}

/** A translation's answer: the chat request and what the answer translators need of the client's (`M`), or the 400. */
export type TranslationResult<M> = { ok: true; chat: ChatRequest; meta: M } | { ok: false; error: TranslationError };

class Refusal {
  constructor(
    readonly code: TranslationErrorCode,
    readonly param: string | null,
    readonly message: string,
  ) {}
}

/** End the translation with a 400 about `param`. */
export const refuse = (code: TranslationErrorCode, param: string | null, message: string): never => {
  throw new Refusal(code, param, message);
};

export function str(v: unknown, param: string): string {
  if (typeof v !== 'string') refuse('invalid_request', param, `${param} must be a string`);
  return v as string;
}

export function num(v: unknown, param: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max) refuse('invalid_request', param, `${param} must be a number from ${min} to ${max}`);
  return v as number;
}

/** Run a translation of a request body within its bounds: its refusals, and anything unforeseen, become the client's 400. */
export function guardTranslation<R>(req: unknown, limits: Partial<TranslationLimits> | undefined, translate: (req: Obj, limits: TranslationLimits) => R): R | { ok: false; error: TranslationError } {
  const bounds = { ...DEFAULT_LIMITS, ...limits };
  try {
    if (!isObj(req)) refuse('invalid_request', null, 'the request body must be a JSON object');
    return translate(req as Obj, bounds);
  } catch (err) {
    if (err instanceof Refusal) return { ok: false, error: { status: 400, message: err.message, code: err.code, param: err.param } };
    return { ok: false, error: { status: 400, message: `the request could not be translated to chat completions (${(err as Error)?.message ?? err})`, code: 'invalid_request', param: null } };
  }
}
