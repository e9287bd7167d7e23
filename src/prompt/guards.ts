type Obj = Record<string, unknown>;
/** A JSON object (not an array, not null). */
export const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
