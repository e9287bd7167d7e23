/**
 * Field guards for JSON of unknown shape (a client's body, an engine's
 * answer): the one definition every room that reads such JSON uses, so
 * "an object" means the same everywhere (not null, not an array).
 */

export type Obj = Record<string, unknown>;

export const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A field the client set: JSON's null counts as absent, as the OpenAI and Anthropic APIs treat it. */
export const present = (v: unknown) => v !== undefined && v !== null;
