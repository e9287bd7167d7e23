/** A conversation outliving its host (SPEC 13): today, a cut stream continued on another host. */
export { continuationBody, cutEnding, Splice, spliceTranslator, type ContinuationBody } from './continuation.ts';
export { isContinuedDialect, Transcript, type ContinuedDialect } from './transcript.ts';
