/**
 * Reading a client's JSON request for translation to chat completions
 * (the Responses room here, and the Messages room beside it): checks that
 * refuse with a 400 naming the field, and the guard that turns a refusal, or
 * anything unforeseen in a client's body, into that 400 instead of a crash.
 */
import type { TranslationError, TranslationErrorCode } from './types.ts';

export type Obj = Record<string, unknown>;
export const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
export const present = (v: unknown) => v !== undefined && v !== null;

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

/** Run a translation of a request body: its refusals, and anything unforeseen, become the client's 400. */
export function guardTranslation<R>(req: unknown, translate: (req: Obj) => R): R | { ok: false; error: TranslationError } {
  try {
    if (!isObj(req)) refuse('invalid_request', null, 'the request body must be a JSON object');
    return translate(req as Obj);
  } catch (err) {
    if (err instanceof Refusal) return { ok: false, error: { status: 400, message: err.message, code: err.code, param: err.param } };
    return { ok: false, error: { status: 400, message: `the request could not be translated to chat completions (${(err as Error)?.message ?? err})`, code: 'invalid_request', param: null } };
  }
}
